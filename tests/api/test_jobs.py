"""GET /v1/jobs/{job_id}: the fields, tenant scoping, and a job run by the app's own worker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from service.app import create_app
from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from service.store.jobs import JobRepository
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
