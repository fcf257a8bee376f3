"""Users are identified by the caller's own id (``external_id``), unique within a tenant."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models import User


async def get_user(session: AsyncSession, tenant_id: str, external_id: str) -> User | None:
    stmt = select(User).where(User.tenant_id == tenant_id, User.external_id == external_id)
    return (await session.scalars(stmt)).one_or_none()


async def get_or_create_user(session: AsyncSession, tenant_id: str, external_id: str) -> User:
    user = await get_user(session, tenant_id, external_id)
    if user is not None:
        return user
    try:
        async with session.begin_nested():
            user = User(tenant_id=tenant_id, external_id=external_id)
            session.add(user)
    except IntegrityError:
        # A concurrent request created the same user first.
        user = await get_user(session, tenant_id, external_id)
        if user is None:
            raise
    return user


async def get_user_by_id(session: AsyncSession, tenant_id: str, user_id: str) -> User | None:
    """By the internal id (jobs hold it), still scoped by tenant."""
    stmt = select(User).where(User.tenant_id == tenant_id, User.id == user_id)
    return (await session.scalars(stmt)).one_or_none()
