"""Fixtures: the two tiny classifiers of tiny_models.py, built once per test session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.inference.tiny_models import TinyModel, build_bert, build_roberta


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TinyModel]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {"bert": build_bert(root), "roberta": build_roberta(root)}


@pytest.fixture(params=["bert", "roberta"])
def tiny(request: pytest.FixtureRequest, tiny_models: dict[str, TinyModel]) -> TinyModel:
    return tiny_models[request.param]


@pytest.fixture
def model_copy(tmp_path: Path, tiny: TinyModel) -> Path:
    """A private copy of the model folder, for tests that edit it or count derivations."""
    target = tmp_path / "models" / tiny.dir.name
    shutil.copytree(tiny.dir, target)
    return target
