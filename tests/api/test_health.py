"""/healthz, /readyz and /metrics."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import numpy as np
from fastapi import FastAPI
from sqlalchemy import event, select
from sqlalchemy.engine import Connection

from service.api import db_errors
from service.app import create_app
from service.inference import MicroBatcher, ModelRegistry
from service.state import AppState
from service.store.db import HEALTH_ROW, create_engine
from service.store.migrate import upgrade
from service.store.models import HealthCheck
from tests.conftest import Api, Database, bearer


async def test_healthz_and_readyz(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    r = await api.client.get("/readyz")
    assert r.status_code == 200
    assert r.json()["checks"]["database"] == "ok"


async def test_readyz_fails_when_a_check_fails(api: Api) -> None:
    transport = api.client._transport
    app: FastAPI = transport.app  # type: ignore[attr-defined]

    async def not_loaded() -> str | None:
        return "verifier not loaded"

    app.state.tailor.readiness["verifier"] = not_loaded
    r = await api.client.get("/readyz")
    assert r.status_code == 503
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["checks"]["verifier"] == "verifier not loaded"


async def test_metrics_use_route_templates(api: Api) -> None:
    h = bearer(await api.new_tenant())
    await api.client.get("/v1/users/someone-specific/attributes", headers=h)
    text = (await api.client.get("/metrics")).text
    assert 'route="/v1/users/{user_id}/attributes"' in text
    assert "someone-specific" not in text
    assert "tailor_http_requests_in_flight" in text


# --- honest readiness: the database takes a write, the models answer ---------------------


@asynccontextmanager
async def _serving(db: Database, tmp_path: Path, **overrides: object) -> AsyncIterator[Api]:
    """The app as `tailor serve` builds it (503 mapping of database errors included), probes
    never cached."""
    settings = db.settings(
        tmp_path,
        **{
            "load_models": False,
            "load_llm": False,
            "jobs_worker": False,
            "readiness_cache_s": 0,
            **overrides,
        },
    )
    app = create_app(settings)
    db_errors.install(app)  # idempotent: service/app.py installs it too
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://tailor.test") as client:
            yield Api(client, db, settings)


def _state(api: Api) -> AppState:
    app: FastAPI = api.client._transport.app  # type: ignore[attr-defined]
    state: AppState = app.state.tailor
    return state


def _assert_database_unavailable(r: httpx.Response, reason: str) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == "urn:tailor:problem:database-unavailable"
    assert reason in body["detail"] and "Nothing was changed" in body["detail"]
    assert "SQL" not in r.text and "INSERT" not in r.text


async def test_readyz_writes_to_the_database(clean_db: Database, tmp_path: Path) -> None:
    async with _serving(clean_db, tmp_path) as api:
        r = await api.client.get("/readyz")
        assert r.status_code == 200 and r.json()["checks"]["database"] == "ok"
        engine = create_engine(clean_db.url, schema=clean_db.schema)
        async with engine.connect() as conn:
            rows = (await conn.execute(select(HealthCheck.id))).scalars().all()
        await engine.dispose()
        assert rows == [HEALTH_ROW]


async def test_deleted_sqlite_directory_is_not_ready_and_writes_get_503(tmp_path: Path) -> None:
    """The database file's directory is deleted while serving: the open connections could go
    on writing into the unlinked file (201, and gone after a restart). Every commit checks the
    path still names the file opened, so writes are refused (503) and /readyz says why."""
    folder = tmp_path / "db"
    folder.mkdir()
    url = f"sqlite+aiosqlite:///{folder / 'tailor.db'}"
    upgrade(url)
    async with _serving(Database("sqlite", url, None), tmp_path / "data") as api:
        h = bearer(await api.new_tenant())
        r = await api.client.post(
            "/v1/users/alice/attributes", json={"text": "Likes tea"}, headers=h
        )
        assert r.status_code == 201, r.text
        assert (await api.client.get("/readyz")).status_code == 200

        shutil.rmtree(folder)
        r = await api.client.post(
            "/v1/users/alice/attributes", json={"text": "Lost on restart"}, headers=h
        )
        _assert_database_unavailable(r, "the database file is gone")
        ready = await api.client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"] == "cannot write: the database file is gone"
        assert "database" in ready.json()["detail"]


async def test_read_only_database_is_not_ready_and_writes_get_503(
    clean_db: Database, tmp_path: Path
) -> None:
    """The database turns read-only while serving (a PostgreSQL failover to a standby, a
    SQLite file the process can no longer write): writes answer 503, not 500."""
    async with _serving(clean_db, tmp_path) as api:
        h = bearer(await api.new_tenant())
        r = await api.client.post("/v1/users/bob/attributes", json={"text": "Likes tea"}, headers=h)
        assert r.status_code == 201, r.text

        def read_only(conn: Connection) -> None:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("PRAGMA query_only = ON")
            else:
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")

        event.listen(_state(api).engine.sync_engine, "begin", read_only)
        r = await api.client.post("/v1/users/bob/attributes", json={"text": "Not kept"}, headers=h)
        _assert_database_unavailable(r, "the database is read-only")
        ready = await api.client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"] == "cannot write: the database is read-only"

        event.remove(_state(api).engine.sync_engine, "begin", read_only)
        if clean_db.backend == "sqlite":  # the pragma stays on the pooled connections
            await _state(api).engine.dispose()
        assert (await api.client.get("/readyz")).status_code == 200
        r = await api.client.get("/v1/users/bob/attributes", headers=h)
        assert [a["text"] for a in r.json()["items"]] == ["Likes tea"]


class _FakeModel:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.runs = 0

    def token_counts(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        return [8 for _ in pairs]

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self.runs += 1
        if self.fail:
            raise RuntimeError("graph cannot run")
        return np.full(len(pairs), 0.5, dtype=np.float32)


async def test_readyz_runs_each_model_and_caches_the_probe(
    clean_db: Database, tmp_path: Path
) -> None:
    """A loaded model that cannot run is not ready. A passing probe (one pair per model) is
    reused for readiness_cache_s, so frequent probes stay cheap; a failing one is repeated, so
    a recovery shows at once."""
    async with _serving(clean_db, tmp_path) as api:
        state = _state(api)
        models = {"verifier": _FakeModel(fail=False), "relevance": _FakeModel(fail=False)}
        registry = ModelRegistry(probe_ttl_s=60)
        for name, model in models.items():
            registry.batchers[name] = MicroBatcher(model, name=f"probe-test-{name}")
        await registry.start()
        state.models = registry
        state.readiness["models"] = registry.readiness
        try:
            for _ in range(3):
                r = await api.client.get("/readyz")
                assert r.status_code == 200 and r.json()["checks"]["models"] == "ok"
            assert [m.runs for m in models.values()] == [1, 1]  # one probe, then its outcome

            models["verifier"].fail = True
            registry.probe_ttl_s = 0
            for _ in range(2):
                r = await api.client.get("/readyz")
                assert r.status_code == 503
                assert r.json()["checks"]["models"] == "verifier: inference failed (RuntimeError)"
            assert [m.runs for m in models.values()] == [3, 3]  # failing: probed every time

            models["verifier"].fail = False
            registry.probe_ttl_s = 60
            r = await api.client.get("/readyz")
            assert r.status_code == 200 and r.json()["checks"]["models"] == "ok"
        finally:
            await registry.aclose()
            state.models = None


async def test_readyz_names_the_models_the_api_needs(clean_db: Database, tmp_path: Path) -> None:
    """An empty models folder loads nothing: /v1/select would answer 503, so /readyz does."""
    async with _serving(clean_db, tmp_path) as api:
        state = _state(api)
        registry = ModelRegistry()
        await registry.start()
        state.models = registry
        state.readiness["models"] = registry.readiness
        try:
            r = await api.client.get("/readyz")
            assert r.status_code == 503
            assert r.json()["checks"]["models"].startswith("not loaded: verifier, relevance")
            assert "not loaded: verifier, relevance" in r.json()["detail"]
        finally:
            await registry.aclose()
            state.models = None
