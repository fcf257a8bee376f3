"""Migrations run from empty to head and back down on both databases, and head matches the
models exactly (no autogenerate diff)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from service.store.db import create_engine
from service.store.migrate import downgrade, upgrade
from service.store.models import Base
from tests.conftest import POSTGRES_URL, _drop_schema, new_pg_schema


def _tables_and_diff(url: str, schema: str | None) -> tuple[set[str], list[object]]:
    async def run() -> tuple[set[str], list[object]]:
        engine = create_engine(url, schema=schema)

        def inspect_sync(conn: Connection) -> tuple[set[str], list[object]]:
            names = set(inspect(conn).get_table_names(schema=schema))
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return names, list(compare_metadata(ctx, Base.metadata))

        async with engine.connect() as conn:
            result = await conn.run_sync(inspect_sync)
        await engine.dispose()
        return result

    return asyncio.run(run())


def _round_trip(url: str, schema: str | None) -> None:
    model_tables = {t.name for t in Base.metadata.sorted_tables}
    upgrade(url, schema=schema)
    tables, diff = _tables_and_diff(url, schema)
    assert model_tables <= tables
    assert diff == []
    downgrade(url, "base", schema=schema)
    tables, _ = _tables_and_diff(url, schema)
    assert tables <= {"alembic_version"}
    upgrade(url, schema=schema)
    tables, _ = _tables_and_diff(url, schema)
    assert model_tables <= tables


def test_sqlite_round_trip(tmp_path: Path) -> None:
    _round_trip(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}", None)


def test_postgres_round_trip(postgres_available: bool) -> None:
    if not postgres_available:
        pytest.skip("no PostgreSQL server answers")
    schema = new_pg_schema()
    try:
        _round_trip(POSTGRES_URL, schema)
    finally:
        asyncio.run(_drop_schema(schema))
