"""The Python client (clients/python, `tailor_client`).

Most tests run against a real `tailor serve` process on its embedded SQLite file and the
shipped models, with TAILOR_LLM_BASE_URL pointing at a scripted OpenAI-compatible server (the
embedded LLM would be slow), one server for the module. The retry tests use an
``httpx.MockTransport``: what they check (the same Idempotency-Key on each try, the wait a
Retry-After asks for) is the client's alone."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tailor_client import (
    AsyncTailorClient,
    AttributesEvent,
    AuthenticationFailed,
    BadGateway,
    ConnectionFailed,
    DeltaEvent,
    DoneEvent,
    NotFound,
    RateLimited,
    RetryPolicy,
    StreamInterrupted,
    TailorClient,
    Unavailable,
    ValidationFailed,
)
from tailor_client.models import AttributeOut, ChatMessage, EvidenceSchema
from tailor_client.sse import ServerSentEvent, iter_sse

from tests.evaluation.test_uploads import make_zip, tiny_files
from tests.llm.conftest import FakeLLMServer, Reply, chunk, completion
from tests.server_process import create_tenant, prepare_data_dir, start_server

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "personafeedback_tiny"
MODELS = Path(__file__).resolve().parents[2] / "models"
# The models these tests use; the reward model (only the `reward` judge needs it) is left out,
# which saves its start-up.
SERVED = ("verifier", "relevance", "extractor", "embedder")

NURSE = [
    {"role": "assistant", "content": "Hello! I live in Lisbon and I have three cats. And you?"},
    {
        "role": "user",
        "content": "I work as a nurse at night. Any tips for sleeping during the day?",
    },
]
REPLY = "Blackout curtains and a fixed sleep window help."


def streamed(*parts: str) -> Reply:
    return Reply(sse=[chunk(role="assistant"), *(chunk(p) for p in parts), "data: [DONE]"])


@dataclass
class Server:
    base: str
    key: str
    llm: FakeLLMServer

    def client(self, **kwargs: Any) -> TailorClient:
        return TailorClient(self.base, api_key=self.key, timeout=60, **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncTailorClient:
        return AsyncTailorClient(self.base, api_key=self.key, timeout=60, **kwargs)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_data_dir: Path) -> Iterator[Server]:
    llm = FakeLLMServer()
    llm.start()
    root = tmp_path_factory.mktemp("client")
    data_dir = root / "data"
    prepare_data_dir(data_dir, shared_data_dir)
    eval_dir = root / "eval"
    shutil.copytree(TINY, eval_dir / "tiny")
    models = root / "models"
    models.mkdir()
    for name in SERVED:
        (models / name).symlink_to(MODELS / name)
    key = create_tenant(data_dir)
    proc, base = start_server(
        data_dir,
        root / "server.log",
        TAILOR_LLM_BASE_URL=llm.base_url,
        TAILOR_LLM_MAX_RETRIES="0",
        # The learned extractor, not the scripted LLM, reads the turns.
        TAILOR_EXTRACTOR="learned",
        TAILOR_EVAL_DATA_DIR=str(eval_dir),
        TAILOR_MODELS_DIR=str(models),
    )
    try:
        yield Server(base, key, llm)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        llm.stop()


@pytest.fixture
def tailor(server: Server) -> Iterator[Server]:
    server.llm.reset()
    server.llm.fallback = completion(REPLY)
    yield server


# --- against a real server --------------------------------------------------------------------


@pytest.mark.slow
def test_attributes_create_list_across_pages_update_delete_history(tailor: Server) -> None:
    with tailor.client() as client:
        texts = [f"The user likes sport number {i}." for i in range(7)]
        created = [client.attributes.create("ann", t, category="hobby") for t in texts]
        assert all(isinstance(a, AttributeOut) for a in created)
        assert created[0].status == "active" and created[0].category == "hobby"

        first = client.attributes.list_page("ann", limit=3)
        assert len(first.items) == 3 and first.next_cursor is not None
        listed = list(client.attributes.list("ann", page_size=3))  # three pages
        assert sorted(a.id for a in listed) == sorted(a.id for a in created)
        assert len(client.attributes.all("ann")) == 7

        one = created[0]
        assert client.attributes.get("ann", one.id) == one
        changed = client.attributes.update("ann", one.id, text="The user likes tennis.")
        assert changed.text == "The user likes tennis." and changed.category == "hobby"
        cleared = client.attributes.update("ann", one.id, category=None)
        assert cleared.category is None and cleared.text == "The user likes tennis."

        client.attributes.delete("ann", one.id)
        assert client.attributes.get("ann", one.id).status == "deleted"
        assert one.id not in {a.id for a in client.attributes.list("ann")}
        assert one.id in {a.id for a in client.attributes.list("ann", status="any")}
        actions = [e.action for e in client.attributes.history("ann", one.id).items]
        assert actions == ["created", "updated", "updated", "deleted"], actions

        withheld = client.attributes.create(
            "ann",
            "The user works as a nurse.",
            evidence=[EvidenceSchema(message_index=1, quote="I work as a nurse at night.")],
        )
        assert withheld.evidence[0].quote == "I work as a nurse at night."


@pytest.mark.slow
def test_batch_create(tailor: Server) -> None:
    with tailor.client() as client:
        out = client.attributes.create_batch(
            "bea",
            [
                {"text": "The user keeps bees.", "category": "hobby"},
                {"text": "The user keeps bees."},
                {"text": "The user lives in Porto.", "category": "location"},
            ],
        )
        assert [r.outcome for r in out.results] == ["created", "rejected", "created"]
        assert out.created == 2 and out.rejected == 1
        rejected = out.results[1].problem
        assert rejected is not None and rejected.field == "body.items.1"
        assert len(client.attributes.all("bea")) == 2


@pytest.mark.slow
def test_errors_carry_the_problem_document(tailor: Server) -> None:
    with tailor.client() as client:
        with pytest.raises(NotFound) as caught:
            client.attributes.get("nobody", "f" * 32)
        err = caught.value
        assert err.status == 404
        assert err.type == "urn:tailor:problem:not-found"
        assert err.problem["status"] == 404 and err.title and err.detail
        assert "404" in str(err)

        with pytest.raises(ValidationFailed) as invalid:
            client.attributes.list_page("ann", limit=0)
        assert invalid.value.status == 422
        assert [e["field"] for e in invalid.value.errors] == ["query.limit"]

        with pytest.raises(ValidationFailed) as bad_body:
            client.select("Dinner?")  # neither user_id nor attributes
        assert bad_body.value.type == "urn:tailor:problem:validation-error"

    with TailorClient(tailor.base, api_key="tlr_0000000000000000_wrong") as stranger:
        with pytest.raises(AuthenticationFailed) as denied:
            stranger.users.export("ann")
        assert denied.value.status == 401


@pytest.mark.slow
def test_select_verify_extract(tailor: Server) -> None:
    with tailor.client() as client:
        client.attributes.create("cal", "The user is vegetarian.", category="diet")
        client.attributes.create("cal", "The user plays the cello.", category="hobby")

        picked = client.select("Any dinner recipes for tonight?", user_id="cal")
        assert {a.text for a in picked.attributes} == {
            "The user is vegetarian.",
            "The user plays the cello.",
        }
        assert 0 <= picked.threshold <= 1 and picked.cap >= 1
        inline = client.select("Dinner recipes?", attributes=["The user is vegetarian."])
        assert [a.id for a in inline.attributes] == [None]

        conversation = [
            ChatMessage(role="user", content="I have a cat named Tom."),
            {"role": "assistant", "content": "Lovely!"},
        ]
        verdicts = client.verify(conversation, ["The user has a cat.", "The user has a boat."])
        assert [r.text for r in verdicts.results] == ["The user has a cat.", "The user has a boat."]
        by_text = {r.text: r.verdict for r in verdicts.results}
        assert by_text == {
            "The user has a cat.": "supported",
            "The user has a boat.": "unsupported",
        }

        extracted = client.extract(NURSE, user_id="cal", extractor="learned")
        assert extracted.stored is True and extracted.user_id == "cal"
        supported = [c for c in extracted.candidates if c.verdict == "supported"]
        assert supported and supported[0].action == "added"
        stored = {a.text for a in client.attributes.list("cal")}
        assert supported[0].text in stored
        dry = client.extract(NURSE, store=False, extractor="rules")
        assert dry.stored is False


@pytest.mark.slow
def test_turn_then_wait_for_its_job(tailor: Server) -> None:
    with tailor.client() as client:
        turn = client.turn("dan", NURSE, max_tokens=32)
        assert turn.reply == REPLY and turn.job_id
        assert turn.usage.completion_tokens == 7
        job = client.jobs.wait(turn.job_id, timeout=60)
        assert job.status == "succeeded" and job.kind == "extract" and job.user_id == "dan"
        texts = [a.text for a in client.attributes.list("dan")]
        assert texts == ["The user works as a nurse at night."]
        jobs = list(client.jobs.list("dan", page_size=1))
        assert [j.id for j in jobs] == [turn.job_id]

        without = client.turn("dan", NURSE, extract=False)
        assert without.job_id is None


@pytest.mark.slow
def test_streamed_turn_and_generate(tailor: Server) -> None:
    tailor.llm.reply(streamed("Try ", "earplugs."), streamed("Tofu ", "curry."))
    with tailor.client() as client:
        with client.turn("eve", NURSE, stream=True, idempotency_key="eve-turn-1") as stream:
            events = list(stream)
        assert [type(e) for e in events] == [
            AttributesEvent,
            DeltaEvent,
            DeltaEvent,
            DoneEvent,
        ]
        assert stream.reply == "Try earplugs." and stream.done
        assert stream.job_id is not None and events[0].job_id == stream.job_id
        assert client.jobs.wait(stream.job_id).status == "succeeded"

        # The same key again: the service replays the JSON answer; the stream reads the same.
        again = client.turn("eve", NURSE, stream=True, idempotency_key="eve-turn-1")
        assert again.until_done() == "Try earplugs." and again.job_id == stream.job_id
        assert len(tailor.llm.requests) == 1

        generated = client.generate(
            [{"role": "user", "content": "Dinner idea?"}],
            attributes=["The user is vegetarian."],
            stream=True,
        )
        deltas = [e.text for e in generated if isinstance(e, DeltaEvent)]
        assert deltas == ["Tofu ", "curry."] and generated.reply == "Tofu curry."
        assert [a.text for a in generated.attributes_used] == ["The user is vegetarian."]

        answer = client.generate(
            [{"role": "user", "content": "Dinner idea?"}],
            attributes=["The user is vegetarian."],
            include_generic=True,
        )
        assert answer.reply == REPLY and answer.generic_reply == REPLY


@pytest.mark.slow
def test_streamed_reply_that_fails_mid_stream_raises_its_problem(tailor: Server) -> None:
    tailor.llm.reply(
        Reply(
            sse=[
                chunk(role="assistant"),
                chunk("Try "),
                "data: " + json.dumps({"error": {"message": "the GPU fell over"}}),
            ]
        )
    )
    with tailor.client() as client:
        stream = client.turn("fay", NURSE, stream=True)
        seen = []
        with pytest.raises(BadGateway) as caught:
            for event in stream:
                seen.append(event)
        assert [type(e) for e in seen] == [AttributesEvent, DeltaEvent]
        assert caught.value.type == "urn:tailor:problem:llm-bad-response"
        assert "GPU fell over" in (caught.value.detail or "")
        # The turn wrote nothing: neither the announced job nor the user.
        opening = seen[0]
        assert isinstance(opening, AttributesEvent) and opening.job_id
        with pytest.raises(NotFound):
            client.jobs.get(opening.job_id)

        tailor.llm.fallback = Reply(status=503, json={"error": {"message": "down"}})
        with pytest.raises(Unavailable) as down:
            client.turn("fay", NURSE, stream=True)
        assert down.value.type == "urn:tailor:problem:llm-unavailable"


@pytest.mark.slow
def test_users_export_and_erase(tailor: Server) -> None:
    with tailor.client() as client:
        made = client.attributes.create("gus", "The user rows at dawn.")
        exported = client.users.export("gus")
        assert exported.user_id == "gus" and [a.id for a in exported.attributes] == [made.id]
        erased = client.users.erase("gus")
        assert erased.deleted.attributes == 1 and erased.deleted.users == 1
        with pytest.raises(NotFound):
            client.users.export("gus")


@pytest.mark.slow
def test_evaluation_upload_run_report_chart(tailor: Server) -> None:
    with tailor.client() as client:
        upload = client.eval.upload(make_zip(tiny_files()))
        assert upload.files
        accepted = client.eval.start(upload_id=upload.upload_id, judge="random", seed=1)
        run = client.eval.wait(accepted.run_id, timeout=60, poll_interval=0.2)
        assert run.status == "succeeded", run.error
        assert client.eval.get(accepted.run_id).results == run.results
        assert "| specific/easy |" in client.eval.report(accepted.run_id)
        assert client.eval.chart(accepted.run_id)[:4] == b"\x89PNG"
        by_name = client.eval.start(dataset="tiny", judge="random")
        assert client.eval.wait(by_name.run_id, timeout=60).status == "succeeded"
        runs = list(client.eval.list(page_size=1))
        assert [r.run_id for r in runs][:2] == [by_name.run_id, accepted.run_id]


@pytest.mark.slow
def test_idempotency_key_given_by_the_caller_replays(tailor: Server) -> None:
    with tailor.client() as client:
        first = client.attributes.create("hal", "The user sails.", idempotency_key="hal-1")
        again = client.attributes.create("hal", "The user sails.", idempotency_key="hal-1")
        assert again.id == first.id
        assert len(client.attributes.all("hal")) == 1
        # A fresh key each call otherwise: the same text twice is two requests.
        client.attributes.create("hal", "The user knits.")
        client.attributes.create("hal", "The user knits.")
        assert len(client.attributes.all("hal")) == 3


@pytest.mark.slow
async def test_async_client(tailor: Server) -> None:
    tailor.llm.reply(streamed("Oat ", "milk."))
    async with tailor.async_client() as client:
        for i in range(5):
            await client.attributes.create("ivy", f"The user collects stamps of kind {i}.")
        listed = [a async for a in client.attributes.list("ivy", page_size=2)]
        assert len(listed) == 5
        picked = await client.select("Any hobby ideas?", user_id="ivy")
        assert len(picked.attributes) == 5
        with pytest.raises(NotFound) as caught:
            await client.attributes.get("ivy", "0" * 32)
        assert caught.value.problem["status"] == 404

        stream = await client.turn("ivy", NURSE, stream=True)
        async with stream:
            kinds = [type(e) async for e in stream]
        assert kinds == [AttributesEvent, DeltaEvent, DeltaEvent, DoneEvent]
        assert stream.reply == "Oat milk." and stream.job_id
        job = await client.jobs.wait(stream.job_id, timeout=60)
        assert job.status == "succeeded"

        turn = await client.turn("ivy", NURSE, extract=False)
        assert turn.reply == REPLY and turn.job_id is None


@pytest.mark.slow
def test_the_readme_example_runs(tailor: Server, capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).resolve().parents[2] / "clients" / "python" / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(example.strip().splitlines()) <= 10
    example = example.replace('"http://127.0.0.1:8000"', repr(tailor.base))
    example = example.replace('"tlr_..."', repr(tailor.key))
    tailor.llm.reply(completion("Lentil soup."), streamed("A ", "salad."))
    exec(compile(example, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Lentil soup. succeeded"
    assert out[1].endswith(" The user is vegetarian.") and out[-1] == "A salad."


# --- retries, against a scripted transport ----------------------------------------------------


def _created(user_id: str = "u1") -> dict[str, Any]:
    return {
        "id": "a" * 32,
        "user_id": user_id,
        "text": "The user sails.",
        "category": None,
        "status": "active",
        "verdict": None,
        "verifier_score": None,
        "source": "api",
        "superseded_by": None,
        "evidence": [],
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }


def _problem(status: int, slug: str) -> dict[str, Any]:
    return {"type": f"urn:tailor:problem:{slug}", "title": slug, "status": status, "detail": slug}


class Script:
    """A MockTransport handler answering from a list (an exception is raised instead)."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.times: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.times.append(time.monotonic())
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def keys(self) -> list[str | None]:
        return [r.headers.get("idempotency-key") for r in self.requests]


def scripted(script: Script, **kwargs: Any) -> TailorClient:
    return TailorClient(
        "http://tailor.test", api_key="k", transport=httpx.MockTransport(script), **kwargs
    )


def test_503_with_retry_after_is_retried_with_the_same_idempotency_key() -> None:
    script = Script(
        httpx.Response(
            503, json=_problem(503, "database-unavailable"), headers={"Retry-After": "1"}
        ),
        httpx.Response(201, json=_created()),
    )
    with scripted(script) as client:
        made = client.attributes.create("u1", "The user sails.")
    assert made.id == "a" * 32
    first, second = script.keys()
    assert first and first == second  # one key, reused for the retry
    assert script.requests[0].content == script.requests[1].content
    assert 1.0 <= script.times[1] - script.times[0] < 3.0  # waited as Retry-After said
    assert script.requests[0].headers["authorization"] == "Bearer k"


def test_connection_errors_and_gateway_answers_are_retried_with_backoff() -> None:
    script = Script(
        httpx.ConnectError("refused"),
        httpx.Response(502, json=_problem(502, "llm-bad-response")),
        httpx.Response(504, json=_problem(504, "llm-timeout")),
        httpx.Response(201, json=_created()),
    )
    policy = RetryPolicy(max_retries=3, backoff_base=0.05, backoff_max=0.2)
    with scripted(script, retry_policy=policy) as client:
        client.attributes.create("u1", "The user sails.")
    assert len(set(script.keys())) == 1 and len(script.requests) == 4
    waits = [b - a for a, b in zip(script.times, script.times[1:], strict=False)]
    assert all(w >= 0.02 for w in waits), waits


def test_retries_end_and_raise_the_last_problem() -> None:
    script = Script(*(httpx.Response(503, json=_problem(503, "unavailable")) for _ in range(3)))
    policy = RetryPolicy(max_retries=2, backoff_base=0.01)
    with scripted(script, retry_policy=policy) as client, pytest.raises(Unavailable) as caught:
        client.jobs.get("0" * 32)
    assert len(script.requests) == 3 and caught.value.type == "urn:tailor:problem:unavailable"
    assert script.keys() == [None, None, None]  # no Idempotency-Key on a GET

    script = Script(httpx.ConnectError("refused"), httpx.ConnectError("refused"))
    with scripted(script, max_retries=1) as client, pytest.raises(ConnectionFailed):
        client.jobs.get("0" * 32)
    assert len(script.requests) == 2


def test_no_retry_for_client_errors_or_a_long_retry_after() -> None:
    script = Script(httpx.Response(422, json=_problem(422, "validation-error")))
    with scripted(script) as client, pytest.raises(ValidationFailed):
        client.attributes.create("u1", "")
    assert len(script.requests) == 1

    script = Script(
        httpx.Response(429, json=_problem(429, "tenant-busy"), headers={"Retry-After": "120"})
    )
    with scripted(script) as client, pytest.raises(RateLimited) as caught:
        client.verify([{"role": "user", "content": "hi"}], ["The user says hi."])
    assert len(script.requests) == 1 and caught.value.retry_after == 120


def test_each_post_gets_its_own_key() -> None:
    script = Script(httpx.Response(201, json=_created()), httpx.Response(201, json=_created()))
    with scripted(script) as client:
        client.attributes.create("u1", "The user sails.")
        client.attributes.create("u1", "The user sails.")
    first, second = script.keys()
    assert first and second and first != second


async def test_async_client_retries_with_the_same_key() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return httpx.Response(
                429, json=_problem(429, "tenant-busy"), headers={"Retry-After": "0"}
            )
        return httpx.Response(201, json=_created())

    async with AsyncTailorClient(
        "http://tailor.test", api_key="k", transport=httpx.MockTransport(handler)
    ) as client:
        made = await client.attributes.create("u1", "The user sails.")
    assert made.user_id == "u1"
    assert (
        len(calls) == 2
        and calls[0].headers["idempotency-key"] == calls[1].headers["idempotency-key"]
    )


def test_a_stream_that_stops_before_done_is_an_error() -> None:
    body = b'event: attributes\ndata: []\n\nevent: delta\ndata: {"text": "Hal"}\n\n'
    script = Script(
        httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    )
    with scripted(script) as client:
        stream = client.generate([{"role": "user", "content": "hi"}], stream=True)
        with pytest.raises(StreamInterrupted):
            stream.until_done()
        assert stream.reply == "Hal"
    assert json.loads(script.requests[0].content)["stream"] is True
    assert script.requests[0].headers["accept"] == "text/event-stream"


def test_sse_decoder() -> None:
    lines = [
        ": a comment",
        "event: delta",
        'data: {"text":',
        'data: "two lines"}',
        "id: 7",
        "",
        "data: no name",
        "",
        "event: trailing-without-blank-line",
        "data: dropped",
    ]
    events = list(iter_sse(lines))
    assert events == [
        ServerSentEvent(event="delta", data='{"text":\n"two lines"}', id="7"),
        ServerSentEvent(event="message", data="no name", id="7"),
    ]
    assert events[0].json() == {"text": "two lines"}
