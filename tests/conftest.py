"""Shared fixtures. Storage and API tests run once per database backend: an embedded SQLite
file and the PostgreSQL server on 127.0.0.1:5432 (skipped only when none answers). Each test
run gets its own PostgreSQL schema, so concurrent runs cannot collide."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.app import create_app
from service.config import Settings
from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from service.store.migrate import upgrade
from service.store.models import Base

POSTGRES_URL = os.environ.get(
    "TAILOR_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


@dataclass(frozen=True)
class Database:
    backend: str
    url: str
    schema: str | None

    def settings(self, data_dir: Path, **overrides: object) -> Settings:
        return Settings(
            data_dir=data_dir,
            database_url=self.url,
            database_schema=self.schema,
            **overrides,  # type: ignore[arg-type]
        )


async def _postgres_answers() -> bool:
    engine = create_engine(POSTGRES_URL)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return True
    except Exception:
        return False
    finally:
        await engine.dispose()


async def _drop_schema(schema: str) -> None:
    engine = create_engine(POSTGRES_URL)
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    await engine.dispose()


def new_pg_schema() -> str:
    return f"tailor_test_{os.getpid()}_{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def postgres_available() -> bool:
    return asyncio.run(_postgres_answers())


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def database(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_available: bool,
) -> Iterator[Database]:
    """A migrated database per backend, shared by the session's tests (emptied per test)."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("sqlite") / "tailor.db"
        db = Database("sqlite", f"sqlite+aiosqlite:///{path}", None)
        upgrade(db.url)
        yield db
        return
    if not postgres_available:
        pytest.skip(f"no PostgreSQL answers at {POSTGRES_URL}")
    schema = new_pg_schema()
    db = Database("postgres", POSTGRES_URL, schema)
    upgrade(db.url, schema=schema)
    try:
        yield db
    finally:
        asyncio.run(_drop_schema(schema))


async def _empty_all_tables(db: Database) -> None:
    engine = create_engine(db.url, schema=db.schema)
    async with engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            await conn.execute(table.delete())
    await engine.dispose()


@pytest.fixture
async def clean_db(database: Database) -> AsyncIterator[Database]:
    await _empty_all_tables(database)
    yield database


@pytest.fixture
async def session(clean_db: Database) -> AsyncIterator[AsyncSession]:
    engine = create_engine(clean_db.url, schema=clean_db.schema)
    factory = session_factory(engine)
    async with factory() as s:
        yield s
    await engine.dispose()


@dataclass
class Api:
    """An app on a real database, reached through httpx over ASGI."""

    client: httpx.AsyncClient
    db: Database
    settings: Settings
    app: FastAPI | None = None

    async def new_tenant(self, name: str = "tenant") -> str:
        engine = create_engine(self.db.url, schema=self.db.schema)
        async with transaction(session_factory(engine)) as s:
            issued = await tenants.create_tenant(s, name)
        await engine.dispose()
        return issued.key


@pytest.fixture
async def api(clean_db: Database, tmp_path: Path) -> AsyncIterator[Api]:
    # No job worker: API tests inspect jobs as they were written; tests/jobs runs workers.
    settings = clean_db.settings(
        tmp_path,
        max_body_bytes=64 * 1024,
        load_models=False,
        load_llm=False,
        jobs_worker=False,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://tailor.test") as client:
            yield Api(client, clean_db, settings, app)


@pytest.fixture(scope="session")
def shared_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data dir for the tests that load the shipped models, so the int8 CPU graphs are
    derived once per test run rather than once per test."""
    return tmp_path_factory.mktemp("shared-data")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# Loading the shipped models, the embedded LLM or a real server takes seconds per module.
# Tests that do are marked `models` (besides `slow`), so `make test-fast` can leave them out.
_MODEL_FIXTURES = {"model_api", "shared_data_dir", "eval_api"}
_MODEL_MODULES = (
    "tests/training/",
    "tests/llm/test_embedded.py",
    "tests/evaluation/test_commands.py",
    "tests/inference/test_embedder.py",
    "tests/inference/test_registry.py",
    "tests/inference/test_derive.py",
    "tests/inference/test_pair_classifier.py",
    "tests/test_cli.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.as_posix()
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & _MODEL_FIXTURES or any(m in path for m in _MODEL_MODULES):
            item.add_marker(pytest.mark.models)
