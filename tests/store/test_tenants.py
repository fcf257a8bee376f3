"""API keys: only a hash is stored, revocation works, malformed keys never match."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.store import tenants
from service.store.models import ApiKey


async def test_key_is_stored_hashed(session: AsyncSession) -> None:
    async with session.begin():
        issued = await tenants.create_tenant(session, "acme")
    async with session.begin():
        row = (await session.scalars(select(ApiKey))).one()
        secret = issued.key.split("_", 2)[2]
        assert secret not in row.secret_hash
        assert issued.key not in repr(row.__dict__)
        assert await tenants.authenticate(session, issued.key) == issued.tenant_id


async def test_revoke_and_malformed(session: AsyncSession) -> None:
    async with session.begin():
        issued = await tenants.create_tenant(session, "acme")
        other = await tenants.issue_key(session, issued.tenant_id)
        assert await tenants.revoke_key(session, issued.key_id)
        assert not await tenants.revoke_key(session, "0" * 16)
    async with session.begin():
        assert await tenants.authenticate(session, issued.key) is None
        assert await tenants.authenticate(session, other.key) == issued.tenant_id
        for bad in ["", "tlr_", "tlr_zz_" + "a" * 30, other.key + "x", other.key.upper()]:
            assert await tenants.authenticate(session, bad) is None
