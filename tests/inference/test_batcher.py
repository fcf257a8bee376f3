"""MicroBatcher: correctness under concurrency, batching, budgets, overload, failures, shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY

from service.config import Settings
from service.inference.batcher import (
    BatcherClosed,
    MicroBatcher,
    Overloaded,
)
from service.inference.pair_classifier import PairClassifier
from tests.inference.tiny_models import TinyModel, mixed_pairs

Pair = tuple[str, str]
_names = iter(range(10**6))


def unique_name(prefix: str) -> str:
    """Metric label per test, so counters from other tests do not mix in."""
    return f"{prefix}-{next(_names)}"


class FakeModel:
    """Scores a pair by its word count; records every batch it was given."""

    def __init__(
        self,
        *,
        delay: float = 0.0,
        gate: threading.Event | None = None,
        fail: Callable[[int], bool] | None = None,
    ) -> None:
        self.delay = delay
        self.gate = gate
        self.fail = fail
        self.batches: list[list[Pair]] = []
        self.threads: set[str] = set()

    @staticmethod
    def tokens(pair: Pair) -> int:
        return len(pair[0].split()) + len(pair[1].split()) + 3

    def token_counts(self, pairs: Sequence[Pair]) -> list[int]:
        return [self.tokens(p) for p in pairs]

    def score(self, pairs: Sequence[Pair]) -> np.ndarray:
        self.threads.add(threading.current_thread().name)
        call = len(self.batches)
        self.batches.append(list(pairs))
        if self.gate is not None:
            self.gate.wait(timeout=10)
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None and self.fail(call):
            raise RuntimeError(f"model exploded on call {call}")
        return np.array([self.tokens(p) / 1000 for p in pairs], dtype=np.float32)


def pair_of(tokens: int, tag: str = "") -> Pair:
    """A pair the FakeModel counts as ``tokens`` tokens (at least 5)."""
    assert tokens >= 5
    return (" ".join(["w"] * (tokens - 5) + [f"{tag}x"]), "y")


async def eventually(condition: Callable[[], bool]) -> None:
    """Poll until ``condition`` holds (state changed by another task or the model's thread)."""
    deadline = time.monotonic() + 5.0
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


@pytest.fixture
async def make_batcher() -> AsyncIterator[Callable[..., MicroBatcher]]:
    started: list[MicroBatcher] = []

    def make(model: object, **kwargs: object) -> MicroBatcher:
        kwargs.setdefault("name", unique_name("fake"))
        batcher = MicroBatcher(model, **kwargs)  # type: ignore[arg-type]
        started.append(batcher)
        return batcher

    yield make
    for batcher in started:
        await batcher.aclose()


def metric(name: str, model: str) -> float:
    return REGISTRY.get_sample_value(name, {"model": model}) or 0.0


async def test_many_concurrent_submits_match_direct_scoring(
    tiny: TinyModel, make_batcher: Callable[..., MicroBatcher]
) -> None:
    # The fp32 graph: with dynamic int8 an item's score depends slightly on its batch
    # neighbours (activation scales are per batch), so only fp32 can be compared exactly.
    classifier = PairClassifier.from_graph(tiny.dir, tiny.fp32_graph, threads=1)
    name = unique_name(tiny.arch)
    batcher = make_batcher(classifier, name=name, max_tokens=2048, max_size=32, max_wait_ms=5)
    await batcher.start()
    pairs = mixed_pairs(400, seed=11, longest=14)
    requests = [pairs[i : i + 2] for i in range(0, 400, 2)]  # 200 submits of 2 pairs
    expected = classifier.score(pairs)

    results = await asyncio.wait_for(
        asyncio.gather(*(batcher.submit(r) for r in requests)), timeout=30
    )
    np.testing.assert_allclose(np.concatenate(results), expected, atol=1e-5)
    batches = metric("tailor_inference_batch_size_count", name)
    items = metric("tailor_inference_batch_size_sum", name)
    assert items == 400
    assert items / batches > 4, f"{batches} batches for 400 items: batching did not happen"
    assert metric("tailor_inference_items_total", name) == 400
    assert metric("tailor_inference_queue_depth", name) == 0


async def test_results_come_back_in_submit_order(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, max_tokens=4096, max_size=64, max_wait_ms=20)
    await batcher.start()
    # Lengths out of order, so the batcher's length sort really reorders them.
    sizes = [9, 5, 30, 5, 17, 6, 22, 6]
    items = [pair_of(n, str(i)) for i, n in enumerate(sizes)]
    scores = await asyncio.wait_for(batcher.submit(items), timeout=5)
    np.testing.assert_allclose(scores, [FakeModel.tokens(p) / 1000 for p in items], rtol=1e-6)


async def test_token_budget_and_size_are_respected(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    model = FakeModel()
    budget = 64
    batcher = make_batcher(model, max_tokens=budget, max_size=5, max_wait_ms=30)
    await batcher.start()
    sizes = [5, 5, 6, 8, 10, 12, 16, 20, 30, 33, 5, 5, 5, 5, 5, 5, 5, 7, 9, 100]
    results = await asyncio.wait_for(
        asyncio.gather(*(batcher.submit([pair_of(n, str(i))]) for i, n in enumerate(sizes))),
        timeout=5,
    )
    assert len(results) == len(sizes)
    seen = sorted(FakeModel.tokens(p) for batch in model.batches for p in batch)
    assert seen == sorted(sizes)
    for batch in model.batches:
        lengths = [FakeModel.tokens(p) for p in batch]
        assert len(batch) <= 5
        if len(batch) > 1:
            assert len(batch) * max(lengths) <= budget, lengths
        else:
            assert lengths[0] <= budget or lengths[0] == 100  # too big alone: still served
    assert any(len(b) > 1 for b in model.batches)


async def test_similar_lengths_share_a_batch(make_batcher: Callable[..., MicroBatcher]) -> None:
    model = FakeModel()
    batcher = make_batcher(model, max_tokens=10_000, max_size=2, max_wait_ms=50)
    await batcher.start()
    items = [pair_of(n, str(i)) for i, n in enumerate([5, 50, 6, 49])]
    await asyncio.wait_for(batcher.submit(items), timeout=5)
    grouped = sorted(sorted(FakeModel.tokens(p) for p in batch) for batch in model.batches)
    assert grouped == [[5, 6], [49, 50]]


async def test_items_wait_up_to_max_wait_for_companions(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, max_wait_ms=300)
    await batcher.start()
    started = time.perf_counter()
    first = asyncio.create_task(batcher.submit([pair_of(5, "early")]))
    await asyncio.sleep(0.05)
    await asyncio.wait_for(batcher.submit([pair_of(6, "late")]), timeout=5)
    await first
    assert [len(b) for b in model.batches] == [2], "the late item should have joined"
    # ...but the wait is bounded: a lone item leaves after max_wait.
    assert 0.25 <= time.perf_counter() - started < 2
    started = time.perf_counter()
    await asyncio.wait_for(batcher.submit([pair_of(7, "alone")]), timeout=5)
    assert 0.25 <= time.perf_counter() - started < 2


async def test_a_full_batch_does_not_wait(make_batcher: Callable[..., MicroBatcher]) -> None:
    model = FakeModel()
    batcher = make_batcher(model, max_wait_ms=10_000, max_size=3)
    await batcher.start()
    items = [pair_of(5, str(i)) for i in range(3)]
    await asyncio.wait_for(batcher.submit(items), timeout=2)


async def test_full_queue_raises_overloaded_with_retry_after(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    gate = threading.Event()
    model = FakeModel(gate=gate)
    name = unique_name("full")
    batcher = make_batcher(model, name=name, max_tokens=4096, max_size=4, queue_size=10)
    await batcher.start()
    try:
        running = asyncio.create_task(batcher.submit([pair_of(5, "first")]))
        await eventually(lambda: bool(model.batches))  # the first batch is blocked in the model
        waiting = asyncio.create_task(batcher.submit([pair_of(5, str(i)) for i in range(10)]))
        await eventually(lambda: batcher.waiting >= 10)
        with pytest.raises(Overloaded) as caught:
            await batcher.submit([pair_of(5, "one-too-many")])
        assert caught.value.retry_after >= 1
        assert metric("tailor_inference_overload_rejections_total", name) == 1
        assert metric("tailor_inference_queue_depth", name) == 10
    finally:
        gate.set()
    await asyncio.wait_for(asyncio.gather(running, waiting), timeout=5)
    # Once drained, the same submission is accepted.
    assert (await batcher.submit([pair_of(5, "later")])).shape == (1,)


async def test_retry_after_follows_throughput(make_batcher: Callable[..., MicroBatcher]) -> None:
    model = FakeModel(delay=0.05)  # ~20 items/s with one item per batch
    batcher = make_batcher(model, max_size=1, max_wait_ms=0, queue_size=1000)
    await batcher.start()
    for i in range(3):
        await batcher.submit([pair_of(5, str(i))])
    assert batcher.retry_after() == 1  # nothing waiting
    backlog = asyncio.create_task(batcher.submit([pair_of(5, str(i)) for i in range(100)]))
    await eventually(lambda: batcher.waiting >= 90)
    assert 3 <= batcher.retry_after() <= 10  # ~95 items at ~20/s
    backlog.cancel()


async def test_model_error_fails_its_batch_and_serving_continues(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    model = FakeModel(fail=lambda call: call == 0, delay=0.01)
    batcher = make_batcher(model, max_tokens=4096, max_size=64, max_wait_ms=30)
    await batcher.start()
    outcomes = await asyncio.wait_for(
        asyncio.gather(
            *(batcher.submit([pair_of(5, str(i))]) for i in range(10)), return_exceptions=True
        ),
        timeout=5,
    )
    assert len(model.batches) == 1, "all ten should have shared the failing batch"
    assert all(isinstance(o, RuntimeError) and "exploded" in str(o) for o in outcomes)
    assert batcher.running
    scores = await asyncio.wait_for(batcher.submit([pair_of(6, "after")]), timeout=5)
    assert scores.tolist() == pytest.approx([0.006])


async def test_wrong_number_of_scores_is_an_error_not_a_hang(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    class Short(FakeModel):
        def score(self, pairs: Sequence[Pair]) -> np.ndarray:
            return super().score(pairs)[:-1]

    batcher = make_batcher(Short())
    await batcher.start()
    with pytest.raises(RuntimeError, match="scores"):
        await asyncio.wait_for(batcher.submit([pair_of(5), pair_of(6)]), timeout=5)


async def test_event_loop_stays_responsive_during_inference(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    model = FakeModel(delay=0.4)  # a blocking (GIL-releasing) model call
    batcher = make_batcher(model)
    await batcher.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    await asyncio.wait_for(batcher.submit([pair_of(5)]), timeout=5)
    elapsed = time.perf_counter() - started
    task.cancel()
    assert elapsed >= 0.4
    assert ticks >= 15, f"only {ticks} ticks in {elapsed:.2f}s: the loop was blocked"
    assert model.threads and all(t.startswith("infer-") for t in model.threads)


async def test_aclose_fails_pending_submits(make_batcher: Callable[..., MicroBatcher]) -> None:
    gate = threading.Event()
    model = FakeModel(gate=gate)
    batcher = make_batcher(model, max_size=1, max_wait_ms=0)
    await batcher.start()
    first = asyncio.create_task(batcher.submit([pair_of(5, "running")]))
    await eventually(lambda: bool(model.batches))
    queued = asyncio.create_task(batcher.submit([pair_of(5, "queued")]))
    await eventually(lambda: batcher.waiting >= 1)
    await asyncio.wait_for(batcher.aclose(), timeout=2)
    gate.set()
    for task in (first, queued):
        with pytest.raises(BatcherClosed):
            await asyncio.wait_for(task, timeout=2)
    assert not batcher.running
    with pytest.raises(BatcherClosed):
        await batcher.submit([pair_of(5, "after close")])


async def test_submit_before_start_is_refused(make_batcher: Callable[..., MicroBatcher]) -> None:
    batcher = make_batcher(FakeModel())
    with pytest.raises(BatcherClosed):
        await batcher.submit([pair_of(5)])
    assert (await batcher.submit([])).shape == (0,)


async def test_cancelled_caller_does_not_disturb_others(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    gate = threading.Event()
    model = FakeModel(gate=gate)
    batcher = make_batcher(model, max_size=1, max_wait_ms=0)
    await batcher.start()
    blocker = asyncio.create_task(batcher.submit([pair_of(5, "blocker")]))
    await eventually(lambda: bool(model.batches))
    gone = asyncio.create_task(batcher.submit([pair_of(6, "gone")]))
    kept = asyncio.create_task(batcher.submit([pair_of(7, "kept")]))
    await eventually(lambda: batcher.waiting >= 2)
    gone.cancel()
    gate.set()
    assert (await asyncio.wait_for(kept, timeout=5)).tolist() == pytest.approx([0.007])
    await blocker
    # The cancelled caller's pair was never run.
    assert not any("gone" in p[0] for batch in model.batches for p in batch)


async def test_from_settings_uses_the_batch_settings(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        batch_max_tokens=1000,
        batch_max_size=7,
        batch_max_wait_ms=2.5,
        batch_queue_size=99,
    )
    batcher = MicroBatcher.from_settings(FakeModel(), "from-settings", settings)
    assert (batcher.max_tokens, batcher.max_size, batcher.queue_size) == (1000, 7, 99)
    assert batcher.max_wait == pytest.approx(0.0025)
    assert batcher.workers == settings.resolved_batch_workers


def test_workers_default_to_the_cpus_over_the_threads_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("service.config.available_cpus", lambda: 2)
    assert Settings(data_dir=tmp_path, onnx_intra_op_threads=1).resolved_batch_workers == 2
    assert Settings(data_dir=tmp_path, onnx_intra_op_threads=2).resolved_batch_workers == 1
    assert Settings(data_dir=tmp_path, onnx_intra_op_threads=4).resolved_batch_workers == 1
    monkeypatch.setattr("service.config.available_cpus", lambda: 16)
    assert Settings(data_dir=tmp_path, onnx_intra_op_threads=8).resolved_batch_workers == 2
    explicit = Settings(data_dir=tmp_path, onnx_intra_op_threads=1, batch_workers=3)
    assert explicit.resolved_batch_workers == 3


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="workers"):
        MicroBatcher(FakeModel(), name=unique_name("zero"), workers=0)


async def test_workers_run_batches_at_once_and_queue_beyond_them(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    """With two workers a second batch starts while the first is still running; a third waits
    for a free worker and then joins the next window with what arrived meanwhile."""
    gate = threading.Event()
    model = FakeModel(gate=gate)
    batcher = make_batcher(model, max_size=1, max_wait_ms=0, workers=2)
    await batcher.start()
    first = asyncio.create_task(batcher.submit([pair_of(5, "a")]))
    second = asyncio.create_task(batcher.submit([pair_of(6, "b")]))
    await eventually(lambda: len(model.batches) == 2)  # both running, neither finished
    third = asyncio.create_task(batcher.submit([pair_of(7, "c")]))
    await asyncio.sleep(0.05)
    assert len(model.batches) == 2 and batcher.waiting == 1
    gate.set()
    scores = await asyncio.wait_for(asyncio.gather(first, second, third), timeout=5)
    assert [float(s[0]) for s in scores] == pytest.approx([0.005, 0.006, 0.007])
    assert len(model.threads) == 2


async def test_aclose_fails_the_items_of_every_running_batch(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    gate = threading.Event()
    model = FakeModel(gate=gate)
    batcher = make_batcher(model, max_size=1, max_wait_ms=0, workers=2)
    await batcher.start()
    running = [asyncio.create_task(batcher.submit([pair_of(5 + k)])) for k in range(2)]
    await eventually(lambda: len(model.batches) == 2)
    queued = asyncio.create_task(batcher.submit([pair_of(9)]))
    await eventually(lambda: batcher.waiting >= 1)
    await asyncio.wait_for(batcher.aclose(), timeout=2)
    gate.set()
    for task in (*running, queued):
        with pytest.raises(BatcherClosed):
            await asyncio.wait_for(task, timeout=2)


class FakeVectors:
    """An embedder-shaped model: items are single texts, each answered with a row [3]."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) + 2 for t in texts]

    def score(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return np.array([[len(t), len(t.split()), 1.0] for t in texts], dtype=np.float32)


async def test_items_may_be_texts_answered_with_vectors(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    model = FakeVectors()
    batcher = make_batcher(model, max_wait_ms=20)
    await batcher.start()
    texts = [f"text {'w ' * i}".strip() for i in range(12)]
    results = await asyncio.gather(*(batcher.submit([t]) for t in texts))
    for text, rows in zip(texts, results, strict=True):
        assert rows.shape == (1, 3)
        assert rows[0].tolist() == [len(text), len(text.split()), 1.0]
    assert len(model.batches) < len(texts)  # concurrent texts shared runs
    both = await batcher.submit(texts[:2])
    assert both.shape == (2, 3) and both.dtype == np.float32


async def test_a_whole_batch_runs_alone_in_the_model_thread_between_live_batches(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    """submit_batch (the evaluation judges): its items are one model call of their own, never
    merged with live items, in the batcher's thread, and live submits still get served."""
    gate = threading.Event()
    model = FakeModel(gate=gate)
    name = unique_name("whole")
    batcher = make_batcher(model, name=name, max_size=64, max_wait_ms=20)
    await batcher.start()
    live = asyncio.create_task(batcher.submit([pair_of(5, "live")]))
    await eventually(lambda: len(model.batches) == 1)  # the live batch holds the thread
    whole = [pair_of(6, "a"), pair_of(7, "b"), pair_of(8, "c")]
    judged = asyncio.create_task(batcher.submit_batch(whole))
    later = asyncio.create_task(batcher.submit([pair_of(9, "later")]))
    await asyncio.sleep(0.05)
    gate.set()
    scores, _, _ = await asyncio.wait_for(asyncio.gather(judged, live, later), timeout=5)
    assert list(scores) == pytest.approx([6 / 1000, 7 / 1000, 8 / 1000])
    assert whole in model.batches  # exactly its items, in its order, as one call
    assert all(not (set(b) & set(whole)) or b == whole for b in model.batches)
    assert model.threads == {t for t in model.threads if t.startswith(f"infer-{name}")}
    assert metric("tailor_inference_items_total", name) == 5


async def test_a_whole_batch_before_start_is_refused(
    make_batcher: Callable[..., MicroBatcher],
) -> None:
    batcher = make_batcher(FakeModel())
    with pytest.raises(BatcherClosed):
        await batcher.submit_batch([pair_of(5)])
    assert (await batcher.submit_batch([])).shape == (0,)
