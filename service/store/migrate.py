"""Run Alembic migrations programmatically (``tailor migrate``, ``tailor serve`` on SQLite)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text

from service.config import REPO_ROOT, Settings
from service.store.db import create_engine


def migrations_dir() -> Path:
    override = os.environ.get("TAILOR_MIGRATIONS_DIR")
    return Path(override) if override else REPO_ROOT / "migrations"


def alembic_config(url: str, schema: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["schema"] = schema
    return cfg


async def _ensure_schema(url: str, schema: str) -> None:
    engine = create_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    await engine.dispose()


def _in_thread(fn: object) -> None:
    """Alembic's env.py calls asyncio.run, which cannot nest in a running loop: run it in a
    thread of its own so this works from sync and async callers alike."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def upgrade(url: str, revision: str = "head", schema: str | None = None) -> None:
    def run() -> None:
        if schema and not url.startswith("sqlite"):
            asyncio.run(_ensure_schema(url, schema))
        command.upgrade(alembic_config(url, schema), revision)

    _in_thread(run)


def downgrade(url: str, revision: str = "base", schema: str | None = None) -> None:
    _in_thread(lambda: command.downgrade(alembic_config(url, schema), revision))


def upgrade_from_settings(settings: Settings, revision: str = "head") -> None:
    if settings.is_sqlite:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url, revision, settings.database_schema)
