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
            "int_parsing",
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
