"""Engine and session factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import ConnectionPoolEntry

from service.config import Settings


def _on_sqlite_connect(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    # The sqlite3 driver's own transaction handling issues no BEGIN before a SAVEPOINT, so a
    # released savepoint would commit on its own. Take transactions over (SQLAlchemy's
    # documented recipe) and begin them ourselves in _on_sqlite_begin.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def _on_sqlite_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock up front: concurrent transactions queue on busy_timeout
    # instead of failing with SQLITE_BUSY when a reader later tries to write.
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_engine(url: str, *, schema: str | None = None, pool_size: int = 10) -> AsyncEngine:
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine = create_async_engine(url, **kwargs)
        event.listen(engine.sync_engine, "connect", _on_sqlite_connect)
        event.listen(engine.sync_engine, "begin", _on_sqlite_begin)
        return engine
    if schema:
        kwargs["connect_args"] = {"server_settings": {"search_path": schema}}
    return create_async_engine(url, pool_size=pool_size, max_overflow=pool_size, **kwargs)


def engine_from_settings(settings: Settings) -> AsyncEngine:
    if settings.is_sqlite:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    return create_engine(
        settings.resolved_database_url,
        schema=settings.database_schema,
        pool_size=settings.database_pool_size,
    )


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@asynccontextmanager
async def transaction(factory: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """One unit of work: commits on success, rolls back on any exception."""
    async with factory() as session, session.begin():
        yield session


async def ping(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
