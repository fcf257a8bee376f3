"""Bad input gets problem+json naming the problem, never a 500 and never a partial write."""

from __future__ import annotations

import pytest

from service.schemas.common import MAX_ATTRIBUTE_CHARS
from tests.conftest import Api, bearer

PROBLEM = "application/problem+json"


async def _count(api: Api, h: dict[str, str]) -> int:
    r = await api.client.get("/v1/users/u/attributes", params={"status": "any"}, headers=h)
    return len(r.json()["items"]) if r.status_code == 200 else 0


@pytest.mark.parametrize(
    ("body", "status", "field", "type_"),
    [
        ('{"text": "unterminated', 400, "body", "json_invalid"),
        ('{"text": "ok", "colour": "blue"}', 422, "body.colour", "extra_forbidden"),
        ('{"text": 42}', 422, "body.text", "string_type"),
        (
            '{"text": "ok", "evidence": [{"message_index": "first", "quote": "q"}]}',
            422,
            "body.evidence.0.message_index",
            "int_type",
        ),
        ("{}", 422, "body.text", "missing"),
        ('{"text": "   "}', 422, "body.text", "string_too_short"),
        (
            '{"text": "' + "x" * (MAX_ATTRIBUTE_CHARS + 1) + '"}',
            422,
            "body.text",
            "string_too_long",
        ),
        (
            '{"text": "ok", "category": "Not A Slug"}',
            422,
            "body.category",
            "string_pattern_mismatch",
        ),
        ("[1, 2]", 422, "body", "model_attributes_type"),
    ],
)
async def test_bad_bodies(api: Api, body: str, status: int, field: str, type_: str) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.post(
        "/v1/users/u/attributes",
        content=body.encode(),
        headers=h | {"Content-Type": "application/json"},
    )
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    doc = r.json()
    assert doc["status"] == status
    assert doc["type"].startswith("urn:tailor:problem:")
    assert any(e["field"] == field and e["type"] == type_ for e in doc["errors"]), doc
    assert await _count(api, h) == 0


async def test_oversized_body_is_413(api: Api) -> None:
    h = bearer(await api.new_tenant())
    big = '{"text": "' + "x" * (api.settings.max_body_bytes + 10) + '"}'
    r = await api.client.post(
        "/v1/users/u/attributes",
        content=big.encode(),
        headers=h | {"Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert r.headers["content-type"] == PROBLEM
    assert "exceeds" in r.json()["detail"]

    # Chunked upload with no Content-Length is counted as it arrives.
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(100):
            yield b"x" * 1024

    r = await api.client.post(
        "/v1/users/u/attributes",
        content=chunks(),
        headers=h | {"Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert await _count(api, h) == 0


async def test_bad_path_and_query_parameters(api: Api) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.get("/v1/users/bad%20id/attributes", headers=h)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "path.user_id"
    await api.client.post("/v1/users/u/attributes", json={"text": "x"}, headers=h)
    r = await api.client.get("/v1/users/u/attributes", params={"limit": 0}, headers=h)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "query.limit"
    r = await api.client.get("/v1/users/u/attributes", params={"status": "gone"}, headers=h)
    assert r.json()["errors"][0]["field"] == "query.status"
    r = await api.client.patch("/v1/users/u/attributes/" + "a" * 32, json={}, headers=h)
    assert r.status_code in (404, 422)


async def test_empty_patch_is_422(api: Api) -> None:
    h = bearer(await api.new_tenant())
    attr = (await api.client.post("/v1/users/u/attributes", json={"text": "x"}, headers=h)).json()
    url = f"/v1/users/u/attributes/{attr['id']}"
    r = await api.client.patch(url, json={}, headers=h)
    assert r.status_code == 422
    r = await api.client.patch(url, json={"text": None}, headers=h)
    assert r.status_code == 422
    r = await api.client.patch(url, json={"status": "archived"}, headers=h)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "body.status"


async def test_unknown_route_and_method(api: Api) -> None:
    r = await api.client.get("/v1/nothing-here")
    assert r.status_code == 404
    assert r.headers["content-type"] == PROBLEM
    r = await api.client.put("/v1/users/u/attributes")
    assert r.status_code == 405
    assert r.headers["content-type"] == PROBLEM


async def test_failure_after_a_write_leaves_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attribute row is flushed before the audit entry; if the audit write fails the whole
    request rolls back: a 500 problem and no attribute, no user."""
    from service.store.attributes import AttributeRepository

    h = bearer(await api.new_tenant())

    def broken_audit(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(AttributeRepository, "_audit", broken_audit)
    r = await api.client.post("/v1/users/fresh/attributes", json={"text": "x"}, headers=h)
    assert r.status_code == 500
    assert r.headers["content-type"] == PROBLEM
    assert "disk on fire" not in r.text
    monkeypatch.undo()
    r = await api.client.get("/v1/users/fresh/attributes", headers=h)
    assert r.status_code == 404  # not even the user was written


# --- the same input rules on every database backend ----------------------------------------

UNSTORABLE = "must not contain NUL (\\u0000) or unpaired surrogate characters"


def _unstorable_problem(path: str, field: str) -> dict[str, object]:
    return {
        "type": "urn:tailor:problem:validation-error",
        "title": "Validation failed",
        "status": 422,
        "detail": f"{field}: {UNSTORABLE}",
        "instance": path,
        "errors": [{"field": field, "message": UNSTORABLE, "type": "string_unstorable"}],
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # PostgreSQL text cannot hold NUL: this was 201 on SQLite and 500 on PostgreSQL.
        (b'{"text": "likes \\u0000 tea"}', "body.text"),
        # A lone surrogate, as a JSON escape and as the bytes of a surrogate-encoded body.
        (b'{"text": "likes \\ud800 tea"}', "body.text"),
        (b'{"text": "likes \xed\xa0\x80 tea"}', "body.text"),
        (
            b'{"text": "ok", "evidence": [{"message_index": 0, "quote": "q\\u0000"}]}',
            "body.evidence.0.quote",
        ),
        (b'{"text": "ok", "category": "diet\\u0000"}', "body.category"),
    ],
)
async def test_unstorable_characters_are_the_same_422_on_every_backend(
    api: Api, body: bytes, field: str
) -> None:
    """The `api` fixture runs once on SQLite and once on PostgreSQL: both answer this exact
    document, and neither writes anything."""
    h = bearer(await api.new_tenant())
    path = "/v1/users/u/attributes"
    r = await api.client.post(path, content=body, headers=h | {"Content-Type": "application/json"})
    assert r.status_code == 422, (api.db.backend, r.text)
    assert r.headers["content-type"] == PROBLEM
    assert r.json() == _unstorable_problem(path, field)
    assert await _count(api, h) == 0


async def test_unstorable_characters_in_a_patch_and_an_eval_run(api: Api) -> None:
    h = bearer(await api.new_tenant())
    attr = (await api.client.post("/v1/users/u/attributes", json={"text": "x"}, headers=h)).json()
    path = f"/v1/users/u/attributes/{attr['id']}"
    r = await api.client.patch(path, json={"text": "a\x00b"}, headers=h)
    assert r.status_code == 422, r.text
    assert r.json() == _unstorable_problem(path, "body.text")
    r = await api.client.get(path, headers=h)
    assert r.json()["text"] == "x"
    r = await api.client.post(
        "/v1/eval", json={"dataset": "tiny\x00", "judge": "random"}, headers=h
    )
    assert r.status_code == 422, r.text
    assert r.json() == _unstorable_problem("/v1/eval", "body.dataset")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"dataset": "tiny", "judge": "random", "seed": "3"}, "body.seed"),
        ({"dataset": "tiny", "judge": "random", "seed": True}, "body.seed"),
        ({"dataset": "tiny", "judge": "random", "limit": 2.5}, "body.limit"),
    ],
)
async def test_numbers_are_not_coerced(api: Api, body: dict[str, object], field: str) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.post("/v1/eval", json=body, headers=h)
    assert r.status_code == 422, r.text
    assert [(e["field"], e["type"]) for e in r.json()["errors"]] == [(field, "int_type")]


async def test_an_integral_number_is_an_integer_however_written(api: Api) -> None:
    """JSON Schema's integer: 0.0 is the integer 0."""
    h = bearer(await api.new_tenant())
    body = {"text": "x", "evidence": [{"message_index": 0.0, "quote": "q"}]}
    r = await api.client.post("/v1/users/u/attributes", json=body, headers=h)
    assert r.status_code == 201, r.text
    assert r.json()["evidence"] == [{"message_index": 0, "quote": "q"}]


# --- methods and media types ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/users/u/attributes", "GET, POST"),
        ("DELETE", "/v1/users/u/attributes", "GET, POST"),
        ("PUT", "/v1/users/u/attributes/" + "a" * 32, "GET, PATCH, DELETE"),
        ("POST", "/v1/users/u", "DELETE"),
        ("OPTIONS", "/v1/users/u/export", "GET"),
        ("GET", "/v1/extract", "POST"),
        ("POST", "/v1/eval/" + "a" * 32, "GET"),
        # `uploads` is not a run id: the upload route's 405, not a malformed id's 422.
        ("GET", "/v1/eval/uploads", "POST"),
        ("DELETE", "/v1/eval/uploads", "POST"),
    ],
)
async def test_405_allows_every_method_of_the_path(
    api: Api, method: str, path: str, allow: str
) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.request(method, path, headers=h)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allow
    assert r.headers["content-type"] == PROBLEM
    assert r.json()["type"] == "urn:tailor:problem:method-not-allowed"


async def test_a_malformed_run_id_is_still_422(api: Api) -> None:
    h = bearer(await api.new_tenant())
    for run_id in ("nothex", "uploadsx"):
        r = await api.client.get(f"/v1/eval/{run_id}", headers=h)
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == "path.run_id"


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/x-www-form-urlencoded"},
        {"Content-Type": "multipart/form-data; boundary=x"},
        {},  # a body and no Content-Type at all
    ],
)
async def test_a_json_route_answers_415_to_another_media_type(
    api: Api, headers: dict[str, str]
) -> None:
    h = bearer(await api.new_tenant())
    r = await api.client.post(
        "/v1/users/u/attributes", content=b'{"text": "x"}', headers=h | headers
    )
    assert r.status_code == 415, r.text
    assert r.headers["content-type"] == PROBLEM
    doc = r.json()
    assert doc["type"] == "urn:tailor:problem:unsupported-media-type"
    assert "application/json" in doc["detail"]
    assert doc["errors"][0]["field"] == "header.Content-Type"
    assert await _count(api, h) == 0


async def test_json_media_types_and_missing_bodies(api: Api) -> None:
    h = bearer(await api.new_tenant())
    # application/<anything>+json is JSON, with or without parameters.
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        r = await api.client.post(
            "/v1/users/u/attributes",
            content=b'{"text": "x"}',
            headers=h | {"Content-Type": content_type},
        )
        assert r.status_code == 201, r.text
    # No body at all is the missing body (422), whatever the Content-Type says.
    r = await api.client.post("/v1/users/u/attributes", headers=h | {"Content-Type": "text/plain"})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "body"
    # The multipart upload keeps its own rules: JSON there is a missing `file`, not a 415.
    r = await api.client.post("/v1/eval/uploads", json={"file": "x"}, headers=h)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "body.file"


async def test_every_problem_error_has_a_type(api: Api) -> None:
    """Errors raised with only a field and a message get the problem's slug as their type."""
    h = bearer(await api.new_tenant())
    body = {"dataset": "nowhere", "judge": "random"}
    r = await api.client.post("/v1/eval", json=body, headers=h)
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == [
        {"field": "body.dataset", "message": "no such dataset", "type": "validation_error"}
    ]
