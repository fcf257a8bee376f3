"""Stored first answers for ``Idempotency-Key``. A row is claimed (status_code NULL) before the
handler runs, so a concurrent duplicate sees it and gets 409 instead of doing the work twice."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models import IdempotencyKey, utcnow

# A claim whose handler never finished (process killed) is taken over after this long.
STALE_CLAIM = timedelta(seconds=60)


@dataclass(frozen=True)
class Claim:
    """Outcome of trying to claim a key."""

    state: str  # "claimed" | "replay" | "mismatch" | "in_progress"
    status_code: int | None = None
    body: bytes | None = None
    content_type: str | None = None


async def claim(
    session: AsyncSession,
    *,
    tenant_id: str,
    key: str,
    method: str,
    path: str,
    request_hash: str,
    user_ref: str | None,
    ttl: timedelta,
) -> Claim:
    now = utcnow()
    stmt = select(IdempotencyKey).where(
        IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key
    )
    row = (await session.scalars(stmt)).one_or_none()
    if row is not None:
        age = now - row.created_at  # UTCDateTime: always aware, on every backend
        expired = age > ttl
        stale = row.status_code is None and age > STALE_CLAIM
        if not (expired or stale):
            if row.request_hash != request_hash or row.method != method or row.path != path:
                return Claim("mismatch")
            if row.status_code is None:
                return Claim("in_progress")
            return Claim("replay", row.status_code, row.response_body, row.content_type)
        await session.delete(row)
        await session.flush()
    try:
        async with session.begin_nested():
            session.add(
                IdempotencyKey(
                    tenant_id=tenant_id,
                    key=key,
                    method=method,
                    path=path,
                    request_hash=request_hash,
                    user_ref=user_ref,
                )
            )
    except IntegrityError:
        return Claim("in_progress")
    return Claim("claimed")


async def complete(
    session: AsyncSession,
    *,
    tenant_id: str,
    key: str,
    status_code: int,
    body: bytes,
    content_type: str | None,
) -> None:
    stmt = select(IdempotencyKey).where(
        IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key
    )
    row = (await session.scalars(stmt)).one_or_none()
    if row is not None:
        row.status_code = status_code
        row.response_body = body
        row.content_type = content_type


async def release(session: AsyncSession, *, tenant_id: str, key: str) -> None:
    """Forget a claim whose request failed, so the client may retry with the same key."""
    await session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key
        )
    )
