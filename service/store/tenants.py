"""Tenants and their API keys. A key is ``tlr_<key id>_<secret>``; only SHA-256(secret) is kept."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models import ApiKey, Tenant, utcnow

KEY_PATTERN = re.compile(r"^tlr_(?P<key_id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_-]{20,100})$")


@dataclass(frozen=True)
class IssuedKey:
    tenant_id: str
    key_id: str
    key: str


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def create_tenant(session: AsyncSession, name: str) -> IssuedKey:
    tenant = Tenant(name=name)
    session.add(tenant)
    await session.flush()
    return await issue_key(session, tenant.id)


async def issue_key(session: AsyncSession, tenant_id: str) -> IssuedKey:
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    session.add(ApiKey(id=key_id, tenant_id=tenant_id, secret_hash=_hash_secret(secret)))
    await session.flush()
    return IssuedKey(tenant_id=tenant_id, key_id=key_id, key=f"tlr_{key_id}_{secret}")


async def authenticate(session: AsyncSession, key: str) -> str | None:
    """The tenant id for a valid, unrevoked key; None otherwise."""
    match = KEY_PATTERN.match(key)
    if match is None:
        return None
    row = await session.get(ApiKey, match["key_id"])
    if row is None or row.revoked_at is not None:
        return None
    if not hmac.compare_digest(row.secret_hash, _hash_secret(match["secret"])):
        return None
    return row.tenant_id


async def revoke_key(session: AsyncSession, key_id: str) -> bool:
    row = await session.get(ApiKey, key_id)
    if row is None:
        return False
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return True


async def list_tenants(session: AsyncSession) -> list[Tenant]:
    return list((await session.scalars(select(Tenant).order_by(Tenant.id))).all())
