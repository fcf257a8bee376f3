"""All runtime configuration, read once from the environment (prefix ``TAILOR_``)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    """Every setting with its default; the README lists the same table."""

    model_config = SettingsConfigDict(env_prefix="TAILOR_", env_file=None, extra="ignore")

    # --- storage -----------------------------------------------------------------
    data_dir: Path = Field(
        default=Path(".tailor"),
        description="Directory for the embedded SQLite file and model caches.",
    )
    database_url: str | None = Field(
        default=None,
        description=(
            "SQLAlchemy async URL. Unset: an embedded SQLite file at <data_dir>/tailor.db. "
            "PostgreSQL: postgresql+asyncpg://user@host/db"
        ),
    )
    database_schema: str | None = Field(
        default=None,
        description="PostgreSQL schema to use (search_path); unset uses the server default.",
    )
    database_pool_size: int = Field(default=10, ge=1)
    auto_migrate: bool | None = Field(
        default=None,
        description="Apply migrations on `tailor serve`. Unset: only for SQLite.",
    )

    # --- HTTP ----------------------------------------------------------------------
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="Largest request body.")
    cors_origins: list[str] = Field(default_factory=list)
    idempotency_ttl_seconds: int = Field(
        default=86_400, ge=60, description="How long an Idempotency-Key answer is replayed."
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        path = (self.data_dir / "tailor.db").resolve()
        return f"sqlite+aiosqlite:///{path}"

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    def should_auto_migrate(self) -> bool:
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate


def get_settings() -> Settings:
    return Settings()
