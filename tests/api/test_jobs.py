"""GET /v1/jobs/{job_id}: the fields, tenant scoping, and a job run by the app's own worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from service.app import create_app
from service.jobs import ClaimedJob
from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from service.store.jobs import JobRepository
from service.store.models import Job, User
from service.store.users import get_or_create_user
from tests.conftest import Api, Database, bearer
from tests.jobs.handlers import MarkerHandler

MISSING_ID = "0" * 32


async def _enqueue(db: Database, key: str, external_id: str | None, text: str) -> str:
    engine = create_engine(db.url, schema=db.schema)
    async with transaction(session_factory(engine)) as s:
        tenant_id = await tenants.authenticate(s, key)
        assert tenant_id is not None
        user_id = None
        if external_id is not None:
            user_id = (await get_or_create_user(s, tenant_id, external_id)).id
        job = await JobRepository(s).enqueue(
            tenant_id=tenant_id, user_id=user_id, kind="mark", payload={"text": text}
        )
    await engine.dispose()
    return job.id


async def test_get_job_fields(api: Api) -> None:
    key = await api.new_tenant()
    job_id = await _enqueue(api.db, key, "alice", "likes tea")
    r = await api.client.get(f"/v1/jobs/{job_id}", headers=bearer(key))
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {
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
    assert body["id"] == job_id
    assert (body["kind"], body["status"], body["attempts"], body["max_attempts"]) == (
        "mark",
        "queued",
        0,
        5,
    )
    assert (body["error"], body["result"], body["user_id"]) == (None, None, "alice")

    no_user = await _enqueue(api.db, key, None, "global")
    r = await api.client.get(f"/v1/jobs/{no_user}", headers=bearer(key))
    assert r.status_code == 200 and r.json()["user_id"] is None


async def test_other_tenants_job_is_the_same_404_as_a_missing_one(api: Api) -> None:
    owner = await api.new_tenant("owner")
    other = await api.new_tenant("other")
    job_id = await _enqueue(api.db, owner, "alice", "x")
    foreign = await api.client.get(f"/v1/jobs/{job_id}", headers=bearer(other))
    missing = await api.client.get(f"/v1/jobs/{MISSING_ID}", headers=bearer(other))
    assert foreign.status_code == missing.status_code == 404
    assert foreign.headers["content-type"] == "application/problem+json"
    strip = {"instance"}
    assert {k: v for k, v in foreign.json().items() if k not in strip} == {
        k: v for k, v in missing.json().items() if k not in strip
    }


async def test_bad_job_id_and_missing_key(api: Api) -> None:
    key = await api.new_tenant()
    r = await api.client.get("/v1/jobs/not-an-id", headers=bearer(key))
    assert r.status_code == 422
    assert [e["field"] for e in r.json()["errors"]] == ["path.job_id"]
    assert (await api.client.get(f"/v1/jobs/{MISSING_ID}")).status_code == 401


async def test_the_apps_worker_runs_a_job_to_success(clean_db: Database, tmp_path: Path) -> None:
    settings = clean_db.settings(
        tmp_path, load_models=False, load_llm=False, jobs_poll_interval_s=0.05
    )
    app = create_app(settings, job_handlers=lambda _state: {"mark": MarkerHandler()})
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            api = Api(client, clean_db, settings)
            key = await api.new_tenant()
            job_id = await _enqueue(clean_db, key, "alice", "runs in the app")
            for _ in range(200):
                body = (await client.get(f"/v1/jobs/{job_id}", headers=bearer(key))).json()
                if body["status"] == "succeeded":
                    break
                await asyncio.sleep(0.05)
            assert body["status"] == "succeeded", body
            assert body["result"]["text"] == "runs in the app"
            attrs = await client.get("/v1/users/alice/attributes", headers=bearer(key))
            assert [a["text"] for a in attrs.json()["items"]] == ["runs in the app"]
            ready = await client.get("/readyz")
            assert ready.json()["checks"]["jobs"] == "ok"


class _DuplicateUser(MarkerHandler):
    """Its apply fails on a duplicate primary key: a database error whose message carries the
    INSERT statement and its parameters (the tenant id and the internal user id)."""

    async def apply(self, session: AsyncSession, job: ClaimedJob, prepared: Any) -> dict[str, Any]:
        session.add(User(id=job.user_id, tenant_id=job.tenant_id, external_id="again"))
        await session.flush()
        return {}


async def test_a_failed_jobs_error_is_a_summary(clean_db: Database, tmp_path: Path) -> None:
    settings = clean_db.settings(
        tmp_path,
        load_models=False,
        load_llm=False,
        jobs_poll_interval_s=0.05,
        jobs_backoff_base_s=60.0,  # one attempt is all this test needs to see
    )
    app = create_app(settings, job_handlers=lambda _state: {"mark": _DuplicateUser()})
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            key = await Api(client, clean_db, settings).new_tenant()
            job_id = await _enqueue(clean_db, key, "alice", "never stored")
            for _ in range(200):
                r = await client.get(f"/v1/jobs/{job_id}", headers=bearer(key))
                if r.json()["error"] is not None:
                    break
                await asyncio.sleep(0.05)
    body = r.json()
    assert (body["status"], body["error"]) == ("queued", "database error: IntegrityError")
    assert "INSERT" not in r.text and "users" not in r.text


async def test_an_old_rows_sql_error_is_cut_down_when_shown(api: Api) -> None:
    """Rows failed before errors were summarized hold SQLAlchemy's full text."""
    key = await api.new_tenant()
    job_id = await _enqueue(api.db, key, "alice", "x")
    legacy = (
        "IntegrityError: (sqlite3.IntegrityError) UNIQUE constraint failed: users.id\n"
        "[SQL: INSERT INTO users (id, tenant_id, external_id, created_at) VALUES (?, ?, ?, ?)]\n"
        "[parameters: ('0f0f', 'tenant-secret-id', 'alice', '2026-11-30')]\n"
        "(Background on this error at: https://sqlalche.me/e/20/gkpj)"
    )
    engine = create_engine(api.db.url, schema=api.db.schema)
    async with transaction(session_factory(engine)) as s:
        await s.execute(update(Job).where(Job.id == job_id).values(status="failed", error=legacy))
    await engine.dispose()
    r = await api.client.get(f"/v1/jobs/{job_id}", headers=bearer(key))
    assert r.json()["error"] == "database error: IntegrityError"
    assert "tenant-secret-id" not in r.text
