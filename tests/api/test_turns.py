"""/v1/turns: a reply on the request path, extraction as a durable job that the in-process
worker runs; LLM failures leave nothing written. Shipped models, both databases, a scripted
OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from service.app import create_app
from tests.api.conftest import serving
from tests.conftest import Api, Database, bearer
from tests.llm.conftest import FakeLLMServer, Reply, chunk, completion

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def turn_api(
    database: Database, shared_data_dir: Path, module_llm_server: FakeLLMServer
) -> AsyncIterator[Api]:
    """With the in-process job worker, polling often so that tests wait little."""
    async with serving(
        database,
        shared_data_dir,
        module_llm_server,
        jobs_poll_interval_s=0.1,
        jobs_backoff_base_s=0.1,
    ) as api:
        yield api


async def wait_for_job(api: Api, key: str, job_id: str, limit_s: float = 30) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        r = await api.client.get(f"/v1/jobs/{job_id}", headers=bearer(key))
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("succeeded", "failed"):
            return dict(r.json())
        assert asyncio.get_running_loop().time() < deadline, r.json()
        await asyncio.sleep(0.1)


MESSAGES = [
    {"role": "user", "content": "Hello there."},
    {"role": "assistant", "content": "Hi! I live in Lisbon and I love surfing. And you?"},
    {"role": "user", "content": "I work as a nurse at night. Can you suggest a quick breakfast?"},
]


async def test_turn_replies_then_extracts_in_the_background(
    turn_api: Api, llm: FakeLLMServer
) -> None:
    key = await turn_api.new_tenant()
    llm.reply(completion("Overnight oats are quick."))
    r = await turn_api.client.post(
        "/v1/turns", json={"user_id": "u1", "messages": MESSAGES}, headers=bearer(key)
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["reply"] == "Overnight oats are quick."
    assert body["attributes_used"] == [] and body["job_id"]
    job = await wait_for_job(turn_api, key, body["job_id"])
    assert job["status"] == "succeeded", job
    assert job["kind"] == "extract" and job["user_id"] == "u1" and job["attempts"] == 1
    r = await turn_api.client.get("/v1/users/u1/attributes", headers=bearer(key))
    stored = r.json()["items"]
    assert [a["text"] for a in stored] == ["The user works as a nurse at night."]
    # Evidence points into the caller's message list, at the user's own words.
    assert stored[0]["evidence"] == [{"message_index": 2, "quote": "I work as a nurse at night"}]
    texts = " ".join(c["text"].lower() for c in job["result"]["candidates"])
    assert "lisbon" not in texts and "surf" not in texts


async def test_turn_uses_the_selected_attributes(turn_api: Api, llm: FakeLLMServer) -> None:
    key = await turn_api.new_tenant()
    row = json.loads((FIXTURES / "relevance_everyday.json").read_text())
    for text in row["attributes"]:
        await turn_api.client.post(
            "/v1/users/u1/attributes", json={"text": text}, headers=bearer(key)
        )
    r = await turn_api.client.post(
        "/v1/select", json={"prompt": row["prompt"], "user_id": "u1"}, headers=bearer(key)
    )
    expected = [a["text"] for a in r.json()["attributes"] if a["selected"]]
    assert expected
    llm.reply(completion("A quick chickpea curry would do."))
    r = await turn_api.client.post(
        "/v1/turns",
        json={
            "user_id": "u1",
            "messages": [{"role": "user", "content": row["prompt"]}],
            "extract": False,
        },
        headers=bearer(key),
    )
    assert r.status_code == 200, r.text
    assert r.json()["job_id"] is None
    assert [a["text"] for a in r.json()["attributes_used"]] == expected
    system = llm.requests[0].body["messages"][0]["content"]
    assert all(json.dumps(t) in system for t in expected)


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (Reply(status=503, json={"error": {"message": "down"}}), 503),
        (Reply(delay=5.0, json={}), 504),
        (Reply(status=200, body=b"<html>proxy error</html>"), 502),
    ],
)
async def test_llm_failure_writes_nothing(
    turn_api: Api, llm: FakeLLMServer, reply: Reply, status: int
) -> None:
    key = await turn_api.new_tenant()
    llm.fallback = reply
    r = await turn_api.client.post(
        "/v1/turns", json={"user_id": "u1", "messages": MESSAGES}, headers=bearer(key)
    )
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    # No user row, no job: the turn failed as a whole.
    r = await turn_api.client.get("/v1/users/u1/export", headers=bearer(key))
    assert r.status_code == 404


async def test_llm_down_when_unreachable(turn_api: Api, tmp_path: Path) -> None:
    """A server that is not there at all (connection refused) is a 503 as well."""
    key = await turn_api.new_tenant()
    settings = turn_api.settings.model_copy(
        update={"llm_base_url": "http://127.0.0.1:9/v1", "load_models": False}
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.post(
                "/v1/turns", json={"user_id": "u1", "messages": MESSAGES}, headers=bearer(key)
            )
    assert r.status_code == 503, r.text
    assert r.json()["type"] == "urn:tailor:problem:llm-unavailable"


def streamed(*parts: str) -> Reply:
    return Reply(sse=[chunk(role="assistant"), *(chunk(p) for p in parts), "data: [DONE]"])


async def stream_turn(
    api: Api, key: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[tuple[str, Any]]:
    """The (event, data) pairs of a streamed turn, in order."""
    async with api.client.stream(
        "POST", "/v1/turns", json=body | {"stream": True}, headers=bearer(key) | (headers or {})
    ) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = (await r.aread()).decode()
    events = []
    for block in raw.strip().split("\n\n"):
        name, data = block.split("\n")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


async def test_streamed_turn_names_the_job_first_and_queues_it_once_done(
    turn_api: Api, llm: FakeLLMServer
) -> None:
    key = await turn_api.new_tenant()
    llm.reply(streamed("Overnight ", "oats are ", "quick."))
    events = await stream_turn(turn_api, key, {"user_id": "u1", "messages": MESSAGES})
    assert [name for name, _ in events] == ["attributes", "delta", "delta", "delta", "done"]
    opening = events[0][1]
    assert opening["attributes_used"] == [] and opening["job_id"]
    assert [data for name, data in events if name == "delta"] == [
        {"text": "Overnight "},
        {"text": "oats are "},
        {"text": "quick."},
    ]
    assert events[-1] == ("done", {"reply": "Overnight oats are quick."})
    # Committed before `done` was sent: the announced job exists at once.
    r = await turn_api.client.get(f"/v1/jobs/{opening['job_id']}", headers=bearer(key))
    assert r.status_code == 200, r.text
    job = await wait_for_job(turn_api, key, opening["job_id"])
    assert job["status"] == "succeeded" and job["attempts"] == 1, job
    assert job["kind"] == "extract" and job["user_id"] == "u1"
    r = await turn_api.client.get("/v1/users/u1/attributes", headers=bearer(key))
    assert [a["text"] for a in r.json()["items"]] == ["The user works as a nurse at night."]
    # The reply was asked for as a stream.
    assert llm.requests[0].body["stream"] is True


async def test_streamed_turn_failing_mid_stream_writes_nothing(
    turn_api: Api, llm: FakeLLMServer
) -> None:
    key = await turn_api.new_tenant()
    llm.reply(
        Reply(
            sse=[
                chunk(role="assistant"),
                chunk("Overnight "),
                "data: " + json.dumps({"error": {"message": "the GPU fell over"}}),
            ]
        )
    )
    events = await stream_turn(turn_api, key, {"user_id": "u1", "messages": MESSAGES})
    assert [name for name, _ in events] == ["attributes", "delta", "error"]
    job_id = events[0][1]["job_id"]
    assert job_id
    problem = events[-1][1]
    assert problem["type"] == "urn:tailor:problem:llm-bad-response" and problem["status"] == 502
    assert "the GPU fell over" in problem["detail"]
    # Neither the announced job nor the user row was written.
    r = await turn_api.client.get(f"/v1/jobs/{job_id}", headers=bearer(key))
    assert r.status_code == 404, r.text
    r = await turn_api.client.get("/v1/users/u1/export", headers=bearer(key))
    assert r.status_code == 404


async def test_streamed_turn_with_the_backend_down_is_a_problem(
    turn_api: Api, llm: FakeLLMServer
) -> None:
    """Down before the first delta: the usual 503 problem response, no stream, no write."""
    key = await turn_api.new_tenant()
    llm.fallback = Reply(status=503, json={"error": {"message": "down"}})
    r = await turn_api.client.post(
        "/v1/turns",
        json={"user_id": "u1", "messages": MESSAGES, "stream": True},
        headers=bearer(key),
    )
    assert r.status_code == 503, r.text
    assert r.json()["type"] == "urn:tailor:problem:llm-unavailable"
    r = await turn_api.client.get("/v1/users/u1/export", headers=bearer(key))
    assert r.status_code == 404


async def test_streamed_turn_without_extraction_has_no_job(
    turn_api: Api, llm: FakeLLMServer
) -> None:
    key = await turn_api.new_tenant()
    llm.reply(streamed("Hi!"))
    events = await stream_turn(
        turn_api, key, {"user_id": "u1", "messages": MESSAGES, "extract": False}
    )
    assert events == [
        ("attributes", {"attributes_used": [], "job_id": None}),
        ("delta", {"text": "Hi!"}),
        ("done", {"reply": "Hi!"}),
    ]
    r = await turn_api.client.get("/v1/users/u1/export", headers=bearer(key))
    assert r.status_code == 404


async def test_streamed_turn_retried_with_its_key_replays_json_and_queues_no_second_job(
    turn_api: Api, llm: FakeLLMServer
) -> None:
    key = await turn_api.new_tenant()
    llm.reply(streamed("Overnight oats."))
    body = {"user_id": "u1", "messages": MESSAGES}
    events = await stream_turn(turn_api, key, body, {"Idempotency-Key": "turn-1"})
    job_id = events[0][1]["job_id"]
    assert events[-1] == ("done", {"reply": "Overnight oats."})
    r = await turn_api.client.post(
        "/v1/turns",
        json=body | {"stream": True},
        headers=bearer(key) | {"Idempotency-Key": "turn-1"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["idempotent-replayed"] == "true"
    assert r.headers["content-type"].startswith("application/json")
    replay = r.json()
    assert replay["reply"] == "Overnight oats." and replay["job_id"] == job_id
    assert replay["attributes_used"] == [] and replay["usage"]["latency_s"] >= 0
    assert len(llm.requests) == 1  # the retry asked the LLM nothing
    await wait_for_job(turn_api, key, job_id)
    r = await turn_api.client.get("/v1/users/u1/export", headers=bearer(key))
    assert r.status_code == 200
    assert [j["id"] for j in r.json()["jobs"]] == [job_id]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "body.user_id"),
        ({"user_id": "u1", "messages": [{"role": "assistant", "content": "x"}]}, "body.messages"),
        ({"user_id": "bad id!", "messages": [{"role": "user", "content": "x"}]}, "body.user_id"),
        (
            {"user_id": "u1", "messages": [{"role": "user", "content": "x"}], "stream": 1},
            "body.stream",
        ),
    ],
)
async def test_turn_validation(turn_api: Api, body: dict[str, Any], field: str) -> None:
    key = await turn_api.new_tenant()
    r = await turn_api.client.post("/v1/turns", json=body, headers=bearer(key))
    assert r.status_code == 422
    assert field in [e["field"] for e in r.json()["errors"]]
