"""Shared fixtures of the deployment tests: the repository root and the rendered overlays."""

from __future__ import annotations

from pathlib import Path

import pytest

from .kustomize import Obj, build

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "k8s"
OVERLAYS = ("cpu", "gpu")


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[Obj]]:
    """Every overlay of k8s/overlays, rendered by the Python kustomize renderer."""
    return {name: build(K8S_DIR / "overlays" / name) for name in OVERLAYS}
