"""Liveness, readiness and metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.deps import StateDep
from service.api.errors import PROBLEM_JSON, problem_body
from service.store.db import ping

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up and serving."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Not ready; `checks` says why."}})
async def readyz(state: StateDep) -> JSONResponse:
    """Ready for traffic: the database answers and every model is loaded."""
    checks: dict[str, Any] = {}
    try:
        await ping(state.engine)
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    for name, check in state.readiness.items():
        try:
            reason = await check()
        except Exception as exc:
            reason = f"failed: {type(exc).__name__}"
        checks[name] = reason or "ok"
    if all(v == "ok" for v in checks.values()):
        return JSONResponse({"status": "ready", "checks": checks})
    doc = problem_body(503, "Not ready.", slug="not-ready") | {"checks": checks}
    return JSONResponse(doc, status_code=503, media_type=PROBLEM_JSON)


@router.get("/metrics", response_class=Response)
async def metrics() -> Response:
    """Prometheus exposition format."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
