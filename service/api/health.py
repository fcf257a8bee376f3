"""Liveness, readiness and metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any
from weakref import WeakKeyDictionary

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.ext.asyncio import AsyncEngine

from service.api.deps import StateDep
from service.api.errors import PROBLEM_JSON, problem_body
from service.inference import SERVING_MODELS
from service.state import AppState
from service.store.db import check_writable, unavailable

router = APIRouter(tags=["operations"])
log = logging.getLogger("tailor.health")

# A write that takes longer than this counts as failed: the probe must answer within the
# orchestrator's probe timeout (5 s in k8s/base/deployment.yaml).
DATABASE_PROBE_TIMEOUT_S = 3.0


class _DatabaseProbe:
    """The database write check. A success is reused for ``ttl_s`` (one write per interval
    however often /readyz is called); a failure is not, so a database that is back is seen at
    the next call. Concurrent callers share one run."""

    def __init__(self, engine: AsyncEngine, ttl_s: float) -> None:
        self.engine = engine
        self.ttl_s = ttl_s
        self._last: tuple[float, None] | None = None  # when the last success was
        self._lock = asyncio.Lock()

    def _fresh(self) -> bool:
        return self._last is not None and time.monotonic() - self._last[0] < self.ttl_s

    async def __call__(self) -> str | None:
        if self._fresh():
            return None
        async with self._lock:
            if self._fresh():
                return None
            outcome = await self._run()
            self._last = (time.monotonic(), outcome) if outcome is None else None
            return outcome

    async def _run(self) -> str | None:
        try:
            await asyncio.wait_for(check_writable(self.engine), DATABASE_PROBE_TIMEOUT_S)
        except TimeoutError:
            return f"no write committed within {DATABASE_PROBE_TIMEOUT_S:g} s"
        except Exception as exc:
            problem = unavailable(exc)
            log.warning("readiness: the database does not take a write: %s", exc)
            if problem is not None:
                return f"cannot write: {problem.reason}"
            return f"cannot write: {type(exc).__name__}"
        return None


_probes: WeakKeyDictionary[AsyncEngine, _DatabaseProbe] = WeakKeyDictionary()


def _database_probe(state: AppState) -> _DatabaseProbe:
    probe = _probes.get(state.engine)
    if probe is None:
        probe = _probes[state.engine] = _DatabaseProbe(
            state.engine, state.settings.readiness_cache_s
        )
    return probe


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Not ready; `checks` says why."}})
async def readyz(state: StateDep) -> JSONResponse:
    """Ready for traffic: the database commits a write (a row of `health_checks`; on SQLite
    also: the database file is still the one opened), every loaded model answers a tiny real
    inference, and the models the API needs (verifier, relevance) are loaded. A passing probe
    is reused for `TAILOR_READINESS_CACHE_S` seconds; a failing one is repeated."""
    checks: dict[str, Any] = {"database": await _database_probe(state)() or "ok"}
    if state.models is not None:
        missing = state.models.missing(SERVING_MODELS)
        if missing:
            checks["models"] = (
                f"not loaded: {', '.join(missing)} (no folder in TAILOR_MODELS_DIR); "
                "the routes that need them answer 503"
            )
    for name, check in state.readiness.items():
        if name in checks:
            continue  # already failed above; its own check adds nothing
        try:
            reason = await check()
        except Exception as exc:
            reason = f"failed: {type(exc).__name__}"
        checks[name] = reason or "ok"
    if all(v == "ok" for v in checks.values()):
        return JSONResponse({"status": "ready", "checks": checks})
    problems = "; ".join(f"{name}: {reason}" for name, reason in checks.items() if reason != "ok")
    doc = problem_body(503, f"Not ready: {problems}", slug="not-ready") | {"checks": checks}
    return JSONResponse(doc, status_code=503, media_type=PROBLEM_JSON)


@router.get("/metrics", response_class=Response)
async def metrics() -> Response:
    """Prometheus exposition format."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
