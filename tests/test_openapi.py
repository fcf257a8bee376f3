"""openapi.yaml is generated from the app; this fails when the two drift apart.
Regenerate with `make openapi`."""

from __future__ import annotations

from pathlib import Path

from openapi_spec_validator import validate

from service.app import create_app
from service.cli import render_openapi
from service.config import REPO_ROOT, Settings


def test_openapi_file_matches_app(tmp_path: Path) -> None:
    schema = create_app(Settings(data_dir=tmp_path)).openapi()
    committed = (REPO_ROOT / "openapi.yaml").read_text(encoding="utf-8")
    assert committed == render_openapi(schema), "openapi.yaml is stale: run `make openapi`"


def test_openapi_is_valid(tmp_path: Path) -> None:
    validate(create_app(Settings(data_dir=tmp_path)).openapi())  # type: ignore[arg-type]
