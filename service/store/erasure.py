"""Per-user erasure and export. Erasure deletes every row about one user of one tenant, in the
caller's transaction, and nothing else."""

from __future__ import annotations

from typing import Any

from sqlalchemy import CursorResult, Delete, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models import (
    Attribute,
    AuditEntry,
    Evidence,
    IdempotencyKey,
    Job,
    User,
)


async def _count_delete(session: AsyncSession, stmt: Delete) -> int:
    result = await session.execute(stmt)
    assert isinstance(result, CursorResult)
    return int(result.rowcount)


async def erase_user(session: AsyncSession, tenant_id: str, user: User) -> dict[str, int]:
    """Children first, so the counts are exact whatever the database's cascade support."""
    counts = {
        "evidence": await _count_delete(
            session,
            delete(Evidence).where(Evidence.tenant_id == tenant_id, Evidence.user_id == user.id),
        ),
        "audit_entries": await _count_delete(
            session,
            delete(AuditEntry).where(
                AuditEntry.tenant_id == tenant_id, AuditEntry.user_id == user.id
            ),
        ),
        "attributes": await _count_delete(
            session,
            delete(Attribute).where(Attribute.tenant_id == tenant_id, Attribute.user_id == user.id),
        ),
        "jobs": await _count_delete(
            session, delete(Job).where(Job.tenant_id == tenant_id, Job.user_id == user.id)
        ),
        "idempotency_keys": await _count_delete(
            session,
            delete(IdempotencyKey).where(
                IdempotencyKey.tenant_id == tenant_id,
                IdempotencyKey.user_ref == user.external_id,
            ),
        ),
        "users": await _count_delete(
            session, delete(User).where(User.tenant_id == tenant_id, User.id == user.id)
        ),
    }
    session.expunge_all()
    return counts


async def export_user(session: AsyncSession, tenant_id: str, user: User) -> dict[str, Any]:
    attributes = (
        await session.scalars(
            select(Attribute)
            .where(Attribute.tenant_id == tenant_id, Attribute.user_id == user.id)
            .order_by(Attribute.id)
        )
    ).all()
    audit = (
        await session.scalars(
            select(AuditEntry)
            .where(AuditEntry.tenant_id == tenant_id, AuditEntry.user_id == user.id)
            .order_by(AuditEntry.id)
        )
    ).all()
    jobs = (
        await session.scalars(
            select(Job).where(Job.tenant_id == tenant_id, Job.user_id == user.id).order_by(Job.id)
        )
    ).all()
    return {"user": user, "attributes": list(attributes), "audit": list(audit), "jobs": list(jobs)}
