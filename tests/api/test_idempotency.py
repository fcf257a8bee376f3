"""Idempotency-Key on POST."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from tests.conftest import Api, bearer


async def _history_len(api: Api, h: dict[str, str], attr_id: str) -> int:
    r = await api.client.get(f"/v1/users/u/attributes/{attr_id}/history", headers=h)
    return len(r.json()["items"])


async def test_repeat_returns_first_response_and_writes_nothing(api: Api) -> None:
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "abc-123"}
    first = await api.client.post("/v1/users/u/attributes", json={"text": "likes tea"}, headers=h)
    second = await api.client.post("/v1/users/u/attributes", json={"text": "likes tea"}, headers=h)
    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert second.headers["idempotent-replayed"] == "true"
    items = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert len(items) == 1
    assert await _history_len(api, h, first.json()["id"]) == 1


async def test_same_key_other_body_is_422(api: Api) -> None:
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "k"}
    await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    r = await api.client.post("/v1/users/u/attributes", json={"text": "b"}, headers=h)
    assert r.status_code == 422
    assert r.json()["type"] == "urn:tailor:problem:idempotency-key-reused"


async def test_keys_are_per_tenant(api: Api) -> None:
    a = bearer(await api.new_tenant("a")) | {"Idempotency-Key": "k"}
    b = bearer(await api.new_tenant("b")) | {"Idempotency-Key": "k"}
    ra = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=a)
    rb = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=b)
    assert ra.status_code == rb.status_code == 201
    assert ra.json()["id"] != rb.json()["id"]
    assert "idempotent-replayed" not in rb.headers


async def test_failed_request_does_not_burn_the_key(api: Api) -> None:
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "retry-me"}
    bad = await api.client.post("/v1/users/u/attributes", json={"text": ""}, headers=h)
    assert bad.status_code == 422
    fixed = await api.client.post("/v1/users/u/attributes", json={"text": ""}, headers=h)
    assert fixed.status_code == 422
    assert "idempotent-replayed" not in fixed.headers
    ok = await api.client.post("/v1/users/u/attributes", json={"text": "now fine"}, headers=h)
    assert ok.status_code == 201


async def test_concurrent_duplicates_create_one(api: Api) -> None:
    """Duplicates racing on the same key: one write; every one of them answers with it."""
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "race"}
    results = await asyncio.gather(
        *[
            api.client.post("/v1/users/u/attributes", json={"text": "once"}, headers=h)
            for _ in range(5)
        ]
    )
    assert [r.status_code for r in results] == [201] * 5
    assert len({r.json()["id"] for r in results}) == 1
    assert sum("idempotent-replayed" not in r.headers for r in results) == 1
    items = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert len(items) == 1


async def test_write_failing_after_the_lookup_leaves_the_key_free(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure the old claim row turned into 409s: the write fails (a lock timeout) after
    the key was looked up. Nothing was stored, so the retry performs the one write."""
    from service.store.attributes import AttributeRepository

    real_create = AttributeRepository.create
    failures = [OperationalError("INSERT", {}, Exception("database is locked"))]

    async def create_or_fail(self: AttributeRepository, *args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real_create(self, *args, **kwargs)

    monkeypatch.setattr(AttributeRepository, "create", create_or_fail)
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "locked"}
    failed = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    assert failed.status_code >= 500
    retried = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    assert retried.status_code == 201
    assert "idempotent-replayed" not in retried.headers
    again = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == retried.json()
    items = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert [i["id"] for i in items] == [retried.json()["id"]]


async def test_sqlite_lock_contention_then_retry_writes_once(api: Api) -> None:
    """Another process holds SQLite's write lock past the busy timeout: the request fails with
    a 503 naming the database, writes nothing, and the retry with the same key writes once."""
    if api.db.backend != "sqlite":
        pytest.skip("SQLite's write lock")
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "contended"}
    path = api.db.url.split("///", 1)[1]
    holder = sqlite3.connect(path, timeout=10, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        failed = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert failed.status_code == 503
    assert failed.headers["content-type"] == "application/problem+json"
    retried = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    assert retried.status_code == 201
    assert "idempotent-replayed" not in retried.headers
    items = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert len(items) == 1


async def test_invalid_key_header(api: Api) -> None:
    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "x" * 300}
    r = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    assert r.status_code == 422
    assert "Idempotency-Key" in r.json()["detail"]


async def test_expired_key_runs_again(api: Api) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    from service.store.db import create_engine
    from service.store.models import IdempotencyKey, utcnow

    h = bearer(await api.new_tenant()) | {"Idempotency-Key": "old"}
    first = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    engine = create_engine(api.db.url, schema=api.db.schema)
    async with engine.begin() as conn:
        past = utcnow() - timedelta(seconds=api.settings.idempotency_ttl_seconds + 5)
        await conn.execute(update(IdempotencyKey).values(created_at=past))
    await engine.dispose()
    again = await api.client.post("/v1/users/u/attributes", json={"text": "a"}, headers=h)
    assert again.status_code == 201
    assert again.json()["id"] != first.json()["id"]
    assert "idempotent-replayed" not in again.headers
