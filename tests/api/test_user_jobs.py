"""GET /v1/users/{user_id}/jobs: one user's jobs newest first, paged, filtered by status,
errors summarized as GET /v1/jobs/{id} shows them, and scoped by tenant."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from service.store.jobs import JobRepository
from service.store.models import Job
from service.store.users import get_or_create_user
from tests.conftest import Api, Database, bearer

FIELDS = {
    "id",
    "kind",
    "status",
    "attempts",
    "max_attempts",
    "error",
    "result",
    "user_id",
    "created_at",
    "updated_at",
    "run_after",
}


async def _enqueue(db: Database, key: str, external_id: str | None, n: int = 1) -> list[str]:
    """``n`` jobs for the user (created if new), oldest first."""
    engine = create_engine(db.url, schema=db.schema)
    ids = []
    async with transaction(session_factory(engine)) as s:
        tenant_id = await tenants.authenticate(s, key)
        assert tenant_id is not None
        user_id = None
        if external_id is not None:
            user_id = (await get_or_create_user(s, tenant_id, external_id)).id
        for i in range(n):
            job = await JobRepository(s).enqueue(
                tenant_id=tenant_id, user_id=user_id, kind="mark", payload={"text": f"t{i}"}
            )
            ids.append(job.id)
    await engine.dispose()
    return ids


async def _set(db: Database, job_id: str, **values: Any) -> None:
    engine = create_engine(db.url, schema=db.schema)
    async with transaction(session_factory(engine)) as s:
        await s.execute(update(Job).where(Job.id == job_id).values(**values))
    await engine.dispose()


async def _all_pages(api: Api, url: str, headers: dict[str, str], limit: int) -> list[Any]:
    items: list[Any] = []
    cursor = None
    for _ in range(20):
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        r = await api.client.get(url, params=params, headers=headers)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["items"]) <= limit
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("paging did not end")


async def test_a_users_jobs_newest_first_in_pages(api: Api) -> None:
    key = await api.new_tenant()
    h = bearer(key)
    alice = await _enqueue(api.db, key, "alice", 5)
    await _enqueue(api.db, key, "bob", 2)
    await _enqueue(api.db, key, None, 1)

    r = await api.client.get("/v1/users/alice/jobs", headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"items", "next_cursor"} and body["next_cursor"] is None
    assert [j["id"] for j in body["items"]] == alice[::-1]
    first = body["items"][0]
    assert set(first) == FIELDS
    assert (first["kind"], first["status"], first["user_id"], first["attempts"]) == (
        "mark",
        "queued",
        "alice",
        0,
    )
    # The same document as the job's own route.
    one = await api.client.get(f"/v1/jobs/{first['id']}", headers=h)
    assert one.json() == first

    paged = await _all_pages(api, "/v1/users/alice/jobs", h, limit=2)
    assert [j["id"] for j in paged] == alice[::-1]
    r = await api.client.get("/v1/users/alice/jobs", params={"limit": 5}, headers=h)
    assert len(r.json()["items"]) == 5 and r.json()["next_cursor"] is None


async def test_status_filter_and_summarized_errors(api: Api) -> None:
    key = await api.new_tenant()
    h = bearer(key)
    queued, failed, succeeded = await _enqueue(api.db, key, "alice", 3)
    # A row written before errors were summarized: the API never shows its SQL.
    await _set(
        api.db,
        failed,
        status="failed",
        attempts=5,
        error="(sqlite3.IntegrityError) UNIQUE constraint failed\n[SQL: INSERT INTO x] "
        "[parameters: ('secret',)]",
    )
    await _set(api.db, succeeded, status="succeeded", attempts=1, result={"stored": 1})

    r = await api.client.get("/v1/users/alice/jobs", params={"status": "failed"}, headers=h)
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [j["id"] for j in items] == [failed]
    assert items[0]["error"] == "database error: IntegrityError"
    assert items[0]["attempts"] == 5
    r = await api.client.get("/v1/users/alice/jobs", params={"status": "succeeded"}, headers=h)
    assert [(j["id"], j["result"]) for j in r.json()["items"]] == [(succeeded, {"stored": 1})]
    r = await api.client.get("/v1/users/alice/jobs", params={"status": "queued"}, headers=h)
    assert [j["id"] for j in r.json()["items"]] == [queued]
    r = await api.client.get("/v1/users/alice/jobs", params={"status": "running"}, headers=h)
    assert r.json() == {"items": [], "next_cursor": None}


async def test_a_user_without_jobs_and_a_missing_user(api: Api) -> None:
    h = bearer(await api.new_tenant())
    await api.client.post("/v1/users/quiet/attributes", json={"text": "Likes tea"}, headers=h)
    r = await api.client.get("/v1/users/quiet/jobs", headers=h)
    assert r.status_code == 200 and r.json() == {"items": [], "next_cursor": None}
    r = await api.client.get("/v1/users/nobody/jobs", headers=h)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"


async def test_another_tenant_sees_none_of_them(api: Api) -> None:
    owner_key = await api.new_tenant("owner")
    other_key = await api.new_tenant("other")
    owner, other = bearer(owner_key), bearer(other_key)
    await _enqueue(api.db, owner_key, "alice", 2)
    await _enqueue(api.db, owner_key, "only-owner", 1)
    theirs = await _enqueue(api.db, other_key, "alice", 1)

    # Same user id in both tenants: each sees its own jobs only.
    r = await api.client.get("/v1/users/alice/jobs", headers=other)
    assert [j["id"] for j in r.json()["items"]] == theirs
    # A user only the owner has looks exactly like one that does not exist.
    foreign = await api.client.get("/v1/users/only-owner/jobs", headers=other)
    missing = await api.client.get("/v1/users/nobody-at-all/jobs", headers=other)
    assert foreign.status_code == missing.status_code == 404
    strip = {"instance"}
    assert {k: v for k, v in foreign.json().items() if k not in strip} == {
        k: v for k, v in missing.json().items() if k not in strip
    }
    assert len((await api.client.get("/v1/users/alice/jobs", headers=owner)).json()["items"]) == 2


async def test_erasure_takes_the_jobs_with_it(api: Api) -> None:
    key = await api.new_tenant()
    h = bearer(key)
    await _enqueue(api.db, key, "alice", 2)
    r = await api.client.delete("/v1/users/alice", headers=h)
    assert r.status_code == 200 and r.json()["deleted"]["jobs"] == 2
    assert (await api.client.get("/v1/users/alice/jobs", headers=h)).status_code == 404


async def test_bad_queries_and_missing_key(api: Api) -> None:
    key = await api.new_tenant()
    h = bearer(key)
    await _enqueue(api.db, key, "alice", 1)
    for params, field in [
        ({"limit": 0}, "query.limit"),
        ({"limit": 201}, "query.limit"),
        ({"limit": "x"}, "query.limit"),
        ({"cursor": "not-an-id"}, "query.cursor"),
        ({"status": "archived"}, "query.status"),
    ]:
        r = await api.client.get("/v1/users/alice/jobs", params=params, headers=h)
        assert r.status_code == 422, (params, r.text)
        assert [e["field"] for e in r.json()["errors"]] == [field]
    r = await api.client.get("/v1/users/bad%20id/jobs", headers=h)
    assert r.status_code == 422
    assert (await api.client.get("/v1/users/alice/jobs")).status_code == 401
