"""Evaluation runs (table eval_runs). Reads and writes are scoped by tenant; the one query
that is not (``unfinished``) serves the start-up recovery, which must see every tenant's runs
left behind by a dead process."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models import EvalRun, utcnow

UNFINISHED = ("queued", "running")


async def create(session: AsyncSession, tenant_id: str, params: dict[str, Any]) -> EvalRun:
    run = EvalRun(tenant_id=tenant_id, status="queued", params=params, progress=None)
    session.add(run)
    await session.flush()
    return run


async def get(session: AsyncSession, tenant_id: str, run_id: str) -> EvalRun | None:
    stmt = select(EvalRun).where(EvalRun.tenant_id == tenant_id, EvalRun.id == run_id)
    return (await session.scalars(stmt)).one_or_none()


async def list_runs(
    session: AsyncSession,
    tenant_id: str,
    *,
    statuses: Sequence[str] | None = None,
    before_id: str | None = None,
    limit: int = 50,
) -> list[EvalRun]:
    """The tenant's runs, newest first: ids are time-ordered, so a page continues below the
    last id of the one before."""
    stmt = select(EvalRun).where(EvalRun.tenant_id == tenant_id)
    if statuses:
        stmt = stmt.where(EvalRun.status.in_(statuses))
    if before_id is not None:
        stmt = stmt.where(EvalRun.id < before_id)
    stmt = stmt.order_by(EvalRun.id.desc()).limit(limit)
    return list((await session.scalars(stmt)).all())


async def unfinished(session: AsyncSession) -> list[EvalRun]:
    """Every tenant's queued or running runs, oldest first (start-up recovery only)."""
    stmt = select(EvalRun).where(EvalRun.status.in_(UNFINISHED)).order_by(EvalRun.created_at)
    return list((await session.scalars(stmt)).all())


async def mark_running(
    session: AsyncSession, tenant_id: str, run_id: str, progress: dict[str, Any]
) -> bool:
    """Claim a queued run; False when another process claimed it first."""
    result = await session.execute(
        update(EvalRun)
        .where(EvalRun.tenant_id == tenant_id, EvalRun.id == run_id, EvalRun.status == "queued")
        .values(status="running", started_at=utcnow(), progress=progress, error=None)
    )
    return bool(getattr(result, "rowcount", 0))


async def set_progress(
    session: AsyncSession, tenant_id: str, run_id: str, progress: dict[str, Any]
) -> None:
    await session.execute(
        update(EvalRun)
        .where(EvalRun.tenant_id == tenant_id, EvalRun.id == run_id)
        .values(progress=progress)
    )


async def requeue(
    session: AsyncSession, tenant_id: str, run_id: str, progress: dict[str, Any]
) -> None:
    await session.execute(
        update(EvalRun)
        .where(EvalRun.tenant_id == tenant_id, EvalRun.id == run_id)
        .values(status="queued", progress=progress)
    )


async def finish(
    session: AsyncSession,
    tenant_id: str,
    run_id: str,
    *,
    status: str,
    progress: dict[str, Any] | None,
    results: dict[str, Any] | None = None,
    error: str | None = None,
    at: datetime | None = None,
) -> None:
    values: dict[str, Any] = {
        "status": status,
        "results": results,
        "error": error,
        "finished_at": at or utcnow(),
    }
    if progress is not None:
        values["progress"] = progress
    await session.execute(
        update(EvalRun).where(EvalRun.tenant_id == tenant_id, EvalRun.id == run_id).values(**values)
    )
