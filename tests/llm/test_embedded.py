"""The embedded backend with the real SmolLM2-135M model (small enough to run in every test)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from service import metrics
from service.llm import LLMBadResponse, LLMTimeout, LLMUnavailable, Message, complete_structured
from service.llm.embedded import EmbeddedLLMClient, default_model_path

QUESTION: list[Message] = [{"role": "user", "content": "What is the capital of France?"}]
# Long enough an answer that it is still generating when the short deadlines below pass.
STORY: list[Message] = [{"role": "user", "content": "Write a very long story about a dragon."}]

MakeClient = Callable[..., EmbeddedLLMClient]


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    made: list[EmbeddedLLMClient] = []

    def make(**overrides: Any) -> EmbeddedLLMClient:
        kwargs: dict[str, Any] = {
            "threads": 1,  # see Settings.llm_embedded_threads: steadier on a shared box
            "context": 2048,
            "deadline_s": 30.0,
            "name": f"test-{uuid.uuid4().hex[:8]}",
            **overrides,
        }
        client = EmbeddedLLMClient(default_model_path(), **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


@pytest.fixture
async def client(make_client: MakeClient) -> EmbeddedLLMClient:
    # Started as the server starts it (at start-up), so deadlines measure generation only.
    made = make_client()
    await made.start()
    return made


def _value(metric: Any, *labels: str) -> float:
    return float(metric.labels(*labels)._value.get())


async def test_complete_returns_text_and_counts_tokens(client: EmbeddedLLMClient) -> None:
    completion = await client.complete(QUESTION, max_tokens=8, temperature=0.0)
    assert completion.text.strip()
    assert completion.model == "SmolLM2-135M-Instruct.Q4_1"
    # The chat template wraps the question's 7 words in a system prompt and role markers.
    assert completion.prompt_tokens > 10
    # The story cannot end within 8 tokens, so exactly 8 were generated.
    story = await client.complete(STORY, max_tokens=8, temperature=0.0)
    assert story.completion_tokens == 8
    assert 0 < completion.completion_tokens <= 8
    assert completion.latency_s > 0
    assert _value(metrics.LLM_TOKENS, client.name, "completion") == (
        completion.completion_tokens + story.completion_tokens
    )
    assert _value(metrics.LLM_TOKENS, client.name, "prompt") == (
        completion.prompt_tokens + story.prompt_tokens
    )


async def test_temperature_zero_is_repeatable(client: EmbeddedLLMClient) -> None:
    first = await client.complete(STORY, max_tokens=12, temperature=0.0)
    await client.complete(QUESTION, max_tokens=4, temperature=0.0)  # a different prompt between
    second = await client.complete(STORY, max_tokens=12, temperature=0.0)
    assert first.text == second.text


async def test_generation_does_not_block_the_event_loop(client: EmbeddedLLMClient) -> None:
    lags: list[float] = []

    async def tick() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - before - 0.01)

    ticker = asyncio.create_task(tick())
    try:
        await client.complete(STORY, max_tokens=60)
    finally:
        ticker.cancel()
    # Generation ran for most of a second; had it held the loop, the ticker would have stalled.
    assert len(lags) > 10
    assert max(lags) < 0.25


class Person(BaseModel):
    name: str
    age: int


async def test_json_schema_output_validates_through_complete_structured(
    client: EmbeddedLLMClient,
) -> None:
    messages: list[Message] = [
        {"role": "user", "content": "Invent a person. Answer in JSON with name and age."}
    ]
    person, completions = await complete_structured(client, messages, Person, max_tokens=48)
    assert isinstance(person, Person)
    # The grammar makes the first answer valid: no repair round trip was needed.
    assert len(completions) == 1
    assert completions[0].text.lstrip().startswith("{")


async def test_stream_deltas_concatenate_to_the_completion(client: EmbeddedLLMClient) -> None:
    whole = await client.complete(STORY, max_tokens=10, temperature=0.0)
    deltas = [d async for d in client.stream(STORY, max_tokens=10, temperature=0.0)]
    assert len(deltas) > 1
    assert "".join(deltas) == whole.text
    assert _value(metrics.LLM_TOKENS, client.name, "completion") == 2 * whole.completion_tokens


async def test_tiny_deadline_times_out_quickly_and_the_next_call_works(
    client: EmbeddedLLMClient,
) -> None:
    started = time.monotonic()
    with pytest.raises(LLMTimeout) as caught:
        await client.complete(STORY, max_tokens=400, deadline_s=0.05)
    # 400 tokens take several seconds on two cores; generation stopped at the deadline.
    assert time.monotonic() - started < 3.0
    assert caught.value.slug == "llm-timeout"
    assert _value(metrics.LLM_ERRORS, client.name, "llm-timeout") == 1
    assert _value(metrics.LLM_IN_FLIGHT, client.name) == 0
    assert (await client.complete(QUESTION, max_tokens=4)).text


async def test_deadline_interrupts_a_long_prompt(client: EmbeddedLLMClient) -> None:
    # About 1,900 tokens: reading them takes several seconds on one core.
    long: list[Message] = [{"role": "user", "content": "dragon " * 1800}]
    started = time.monotonic()
    with pytest.raises(LLMTimeout, match="reading the prompt"):
        await client.complete(long, max_tokens=4, deadline_s=0.3)
    assert time.monotonic() - started < 2.0
    assert (await client.complete(QUESTION, max_tokens=4)).text


async def test_stream_deadline_raises_timeout(client: EmbeddedLLMClient) -> None:
    received: list[str] = []
    with pytest.raises(LLMTimeout):
        async for delta in client.stream(STORY, max_tokens=400, deadline_s=0.3):
            received.append(delta)
    assert len(received) < 400


async def test_waiting_for_the_model_counts_against_the_deadline(
    client: EmbeddedLLMClient,
) -> None:
    long = asyncio.create_task(client.complete(STORY, max_tokens=60, temperature=0.0))
    await asyncio.sleep(0.05)  # the long call holds the model
    with pytest.raises(LLMTimeout, match="busy"):
        await client.complete(QUESTION, max_tokens=4, deadline_s=0.2)
    assert (await long).completion_tokens == 60


async def test_two_concurrent_calls_both_succeed(client: EmbeddedLLMClient) -> None:
    alone = await client.complete(QUESTION, max_tokens=6, temperature=0.0)
    first, second = await asyncio.gather(
        client.complete(QUESTION, max_tokens=6, temperature=0.0),
        client.complete(STORY, max_tokens=6, temperature=0.0),
    )
    # Serialized, not interleaved: each answer is what it is when asked alone.
    assert first.text == alone.text
    assert second.completion_tokens == 6


async def test_closing_a_stream_early_stops_generation(client: EmbeddedLLMClient) -> None:
    async with contextlib.aclosing(client.stream(STORY, max_tokens=1000)) as deltas:
        async for _ in deltas:
            break
    # Had the 1000 tokens gone on generating, this call would wait for them past its deadline.
    answer = await client.complete(QUESTION, max_tokens=4, deadline_s=5.0)
    assert answer.text


async def test_a_cancelled_call_frees_the_model(client: EmbeddedLLMClient) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.complete(STORY, max_tokens=1000), 0.5)
    answer = await client.complete(QUESTION, max_tokens=4, deadline_s=5.0)
    assert answer.text


async def test_prompt_longer_than_the_context_is_a_clear_error(make_client: MakeClient) -> None:
    client = make_client(context=128)
    long: list[Message] = [{"role": "user", "content": "dragon " * 300}]
    with pytest.raises(LLMBadResponse, match="context window"):
        await client.complete(long, max_tokens=4)
    assert (await client.complete(QUESTION, max_tokens=4)).text


async def test_closed_client_is_unavailable(client: EmbeddedLLMClient) -> None:
    await client.aclose()
    with pytest.raises(LLMUnavailable):
        await client.complete(QUESTION, max_tokens=4)


async def test_closing_stops_the_call_in_flight_and_fails_the_waiting_ones(
    client: EmbeddedLLMClient,
) -> None:
    running = asyncio.create_task(client.complete(STORY, max_tokens=1000))
    await asyncio.sleep(0.3)  # generating
    waiting = asyncio.create_task(client.complete(QUESTION, max_tokens=4))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await client.aclose()
    # 1000 tokens would take over ten seconds; the running call stopped where it was.
    assert time.monotonic() - started < 2.0
    for call in (running, waiting):
        with pytest.raises(LLMUnavailable):
            await call


# --- the child process: crashes, hangs and restarts ------------------------------------------


async def _wait_for_pid(
    client: EmbeddedLLMClient, not_pid: int | None, limit_s: float = 30.0
) -> int:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        pid = client.pid
        if pid is not None and pid != not_pid:
            return pid
        await asyncio.sleep(0.05)
    raise AssertionError("the model process was not started again")


async def test_the_model_runs_in_a_child_process_not_in_the_server(
    client: EmbeddedLLMClient,
) -> None:
    await client.complete(QUESTION, max_tokens=4)
    assert client.pid is not None and client.pid != os.getpid()
    # Loading llama.cpp's native library into this process is what must never happen.
    assert "llama_cpp" not in sys.modules


async def test_killing_the_child_mid_generation_fails_the_call_and_it_restarts(
    make_client: MakeClient,
) -> None:
    client = make_client(restart_backoff_s=0.2)
    await client.start()
    first_pid = client.pid
    assert first_pid is not None
    received: list[str] = []
    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as caught:
        async for delta in client.stream(STORY, max_tokens=1000):
            received.append(delta)
            if len(received) == 3:
                os.kill(first_pid, signal.SIGKILL)  # what a native crash looks like
    # The call failed as soon as the process died, not at its deadline.
    assert time.monotonic() - started < 10.0
    assert caught.value.slug == "llm-unavailable"
    assert "SIGKILL" in caught.value.detail
    assert _value(metrics.LLM_CHILD_EXITS, client.name, "SIGKILL") == 1
    second_pid = await _wait_for_pid(client, first_pid)
    assert second_pid != first_pid
    assert _value(metrics.LLM_CHILD_RESTARTS, client.name) == 1
    assert (await client.complete(QUESTION, max_tokens=4)).text
    assert _value(metrics.LLM_IN_FLIGHT, client.name) == 0


async def test_while_the_child_is_down_calls_fail_fast_with_retry_after(
    make_client: MakeClient,
) -> None:
    client = make_client(restart_backoff_s=30.0)
    await client.start()
    pid = client.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    for _ in range(500):  # the reader notices the exit
        if client.pid is None:
            break
        await asyncio.sleep(0.02)
    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as caught:
        await client.complete(QUESTION, max_tokens=4)
    assert time.monotonic() - started < 1.0
    assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= 30.0
    assert "restarted in" in caught.value.detail


async def test_a_hung_child_is_killed_after_the_deadline_and_replaced(
    make_client: MakeClient,
) -> None:
    client = make_client(restart_backoff_s=0.2, hung_grace_s=0.5)
    await client.start()
    pid = client.pid
    assert pid is not None
    call = asyncio.create_task(client.complete(STORY, max_tokens=1000, deadline_s=1.0))
    await asyncio.sleep(0.2)
    os.kill(pid, signal.SIGSTOP)  # stuck: it no longer checks its deadline
    started = time.monotonic()
    with pytest.raises(LLMTimeout, match="restarted"):
        await call
    assert time.monotonic() - started < 5.0
    await _wait_for_pid(client, pid)
    assert (await client.complete(QUESTION, max_tokens=4)).text


async def test_a_model_file_the_child_cannot_load_is_unavailable_not_a_crash(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    client = EmbeddedLLMClient(
        broken,
        threads=1,
        deadline_s=5.0,
        name=f"test-{uuid.uuid4().hex[:8]}",
        restart_backoff_s=60.0,
    )
    try:
        with pytest.raises(LLMUnavailable, match="failed to start"):
            await client.start()
        # Within the backoff, calls answer at once with the cause.
        with pytest.raises(LLMUnavailable, match="start failed"):
            await client.complete(QUESTION, max_tokens=4)
    finally:
        await client.aclose()
