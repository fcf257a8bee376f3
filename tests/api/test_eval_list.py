"""GET /v1/eval: the tenant's evaluation runs newest first, paged, filtered by status, each
as GET /v1/eval/{run_id} answers it; another tenant's runs are never listed."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.app import create_app
from service.store import evalruns, tenants
from service.store.db import create_engine, session_factory, transaction
from tests.conftest import Api, Database, bearer

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "personafeedback_tiny"


async def _runs(db: Database, key: str, n: int) -> list[str]:
    """``n`` queued runs written as POST /v1/eval writes them, oldest first."""
    engine = create_engine(db.url, schema=db.schema)
    ids = []
    async with transaction(session_factory(engine)) as s:
        tenant_id = await tenants.authenticate(s, key)
        assert tenant_id is not None
        for i in range(n):
            run = await evalruns.create(
                s, tenant_id, {"dataset": f"set{i}", "judge": "random", "seed": i}
            )
            ids.append(run.id)
    await engine.dispose()
    return ids


async def _finish(db: Database, key: str, run_id: str, status: str, **values: Any) -> None:
    engine = create_engine(db.url, schema=db.schema)
    async with transaction(session_factory(engine)) as s:
        tenant_id = await tenants.authenticate(s, key)
        assert tenant_id is not None
        await evalruns.finish(s, tenant_id, run_id, status=status, progress=None, **values)
    await engine.dispose()


async def test_empty_then_newest_first_in_pages(api: Api) -> None:
    key = await api.new_tenant()
    h = bearer(key)
    r = await api.client.get("/v1/eval", headers=h)
    assert r.status_code == 200, r.text
    assert r.json() == {"items": [], "next_cursor": None}

    ids = await _runs(api.db, key, 5)
    r = await api.client.get("/v1/eval", headers=h)
    body = r.json()
    assert [run["run_id"] for run in body["items"]] == ids[::-1]
    assert body["next_cursor"] is None
    # Each item is the run's own document.
    for item in body["items"]:
        one = await api.client.get(f"/v1/eval/{item['run_id']}", headers=h)
        assert one.json() == item

    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = (await api.client.get("/v1/eval", params=params, headers=h)).json()
        assert len(page["items"]) <= 2
        seen += [run["run_id"] for run in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]


async def test_status_filter(api: Api) -> None:
    key = await api.new_tenant()
    h = bearer(key)
    queued, failed, succeeded = await _runs(api.db, key, 3)
    await _finish(api.db, key, failed, "failed", error="ValueError: no cases")
    results = {"accuracy": 0.5, "n": 8, "judge": "random"}
    await _finish(api.db, key, succeeded, "succeeded", results=results)

    def ids(r: httpx.Response) -> list[str]:
        assert r.status_code == 200, r.text
        return [run["run_id"] for run in r.json()["items"]]

    r = await api.client.get("/v1/eval", params={"status": "failed"}, headers=h)
    assert ids(r) == [failed] and r.json()["items"][0]["error"] == "ValueError: no cases"
    r = await api.client.get("/v1/eval", params={"status": "succeeded"}, headers=h)
    assert ids(r) == [succeeded] and r.json()["items"][0]["results"] == results
    r = await api.client.get("/v1/eval", params={"status": "queued"}, headers=h)
    assert ids(r) == [queued]
    r = await api.client.get("/v1/eval", params={"status": "running"}, headers=h)
    assert ids(r) == []


async def test_another_tenant_sees_none_of_them(api: Api) -> None:
    a_key, b_key = await api.new_tenant("a"), await api.new_tenant("b")
    a_ids = await _runs(api.db, a_key, 3)
    b_ids = await _runs(api.db, b_key, 1)
    r = await api.client.get("/v1/eval", headers=bearer(b_key))
    assert [run["run_id"] for run in r.json()["items"]] == b_ids
    # A's cursor does not open A's runs to B either.
    r = await api.client.get("/v1/eval", params={"cursor": "f" * 32}, headers=bearer(b_key))
    assert [run["run_id"] for run in r.json()["items"]] == b_ids
    r = await api.client.get("/v1/eval", headers=bearer(a_key))
    assert [run["run_id"] for run in r.json()["items"]] == a_ids[::-1]


async def test_bad_queries_and_missing_key(api: Api) -> None:
    h = bearer(await api.new_tenant())
    for params, field in [
        ({"limit": 0}, "query.limit"),
        ({"limit": 201}, "query.limit"),
        ({"cursor": "nothex"}, "query.cursor"),
        ({"status": "done"}, "query.status"),
    ]:
        r = await api.client.get("/v1/eval", params=params, headers=h)
        assert r.status_code == 422, (params, r.text)
        assert [e["field"] for e in r.json()["errors"]] == [field]
    r = await api.client.get("/v1/eval")
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/problem+json"


@pytest.fixture
async def running_api(clean_db: Database, tmp_path: Path) -> AsyncIterator[Api]:
    eval_dir = tmp_path / "eval"
    shutil.copytree(TINY, eval_dir / "tiny")
    settings = clean_db.settings(
        tmp_path, load_models=False, load_llm=False, jobs_worker=False, eval_data_dir=eval_dir
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://tailor.test") as client:
            yield Api(client, clean_db, settings, app)


async def test_a_started_run_is_listed_with_its_results(running_api: Api) -> None:
    api = running_api
    h = bearer(await api.new_tenant())
    r = await api.client.post("/v1/eval", json={"dataset": "tiny", "judge": "random"}, headers=h)
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    for _ in range(400):
        items = (await api.client.get("/v1/eval", headers=h)).json()["items"]
        assert [run["run_id"] for run in items] == [run_id]
        if items[0]["status"] in ("succeeded", "failed"):
            break
        await asyncio.sleep(0.05)
    run = items[0]
    assert run["status"] == "succeeded", run
    assert run["params"]["dataset"] == "tiny" and run["results"]["n"] == 8
    assert run["finished_at"] is not None
