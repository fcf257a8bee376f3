"""OpenAICompatibleClient against a real HTTP server: parsing, retries, timeouts, streaming and
the concurrency limit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import pytest
from prometheus_client import REGISTRY

from service.api.pipeline_errors import llm_problem
from service.config import Settings
from service.llm import (
    LLMBadResponse,
    LLMTimeout,
    LLMUnavailable,
    Message,
    OpenAICompatibleClient,
)
from tests.llm.conftest import ClientFactory, FakeLLMServer, Reply, chunk, closed_port, completion

HELLO: list[Message] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hello."},
]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_completion_parses_text_and_tokens(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(completion("Hello there.", prompt_tokens=21, completion_tokens=3))
    client = make_client()

    result = await client.complete(HELLO, max_tokens=64, temperature=0.5)

    assert result.text == "Hello there."
    assert (result.prompt_tokens, result.completion_tokens) == (21, 3)
    assert result.model == "served-model"
    assert 0 < result.latency_s < 3
    [seen] = fake.requests
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.body == {
        "model": "test-model",
        "messages": HELLO,
        "max_tokens": 64,
        "temperature": 0.5,
    }
    labels = {"backend": client.name}
    assert sample("tailor_llm_tokens_total", **labels, kind="prompt") == 21
    assert sample("tailor_llm_tokens_total", **labels, kind="completion") == 3
    assert sample("tailor_llm_request_duration_seconds_count", **labels) == 1
    assert sample("tailor_llm_requests_in_flight", **labels) == 0


async def test_no_authorization_header_without_a_key(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(completion("ok"))
    await make_client(api_key=None).complete(HELLO)
    assert "authorization" not in fake.requests[0].headers


async def test_missing_usage_counts_zero_tokens(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    reply = completion("ok")
    del reply.json["usage"]
    fake.reply(reply)
    result = await make_client().complete(HELLO)
    assert (result.text, result.prompt_tokens, result.completion_tokens) == ("ok", 0, 0)


async def test_json_schema_becomes_a_strict_response_format(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fake.reply(completion('{"a": 1}'))
    await make_client().complete(HELLO, json_schema=schema)
    assert fake.requests[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


async def test_500_then_200_succeeds_after_one_retry(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(Reply(status=500, json={"error": {"message": "boom"}}), completion("second"))
    client = make_client()

    result = await client.complete(HELLO)

    assert result.text == "second"
    assert len(fake.requests) == 2
    assert sample("tailor_llm_retries_total", backend=client.name) == 1


async def test_always_503_gives_unavailable_after_all_attempts(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.fallback = Reply(status=503, json={"error": {"message": "overloaded"}})
    client = make_client(max_retries=3, deadline_s=1.0)

    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as caught:
        await client.complete(HELLO)

    assert time.monotonic() - started < 1.0
    assert len(fake.requests) == 4
    assert "503" in caught.value.detail
    assert sample("tailor_llm_errors_total", backend=client.name, error="llm-unavailable") == 1
    problem = llm_problem(caught.value)
    assert (problem.status, problem.slug) == (503, "llm-unavailable")


async def test_429_honours_retry_after(fake: FakeLLMServer, make_client: ClientFactory) -> None:
    fake.reply(Reply(status=429, json={}, headers={"Retry-After": "1"}), completion("later"))
    client = make_client(deadline_s=3.0)

    started = time.monotonic()
    result = await client.complete(HELLO)
    elapsed = time.monotonic() - started

    assert result.text == "later"
    first, second = fake.requests
    assert 0.95 <= second.at - first.at < 1.6
    assert elapsed < 2.0


async def test_retry_after_past_the_deadline_fails_at_once(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(Reply(status=429, json={}, headers={"Retry-After": "30"}), completion("never"))
    client = make_client(deadline_s=2.0)

    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as caught:
        await client.complete(HELLO)

    assert time.monotonic() - started < 0.5
    assert len(fake.requests) == 1
    assert caught.value.retry_after == 30
    assert llm_problem(caught.value).headers == {"Retry-After": "30"}


async def test_400_is_a_bad_response_without_retry(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.fallback = Reply(status=400, json={"error": {"message": "max_tokens is too large"}})
    client = make_client()

    with pytest.raises(LLMBadResponse) as caught:
        await client.complete(HELLO)

    assert len(fake.requests) == 1
    assert "400" in caught.value.detail
    assert "max_tokens is too large" in caught.value.detail
    problem = llm_problem(caught.value)
    assert (problem.status, problem.slug) == (502, "llm-bad-response")


async def test_read_timeout_is_a_timeout_within_the_deadline(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.fallback = Reply(delay=2.0, json=completion("too late").json)
    client = make_client(read_timeout_s=0.2, deadline_s=1.0)

    started = time.monotonic()
    with pytest.raises(LLMTimeout) as caught:
        await client.complete(HELLO)

    assert time.monotonic() - started < 1.0 + 0.3
    assert len(fake.requests) == 1
    assert llm_problem(caught.value).status == 504


async def test_deadline_shorter_than_read_timeout_bounds_the_call(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.fallback = Reply(delay=2.0, json=completion("too late").json)
    client = make_client(read_timeout_s=5.0)

    started = time.monotonic()
    with pytest.raises(LLMTimeout, match=r"0\.4 s deadline"):
        await client.complete(HELLO, deadline_s=0.4)

    assert time.monotonic() - started < 0.4 + 0.3
    assert sample("tailor_llm_requests_in_flight", backend=client.name) == 0


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=b"<html>502 Bad Gateway</html>"),
        Reply(json={"choices": []}),
        Reply(json={"choices": [{"message": {"role": "assistant", "content": None}}]}),
        Reply(json=["not", "an", "object"]),
    ],
    ids=["not-json", "no-choices", "null-content", "list-body"],
)
async def test_malformed_body_is_a_bad_response(
    fake: FakeLLMServer, make_client: ClientFactory, reply: Reply
) -> None:
    fake.reply(reply)
    with pytest.raises(LLMBadResponse):
        await make_client().complete(HELLO)
    assert len(fake.requests) == 1


async def test_closed_port_is_unavailable(make_client: ClientFactory) -> None:
    client = make_client(base_url=f"http://127.0.0.1:{closed_port()}/v1", max_retries=1)

    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="could not be reached"):
        await client.complete(HELLO)

    assert time.monotonic() - started < 1.0
    assert sample("tailor_llm_retries_total", backend=client.name) == 1


async def test_concurrency_limit_bounds_requests_in_flight(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.fallback = Reply(delay=0.15, json=completion("slow").json)
    client = make_client(max_concurrency=2)

    results = await asyncio.gather(*(client.complete(HELLO) for _ in range(6)))

    assert [r.text for r in results] == ["slow"] * 6
    assert len(fake.requests) == 6
    # Equal, not just at most: the calls did overlap, so the limit was what held them back.
    assert fake.max_in_flight == 2


def test_from_settings_reads_the_llm_settings() -> None:
    settings = Settings(
        llm_base_url="http://vllm:8000/v1/",
        llm_api_key="k",
        llm_model="m",
        llm_max_retries=5,
        llm_deadline_s=7.0,
    )
    client = OpenAICompatibleClient.from_settings(settings)
    assert (client.model, client.max_retries, client.deadline_s) == ("m", 5, 7.0)
    with pytest.raises(ValueError, match="LLM_BASE_URL"):
        OpenAICompatibleClient.from_settings(Settings(llm_base_url=None))


# --- streaming ---------------------------------------------------------------------------------


async def test_stream_yields_the_deltas(fake: FakeLLMServer, make_client: ClientFactory) -> None:
    pieces = ["Hel", "lo", ", ", "wor", "ld."]
    usage = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}}
    fake.reply(
        Reply(
            sse=[
                chunk(role="assistant"),
                ": keep-alive comment",
                *(chunk(p) for p in pieces),
                chunk(finish="stop"),
                "data: " + json.dumps(usage),
                "data: [DONE]",
            ]
        )
    )
    client = make_client()

    received = [delta async for delta in client.stream(HELLO, max_tokens=32)]

    assert received == pieces
    assert "".join(received) == "Hello, world."
    body = fake.requests[0].body
    assert body["stream"] is True
    assert body["max_tokens"] == 32
    assert sample("tailor_llm_tokens_total", backend=client.name, kind="completion") == 5


async def test_stream_retries_before_the_first_byte(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(Reply(status=502, json={}), Reply(sse=[chunk("ok"), "data: [DONE]"]))
    received = [d async for d in make_client().stream(HELLO)]
    assert received == ["ok"]
    assert len(fake.requests) == 2


async def test_stream_malformed_event_is_a_bad_response(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(Reply(sse=[chunk("partial"), 'data: {"choices": [', "data: [DONE]"]))
    client = make_client()

    received: list[str] = []
    with pytest.raises(LLMBadResponse, match="not JSON"):
        async for delta in client.stream(HELLO):
            received.append(delta)

    assert received == ["partial"]
    assert len(fake.requests) == 1
    assert sample("tailor_llm_errors_total", backend=client.name, error="llm-bad-response") == 1
    assert sample("tailor_llm_requests_in_flight", backend=client.name) == 0


async def test_stream_error_event_is_a_bad_response(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    error = {"error": {"message": "CUDA out of memory"}}
    fake.reply(Reply(sse=[chunk("par"), "data: " + json.dumps(error)]))
    with pytest.raises(LLMBadResponse, match="mid-stream: CUDA out of memory"):
        async for _ in make_client().stream(HELLO):
            pass


async def test_stream_cut_short_is_a_bad_response(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(Reply(sse=[chunk("partial")]))
    with pytest.raises(LLMBadResponse, match=r"before \[DONE\]"):
        async for _ in make_client().stream(HELLO):
            pass


async def test_stream_400_is_a_bad_response(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(Reply(status=400, json={"object": "error", "message": "bad temperature"}))
    with pytest.raises(LLMBadResponse, match="bad temperature"):
        async for _ in make_client().stream(HELLO):
            pass


async def test_stream_closed_early_releases_its_slot(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(Reply(sse=[chunk("a"), chunk("b"), "data: [DONE]"]))
    client = make_client(max_concurrency=1)

    async with contextlib.aclosing(client.stream(HELLO)) as deltas:
        async for _ in deltas:
            break

    assert sample("tailor_llm_requests_in_flight", backend=client.name) == 0
    fake.reply(completion("next"))
    assert (await client.complete(HELLO, deadline_s=1.0)).text == "next"
