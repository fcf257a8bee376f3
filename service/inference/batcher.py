"""Micro-batching: concurrent requests' items share model runs.

A transformer run costs roughly rows x padded length, plus a fixed overhead per call that dominates
for one short item. One batcher per model gathers the items of all in-flight requests for a few
milliseconds, groups similar lengths (padding is wasted work) and runs the groups in worker
threads of its own, so the event loop never blocks on the model. With ``workers`` above one,
that many batches of the model run at once (ONNX Runtime sessions take concurrent runs): with
one intra-op thread per session, a single worker keeps one core busy at most, however much work
is queued, while the other cores idle between requests' Python work. An item is a (text, text)
pair for the cross-encoders (one score each) and a text for the embedder (one vector each).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from service import metrics
from service.config import Settings

log = logging.getLogger("tailor.inference")

Pair = tuple[str, str]
Float32Array = NDArray[np.float32]
ItemT = TypeVar("ItemT")
ItemT_contra = TypeVar("ItemT_contra", contravariant=True)

# How many full batches one collection may take from the queue before it runs them. More gives
# the length sort more to choose from; fewer lets items that arrive meanwhile join sooner.
WINDOW_BATCHES = 4
# Weight of the newest batch in the throughput estimate behind Retry-After.
THROUGHPUT_ALPHA = 0.2
MAX_RETRY_AFTER_S = 60


class BatchModel(Protocol[ItemT_contra]):
    """What the batcher needs of a model (PairClassifier, the embedder, or a fake in tests)."""

    def token_counts(self, items: Sequence[ItemT_contra]) -> list[int]: ...

    def score(self, items: Sequence[ItemT_contra]) -> Float32Array:
        """One row per item, in their order: [n] scores, or [n, dim] vectors."""
        ...


PairModel = BatchModel[Pair]


class Overloaded(Exception):
    """The model's queue is full; the caller should come back after ``retry_after`` seconds."""

    def __init__(self, model: str, retry_after: int) -> None:
        super().__init__(f"model '{model}' is overloaded; retry after {retry_after} s")
        self.model = model
        self.retry_after = retry_after


class BatcherClosed(RuntimeError):
    """The batcher was shut down (or never started) before the item was scored."""


@dataclass(slots=True)
class _Item(Generic[ItemT]):
    item: ItemT
    tokens: int
    future: asyncio.Future[Any]  # the item's row of the model's output
    enqueued: float


class MicroBatcher(Generic[ItemT]):
    def __init__(
        self,
        model: BatchModel[ItemT],
        *,
        name: str,
        max_tokens: int = 8192,
        max_size: int = 64,
        max_wait_ms: float = 4.0,
        queue_size: int = 2048,
        workers: int = 1,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.model = model
        self.name = name
        self.max_tokens = max_tokens
        self.max_size = max_size
        self.max_wait = max_wait_ms / 1000.0
        self.queue_size = queue_size
        self.workers = workers
        self._queue: collections.deque[_Item[ItemT]] = collections.deque()
        # Accepted items whose tokens are still being counted: not queued yet, but they count
        # against the queue bound like queued ones.
        self._reserved = 0
        self._wakeup = asyncio.Event()  # set by submit, awaited by the serving task
        self._task: asyncio.Task[None] | None = None
        self._runs: set[asyncio.Task[None]] = set()  # batches running in the workers
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self._items_per_second: float | None = None
        self._depth = metrics.INFERENCE_QUEUE_DEPTH.labels(model=name)
        self._batch_size = metrics.INFERENCE_BATCH_SIZE.labels(model=name)
        self._batch_tokens = metrics.INFERENCE_BATCH_TOKENS.labels(model=name)
        self._seconds = metrics.INFERENCE_SECONDS.labels(model=name)
        self._items = metrics.INFERENCE_ITEMS.labels(model=name)
        self._overloads = metrics.INFERENCE_OVERLOADS.labels(model=name)

    @classmethod
    def from_settings(
        cls, model: BatchModel[ItemT], name: str, settings: Settings
    ) -> MicroBatcher[ItemT]:
        return cls(
            model,
            name=name,
            max_tokens=settings.batch_max_tokens,
            max_size=settings.batch_max_size,
            max_wait_ms=settings.batch_max_wait_ms,
            queue_size=settings.batch_queue_size,
            workers=settings.resolved_batch_workers,
        )

    async def start(self) -> None:
        if self._task is not None:
            return
        self._closed = False
        self._wakeup = asyncio.Event()  # fresh: a restart may be on another event loop
        # Dedicated threads rather than the default executor: inference must not queue behind
        # (or starve) unrelated to_thread work, and their number bounds this model's runs.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.workers, thread_name_prefix=f"infer-{self.name}"
        )
        self._task = asyncio.create_task(self._serve(), name=f"batcher-{self.name}")

    async def aclose(self) -> None:
        """Stop serving; every item not yet scored fails with BatcherClosed."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        runs, self._runs = list(self._runs), set()
        for run in runs:
            run.cancel()  # each fails its own items (_run)
        await asyncio.gather(*runs, return_exceptions=True)
        self._fail_all(self._drain(), BatcherClosed(f"model '{self.name}' is shutting down"))
        if self._executor is not None:
            # A batch still running in the thread finishes there on its own; waiting for it here
            # would block the event loop.
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def waiting(self) -> int:
        """Items accepted and not yet taken into a batch."""
        return self._reserved + len(self._queue)

    async def submit(self, items: Sequence[ItemT]) -> Float32Array:
        """The model's rows for ``items``, in their order: [n] scores or [n, dim] vectors.

        Raises Overloaded when accepting them would put more than ``queue_size`` items in the
        queue (so one submission larger than that is always refused: callers should cap request
        sizes well below it), BatcherClosed when not serving, and the model's own exception when
        the batch holding one of the items failed.
        """
        if not items:
            return np.empty(0, dtype=np.float32)
        if self._closed or not self.running:
            raise BatcherClosed(f"model '{self.name}' is not serving")
        if self.waiting + len(items) > self.queue_size:
            self._overloads.inc()
            raise Overloaded(self.name, self.retry_after())
        # Reserve the places before the first await, so concurrent submits cannot all pass the
        # check above while their token counts are computed.
        self._reserved += len(items)
        self._depth.set(self.waiting)
        try:
            # Tokenising is CPU work proportional to the texts: off the event loop.
            counts = await asyncio.to_thread(self.model.token_counts, items)
        finally:
            self._reserved -= len(items)
            self._depth.set(self.waiting)
        if self._closed:
            raise BatcherClosed(f"model '{self.name}' is shutting down")
        loop = asyncio.get_running_loop()
        now = loop.time()
        futures: list[asyncio.Future[Any]] = []
        for item, tokens in zip(items, counts, strict=True):
            future: asyncio.Future[Any] = loop.create_future()
            futures.append(future)
            self._queue.append(_Item(item, tokens, future, now))
        self._depth.set(self.waiting)
        self._wakeup.set()
        # return_exceptions: every future's outcome is retrieved, so a failed batch does not log
        # "exception was never retrieved" for the siblings of the first failure.
        results = await asyncio.gather(*futures, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return np.asarray(results, dtype=np.float32)

    async def submit_batch(self, items: Sequence[ItemT]) -> Float32Array:
        """``items`` as one model call of their own, run in this batcher's worker thread between
        the batches of live requests.

        For background work (the evaluation judges): it shares the model with live traffic
        instead of running beside it, and its items are never merged with other callers', so a
        result that depends on the batch (int8 activation ranges) is the same on every run.
        Callers submit one bounded batch at a time, so it is not counted against the queue
        bound. Raises BatcherClosed when not serving."""
        if not items:
            return np.empty(0, dtype=np.float32)
        executor = self._executor
        if self._closed or not self.running or executor is None:
            raise BatcherClosed(f"model '{self.name}' is not serving")
        batch = list(items)
        counts = await asyncio.to_thread(self.model.token_counts, batch)
        loop = asyncio.get_running_loop()
        scores, elapsed = await loop.run_in_executor(executor, self._score_timed, batch)
        self._observe(len(batch), max(counts), elapsed)
        return np.asarray(scores, dtype=np.float32)

    def _score_timed(self, items: list[ItemT]) -> tuple[Float32Array, float]:
        """The model's rows for ``items`` and the seconds it took (in the worker thread)."""
        started = time.perf_counter()
        scores = self.model.score(items)
        if len(scores) != len(items):
            raise RuntimeError(f"model returned {len(scores)} scores for {len(items)} items")
        return scores, time.perf_counter() - started

    def retry_after(self) -> int:
        """Seconds until the current backlog should have drained, from recent throughput."""
        rate = self._items_per_second
        if not rate:
            return 1
        return max(1, min(MAX_RETRY_AFTER_S, math.ceil(self.waiting / rate)))

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        # A worker is free before a window is collected: while all are busy, arriving items
        # wait in the queue and join the next window (larger batches under load).
        free = asyncio.Semaphore(self.workers)
        while True:
            await free.acquire()
            held = True
            window: list[_Item[ItemT]] = []
            try:
                window = await self._collect(loop)
                for batch in self._split(window):
                    if not held:
                        await free.acquire()
                    held = False
                    run = asyncio.create_task(self._run(loop, batch, free))
                    self._runs.add(run)
                    run.add_done_callback(self._runs.discard)
            except asyncio.CancelledError:
                # Items taken from the queue and not yet running: aclose() cannot see them. (A
                # running batch's items are failed by its own task.)
                self._fail_all(window, BatcherClosed(f"model '{self.name}' is shutting down"))
                raise
            except Exception as exc:
                # Never let the serving task die, and never leave a caller waiting.
                log.exception("batcher %s: unexpected error", self.name)
                self._fail_all(window, exc)
            finally:
                if held:
                    free.release()

    async def _collect(self, loop: asyncio.AbstractEventLoop) -> list[_Item[ItemT]]:
        """Wait for work, then up to max_wait for companions; return the items taken."""
        while not self._queue:
            self._wakeup.clear()
            await self._wakeup.wait()
        # The clock starts when the oldest item arrived, so no item waits longer than max_wait
        # for others even if it queued behind a previous batch.
        deadline = self._queue[0].enqueued + self.max_wait
        while not self._full(self._queue) and (remaining := deadline - loop.time()) > 0:
            self._wakeup.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._wakeup.wait()
            except TimeoutError:
                break
        window: list[_Item[ItemT]] = []
        tokens = 0
        limit_items = WINDOW_BATCHES * self.max_size
        limit_tokens = WINDOW_BATCHES * self.max_tokens
        while self._queue and len(window) < limit_items and tokens < limit_tokens:
            item = self._queue.popleft()
            window.append(item)
            tokens += item.tokens
        self._depth.set(self.waiting)
        return window

    def _full(self, queue: collections.deque[_Item[ItemT]]) -> bool:
        """Whether what is queued already fills a batch, so waiting longer gains nothing."""
        if len(queue) >= self.max_size:
            return True
        longest = max(item.tokens for item in queue)
        return len(queue) * longest >= self.max_tokens

    def _split(self, window: list[_Item[ItemT]]) -> list[list[_Item[ItemT]]]:
        """Cut the window, sorted by length, into batches within max_size and max_tokens."""
        # Callers that gave up (disconnected) have cancelled their futures: skip their items.
        live = sorted((i for i in window if not i.future.done()), key=lambda i: i.tokens)
        batches: list[list[_Item[ItemT]]] = []
        batch: list[_Item[ItemT]] = []
        for item in live:
            # Sorted ascending, so the newcomer is the batch's longest: rows x longest is exact.
            if batch and (
                len(batch) + 1 > self.max_size or (len(batch) + 1) * item.tokens > self.max_tokens
            ):
                batches.append(batch)
                batch = []
            batch.append(item)  # an item over the budget on its own still runs, alone
        if batch:
            batches.append(batch)
        return batches

    async def _run(
        self, loop: asyncio.AbstractEventLoop, batch: list[_Item[ItemT]], free: asyncio.Semaphore
    ) -> None:
        """Score ``batch`` in a worker thread and settle its items' futures; then free the
        worker's place."""
        items = [item.item for item in batch]
        try:
            scores, elapsed = await loop.run_in_executor(self._executor, self._score_timed, items)
        except asyncio.CancelledError:
            self._fail_all(batch, BatcherClosed(f"model '{self.name}' is shutting down"))
            raise
        except Exception as exc:
            log.exception("batcher %s: model failed on a batch of %d", self.name, len(batch))
            self._fail_all(batch, exc)
            return
        finally:
            free.release()
        self._observe(len(batch), max(item.tokens for item in batch), elapsed)
        for item, row in zip(batch, scores, strict=True):
            if not item.future.done():
                item.future.set_result(row)

    def _observe(self, rows: int, longest: int, elapsed: float) -> None:
        self._batch_size.observe(rows)
        self._batch_tokens.observe(rows * longest)
        self._seconds.observe(elapsed)
        self._items.inc(rows)
        rate = rows / max(elapsed, 1e-6)
        previous = self._items_per_second
        self._items_per_second = (
            rate
            if previous is None
            else THROUGHPUT_ALPHA * rate + (1 - THROUGHPUT_ALPHA) * previous
        )

    def _drain(self) -> list[_Item[ItemT]]:
        items = list(self._queue)
        self._queue.clear()
        self._depth.set(self.waiting)
        return items

    @staticmethod
    def _fail_all(items: list[_Item[Any]], exc: BaseException) -> None:
        for item in items:
            if not item.future.done():
                item.future.set_exception(exc)
