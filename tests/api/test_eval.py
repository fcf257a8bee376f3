"""/v1/eval end to end on both databases: runs by dataset name or upload, status and results,
reports, refused names and archives, restarts, and the same numbers for the same run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY
from sqlalchemy import select

from service.app import create_app
from service.config import Settings
from service.evaluation import commands
from service.store import evalruns
from service.store.db import create_engine, session_factory, transaction
from service.store.models import EvalRun
from tests.conftest import Api, Database, bearer
from tests.evaluation.test_uploads import make_zip, tiny_files
from tests.llm.conftest import FakeLLMServer, completion

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "personafeedback_tiny"


@pytest.fixture
def eval_settings(clean_db: Database, tmp_path: Path) -> Settings:
    eval_dir = tmp_path / "eval"
    shutil.copytree(TINY, eval_dir / "tiny")
    return clean_db.settings(
        tmp_path,
        max_body_bytes=64 * 1024,
        load_models=False,
        load_llm=False,  # no model and no LLM: judges that need one answer 503
        eval_data_dir=eval_dir,
        eval_upload_max_bytes=256 * 1024,
    )


@contextlib.asynccontextmanager
async def serving(settings: Settings, db: Database) -> AsyncIterator[tuple[Api, FastAPI]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://tailor.test") as client:
            yield Api(client, db, settings), app


@pytest.fixture
async def eval_api(eval_settings: Settings, clean_db: Database) -> AsyncIterator[Api]:
    async with serving(eval_settings, clean_db) as (api, _):
        yield api


async def wait_done(api: Api, run_id: str, headers: dict[str, str]) -> dict[str, Any]:
    for _ in range(400):
        doc: dict[str, Any] = (await api.client.get(f"/v1/eval/{run_id}", headers=headers)).json()
        if doc["status"] in ("succeeded", "failed"):
            return doc
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not finish: {doc}")


def numbers(results: dict[str, Any]) -> dict[str, Any]:
    """Everything but the wall time, which is the one figure allowed to differ."""
    return {k: v for k, v in results.items() if k not in ("wall_time_s", "benchmark", "data")}


def counter(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def test_run_by_dataset_name(eval_api: Api) -> None:
    h = bearer(await eval_api.new_tenant())
    started = counter("tailor_eval_runs_started_total")
    scored = REGISTRY.get_sample_value("tailor_eval_cases_scored_total", {"judge": "random"}) or 0
    r = await eval_api.client.post(
        "/v1/eval", json={"dataset": "tiny", "judge": "random", "seed": 3}, headers=h
    )
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    assert r.headers["location"] == f"/v1/eval/{run_id}"
    doc = await wait_done(eval_api, run_id, h)
    assert doc["status"] == "succeeded", doc
    results = doc["results"]
    assert results["n"] == 8 and results["judge"] == "random"
    assert 0.0 <= results["accuracy"] <= 1.0
    assert results["by_split_tier"]["specific/hard"]["n"] == 2
    assert set(results["by_split_tier"]["specific/easy"]) >= {"accuracy", "n", "ci95"}
    assert results["problems_total"] == 1 and "spedific/hard.jsonl:2" in results["problems"][0]
    assert doc["progress"]["done"] == doc["progress"]["total"] == 8
    assert doc["finished_at"] is not None
    assert counter("tailor_eval_runs_started_total") == started + 1
    assert REGISTRY.get_sample_value("tailor_eval_cases_scored_total", {"judge": "random"}) == (
        scored + 8
    )

    # Another tenant cannot see it.
    other = bearer(await eval_api.new_tenant("other"))
    assert (await eval_api.client.get(f"/v1/eval/{run_id}", headers=other)).status_code == 404


async def test_same_run_twice_same_numbers_as_the_cli(eval_api: Api) -> None:
    h = bearer(await eval_api.new_tenant())
    body = {"dataset": "tiny", "judge": "random", "seed": 11, "tiers": ["easy", "hard"]}
    docs = []
    for _ in range(2):
        run_id = (await eval_api.client.post("/v1/eval", json=body, headers=h)).json()["run_id"]
        docs.append(await wait_done(eval_api, run_id, h))
    assert numbers(docs[0]["results"]) == numbers(docs[1]["results"])
    from service.evaluation.runner import Selection

    cli = await asyncio.to_thread(
        commands.eval_personafeedback,
        eval_api.settings,
        TINY,
        "random",
        selection=Selection(tiers=("easy", "hard")),
        seed=11,
        show_progress=False,
    )
    assert numbers(cli) == numbers(docs[0]["results"])
    assert set(cli) == set(docs[0]["results"])


@pytest.mark.parametrize("judge", ["reward", "embedding"])
async def test_model_judges_run_through_the_batchers_with_the_clis_numbers(
    eval_settings: Settings, clean_db: Database, shared_data_dir: Path, judge: str
) -> None:
    """With the shipped models loaded, the model judges score through the serving batchers
    (between live batches) and still give exactly the offline command's numbers: the reward
    model sees the same fixed, length-sorted batches either way."""
    # The shared data folder: its ONNX cache already holds the derived CPU graphs.
    settings = eval_settings.model_copy(update={"load_models": True, "data_dir": shared_data_dir})
    model = {"reward": "reward", "embedding": "embedder"}[judge]
    async with serving(settings, clean_db) as (api, _):
        h = bearer(await api.new_tenant())
        body = {"dataset": "tiny", "judge": judge, "tiers": ["easy", "hard"]}
        before = REGISTRY.get_sample_value("tailor_inference_items_total", {"model": model})
        run_id = (await api.client.post("/v1/eval", json=body, headers=h)).json()["run_id"]
        doc = await wait_done(api, run_id, h)
        assert doc["status"] == "succeeded", doc
        after = REGISTRY.get_sample_value("tailor_inference_items_total", {"model": model})
        # Six cases: two replies each for the reward model, persona and two replies to embed.
        assert (after or 0) - (before or 0) == (12 if judge == "reward" else 18)
    from service.evaluation.runner import Selection

    cli = await asyncio.to_thread(
        commands.eval_personafeedback,
        settings,
        TINY,
        judge,
        selection=Selection(tiers=("easy", "hard")),
        show_progress=False,
    )
    assert numbers(cli) == numbers(doc["results"])


@pytest.mark.parametrize("name", ["..", "../tiny", "/etc", "tiny/../..", ".hidden", "a\\b"])
async def test_dataset_name_that_leaves_the_folder_is_422(eval_api: Api, name: str) -> None:
    h = bearer(await eval_api.new_tenant())
    r = await eval_api.client.post("/v1/eval", json={"dataset": name, "judge": "random"}, headers=h)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "body.dataset"


async def test_unknown_dataset_symlink_escape_and_source_choice(
    eval_api: Api, tmp_path: Path
) -> None:
    h = bearer(await eval_api.new_tenant())
    outside = tmp_path / "outside"
    shutil.copytree(TINY, outside)
    os.symlink(outside, eval_api.settings.eval_data_root / "escape")
    for body in (
        {"dataset": "missing", "judge": "random"},
        {"dataset": "escape", "judge": "random"},
        {"judge": "random"},
        {"dataset": "tiny", "upload_id": "0" * 32, "judge": "random"},
        {"upload_id": "0" * 32, "judge": "random"},
        {"dataset": "tiny", "judge": "oracle"},
        {"dataset": "tiny", "judge": "random", "tiers": ["impossible"]},
    ):
        r = await eval_api.client.post("/v1/eval", json=body, headers=h)
        assert r.status_code == 422, (body, r.text)


@pytest.mark.parametrize("judge", ["reward", "embedding", "llm"])
async def test_judge_without_its_model_is_503(eval_api: Api, judge: str) -> None:
    h = bearer(await eval_api.new_tenant())
    r = await eval_api.client.post("/v1/eval", json={"dataset": "tiny", "judge": judge}, headers=h)
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json"


async def test_report_and_chart(eval_api: Api) -> None:
    h = bearer(await eval_api.new_tenant())
    run_id = (
        await eval_api.client.post(
            "/v1/eval", json={"dataset": "tiny", "judge": "random"}, headers=h
        )
    ).json()["run_id"]
    await wait_done(eval_api, run_id, h)
    report = await eval_api.client.get(f"/v1/eval/{run_id}/report", headers=h)
    assert report.status_code == 200
    assert report.headers["content-type"].startswith("text/markdown")
    assert "| specific/easy | 2 |" in report.text
    assert "data:image/png;base64,iVBOR" in report.text
    assert f"/v1/eval/{run_id}/chart.png" in report.text
    chart = await eval_api.client.get(f"/v1/eval/{run_id}/chart.png", headers=h)
    assert chart.status_code == 200 and chart.headers["content-type"] == "image/png"
    assert chart.content[:4] == b"\x89PNG"
    missing = await eval_api.client.get(f"/v1/eval/{'f' * 32}/report", headers=h)
    assert missing.status_code == 404


async def test_without_matplotlib_the_report_has_no_chart_and_the_chart_is_503(
    eval_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A serving-only install (no `reports` extra): the figures still come, the chart says why
    it is missing."""
    h = bearer(await eval_api.new_tenant())
    run_id = (
        await eval_api.client.post(
            "/v1/eval", json={"dataset": "tiny", "judge": "random"}, headers=h
        )
    ).json()["run_id"]
    await wait_done(eval_api, run_id, h)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    report = await eval_api.client.get(f"/v1/eval/{run_id}/report", headers=h)
    assert report.status_code == 200
    assert "| specific/easy | 2 |" in report.text
    assert "data:image/png" not in report.text and "tailor[reports]" in report.text
    chart = await eval_api.client.get(f"/v1/eval/{run_id}/chart.png", headers=h)
    assert chart.status_code == 503
    assert chart.json()["type"] == "urn:tailor:problem:chart-unavailable"


async def test_upload_then_run(eval_api: Api) -> None:
    h = bearer(await eval_api.new_tenant())
    # Incompressible padding: over the JSON body limit (64 KiB), under the upload limit.
    files = tiny_files("release/") | {"release/NOTES.bin": os.urandom(100 * 1024)}
    r = await eval_api.client.post(
        "/v1/eval/uploads", files={"file": ("pf.zip", make_zip(files))}, headers=h
    )
    assert r.status_code == 201, r.text
    upload_id = r.json()["upload_id"]
    assert "data/spedific/easy.jsonl" in r.json()["files"]
    r = await eval_api.client.post(
        "/v1/eval", json={"upload_id": upload_id, "judge": "random"}, headers=h
    )
    assert r.status_code == 202, r.text
    doc = await wait_done(eval_api, r.json()["run_id"], h)
    assert doc["status"] == "succeeded" and doc["results"]["n"] == 8
    # The upload belongs to its tenant.
    other = bearer(await eval_api.new_tenant("other"))
    r = await eval_api.client.post(
        "/v1/eval", json={"upload_id": upload_id, "judge": "random"}, headers=other
    )
    assert r.status_code == 422


async def test_upload_refusals_are_clear_4xx(eval_api: Api) -> None:
    h = bearer(await eval_api.new_tenant())

    async def send(data: bytes) -> httpx.Response:
        return await eval_api.client.post(
            "/v1/eval/uploads", files={"file": ("pf.zip", data)}, headers=h
        )

    r = await send(make_zip(tiny_files() | {"../../evil.jsonl": b"{}\n"}))
    assert r.status_code == 422 and "leaves the archive" in r.json()["detail"]
    assert r.json()["errors"][0]["field"] == "file"
    r = await send(make_zip(tiny_files() | {"data/general/hard.jsonl": b"\n" * (8 << 20)}))
    assert r.status_code == 413 and "zip bomb" in r.json()["detail"]
    files = tiny_files()
    files["data/general/easy.jsonl"] += b"not json\n"
    r = await send(make_zip(files))
    assert r.status_code == 422 and "data/general/easy.jsonl:3: not JSON" in r.json()["detail"]
    assert (await send(b"hello")).status_code == 415
    r = await send(os.urandom(300 * 1024))
    assert r.status_code == 413
    uploads = eval_api.settings.eval_uploads_dir
    assert not uploads.exists() or all(not any(d.iterdir()) for d in uploads.iterdir())


@pytest.fixture(scope="module")
def llm_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.start()
    yield server
    server.stop()


async def test_run_survives_a_restart(
    eval_settings: Settings, clean_db: Database, llm_server: FakeLLMServer
) -> None:
    """A real OpenAI-compatible server as the judge; the service stops mid-run and starts
    again on the same database: the run resumes and ends with the numbers of a fresh run."""
    llm_server.reset()
    settings = eval_settings.model_copy(
        update={"llm_base_url": llm_server.base_url, "llm_max_retries": 0}
    )
    slow = completion('{"choice": "A"}')
    slow.delay = 0.5
    llm_server.fallback = slow
    body = {"dataset": "tiny", "judge": "llm"}
    async with serving(settings, clean_db) as (api, _):
        h = bearer(await api.new_tenant())
        run_id = (await api.client.post("/v1/eval", json=body, headers=h)).json()["run_id"]
        for _ in range(200):
            if llm_server.requests:
                break
            await asyncio.sleep(0.02)
        doc = (await api.client.get(f"/v1/eval/{run_id}", headers=h)).json()
        assert doc["status"] == "running"
    # The first process stopped mid-run; the run is waiting, not lost.
    llm_server.fallback = completion('{"choice": "A"}')
    async with serving(settings, clean_db) as (api, _):
        doc = await wait_done(api, run_id, h)
        assert doc["status"] == "succeeded", doc
        assert doc["progress"]["restarts"] == 1
        resumed = doc["results"]
        # Always "A": right in one order only, so never correct and never position-consistent.
        assert resumed["n"] == 8 and resumed["accuracy"] == 0.0
        assert resumed["position_consistency"] == 0.0
        assert resumed["tokens"] == 8 * 2 * 18 and resumed["unparsed"] == 0
        again = (await api.client.post("/v1/eval", json=body, headers=h)).json()["run_id"]
        assert numbers((await wait_done(api, again, h))["results"]) == numbers(resumed)


async def test_start_up_recovers_stale_runs_and_fails_lost_data(
    eval_settings: Settings, clean_db: Database
) -> None:
    async with serving(eval_settings, clean_db) as (api, _):
        h = bearer(await api.new_tenant())
        tenant_run = (
            await api.client.post(
                "/v1/eval", json={"dataset": "tiny", "judge": "random"}, headers=h
            )
        ).json()["run_id"]
        await wait_done(api, tenant_run, h)
    engine = create_engine(clean_db.url, schema=clean_db.schema)
    factory = session_factory(engine)
    async with transaction(factory) as session:
        tenant_id = (
            await session.scalars(select(EvalRun.tenant_id).where(EvalRun.id == tenant_run))
        ).one()
        old = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
        fresh = datetime.now(UTC).isoformat()
        stale = await evalruns.create(session, tenant_id, {"dataset": "tiny", "judge": "random"})
        stale.status, stale.progress = "running", {"done": 3, "heartbeat_at": old}
        live = await evalruns.create(session, tenant_id, {"dataset": "tiny", "judge": "random"})
        live.status, live.progress = "running", {"done": 3, "heartbeat_at": fresh}
        gone = await evalruns.create(session, tenant_id, {"dataset": "deleted", "judge": "random"})
        ids = (stale.id, live.id, gone.id)
    await engine.dispose()
    failed_before = counter("tailor_eval_runs_failed_total")
    async with serving(eval_settings, clean_db) as (api, _):
        stale_doc = await wait_done(api, ids[0], h)
        assert stale_doc["status"] == "succeeded"
        assert stale_doc["progress"]["restarts"] == 1
        gone_doc = await wait_done(api, ids[2], h)
        assert gone_doc["status"] == "failed"
        assert "deleted" in gone_doc["error"]
        # A run whose heartbeat is fresh belongs to a live process: left alone.
        live_doc = (await api.client.get(f"/v1/eval/{ids[1]}", headers=h)).json()
        assert live_doc["status"] == "running" and live_doc["progress"]["done"] == 3
    assert counter("tailor_eval_runs_failed_total") == failed_before + 1


async def test_a_run_that_keeps_killing_its_server_is_failed_not_resumed(
    eval_settings: Settings, clean_db: Database
) -> None:
    """A run whose process died mid-run is resumed once; when its process dies mid-run again,
    the next start-up marks it failed instead of running it into another crash."""
    async with serving(eval_settings, clean_db) as (api, _):
        h = bearer(await api.new_tenant())
        first = (
            await api.client.post(
                "/v1/eval", json={"dataset": "tiny", "judge": "random"}, headers=h
            )
        ).json()["run_id"]
        await wait_done(api, first, h)
    engine = create_engine(clean_db.url, schema=clean_db.schema)
    factory = session_factory(engine)
    old = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    async with transaction(factory) as session:
        tenant_id = (
            await session.scalars(select(EvalRun.tenant_id).where(EvalRun.id == first))
        ).one()
        once = await evalruns.create(session, tenant_id, {"dataset": "tiny", "judge": "random"})
        once.status, once.progress = "running", {"done": 1, "heartbeat_at": old}
        twice = await evalruns.create(session, tenant_id, {"dataset": "tiny", "judge": "random"})
        twice.status = "running"
        twice.progress = {"done": 1, "heartbeat_at": old, "crashes": 1, "restarts": 1}
        ids = (once.id, twice.id)
    await engine.dispose()
    async with serving(eval_settings, clean_db) as (api, _):
        once_doc = await wait_done(api, ids[0], h)
        assert once_doc["status"] == "succeeded"
        assert once_doc["progress"]["crashes"] == 1
        twice_doc = await wait_done(api, ids[1], h)
        assert twice_doc["status"] == "failed"
        assert "stopped 2 times" in twice_doc["error"]
        assert (await api.client.get("/readyz")).status_code == 200


async def test_a_replica_without_the_worker_queues_runs_another_replica_runs(
    eval_settings: Settings, clean_db: Database
) -> None:
    """TAILOR_EVAL_WORKER=false (a serving replica): the run is accepted and stays queued;
    a replica whose worker is on takes it when it next looks for runs (TAILOR_EVAL_POLL_S),
    without being told and without a restart."""
    serving_only = eval_settings.model_copy(update={"eval_worker": False})
    runner = eval_settings.model_copy(update={"eval_poll_s": 0.2})
    body = {"dataset": "tiny", "judge": "random"}
    async with serving(serving_only, clean_db) as (front, _):
        h = bearer(await front.new_tenant())
        r = await front.client.post("/v1/eval", json=body, headers=h)
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        await asyncio.sleep(0.5)
        assert (await front.client.get(f"/v1/eval/{run_id}", headers=h)).json()["status"] == (
            "queued"
        )
        async with serving(runner, clean_db) as (back, _):
            # Queued after the runner started: only its periodic look can find this one.
            later = (await front.client.post("/v1/eval", json=body, headers=h)).json()["run_id"]
            for run in (run_id, later):
                assert (await wait_done(back, run, h))["status"] == "succeeded"
            doc = (await front.client.get(f"/v1/eval/{later}", headers=h)).json()
            assert doc["status"] == "succeeded" and doc["results"]["n"] == 8
