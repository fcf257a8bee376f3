"""Stored first answers for ``Idempotency-Key``.

A key's row is written together with the answer, in the transaction that does the request's
write (``record``), so both are durable or neither is: a retry after any crash either replays
the stored answer or performs the one write. The unique (tenant, key) index settles a race
between duplicates: the later transaction fails to insert (``KeyTaken``), rolls back its write
and replays the first one's answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models import IdempotencyKey, utcnow


@dataclass(frozen=True)
class KeyUse:
    """One request made with an ``Idempotency-Key``."""

    tenant_id: str
    key: str
    method: str
    path: str
    request_hash: str
    user_ref: str | None
    ttl: timedelta


@dataclass(frozen=True)
class Stored:
    """The answer stored for a key, and whether it was stored for this same request."""

    same_request: bool
    status_code: int
    body: bytes
    content_type: str | None


class KeyTaken(Exception):
    """Another request with this key committed its answer first."""


async def lookup(session: AsyncSession, use: KeyUse) -> Stored | None:
    """The unexpired answer stored for ``use``'s key, if any."""
    stmt = select(IdempotencyKey).where(
        IdempotencyKey.tenant_id == use.tenant_id, IdempotencyKey.key == use.key
    )
    row = (await session.scalars(stmt)).one_or_none()
    # status_code NULL: a claim row written by an earlier version, never completed.
    if row is None or row.status_code is None or utcnow() - row.created_at > use.ttl:
        return None
    same = (row.method, row.path, row.request_hash) == (use.method, use.path, use.request_hash)
    return Stored(same, row.status_code, row.response_body or b"", row.content_type)


async def record(
    session: AsyncSession, use: KeyUse, *, status_code: int, body: bytes, content_type: str | None
) -> None:
    """Store the answer in the caller's transaction; ``KeyTaken`` if another request with the
    key got there first (the caller's transaction must then roll back)."""
    await session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.tenant_id == use.tenant_id,
            IdempotencyKey.key == use.key,
            (IdempotencyKey.created_at < utcnow() - use.ttl) | IdempotencyKey.status_code.is_(None),
        )
    )
    try:
        async with session.begin_nested():
            session.add(
                IdempotencyKey(
                    tenant_id=use.tenant_id,
                    key=use.key,
                    method=use.method,
                    path=use.path,
                    request_hash=use.request_hash,
                    user_ref=use.user_ref,
                    status_code=status_code,
                    response_body=body,
                    content_type=content_type,
                )
            )
    except IntegrityError:
        raise KeyTaken(use.key) from None
