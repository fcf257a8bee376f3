"""ModelRegistry: loads what the models folder holds, serves it, reports readiness."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from service.config import Settings
from service.inference import ModelNotLoaded, ModelRegistry, cache_dir
from tests.inference.tiny_models import TinyModel, mixed_pairs


@pytest.fixture
def settings(tmp_path: Path, tiny_models: dict[str, TinyModel]) -> Settings:
    models = tmp_path / "models"
    models.mkdir()
    # The real names, filled with the tiny models; no reward folder.
    shutil.copytree(tiny_models["bert"].dir, models / "verifier")
    shutil.copytree(tiny_models["roberta"].dir, models / "relevance")
    return Settings(
        data_dir=tmp_path / "data",
        models_dir=models,
        onnx_intra_op_threads=1,
        batch_max_wait_ms=1,
    )


async def test_loads_present_models_and_skips_missing(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="tailor.inference"):
        registry = ModelRegistry.load(settings, embedder=False)
    assert sorted(registry.batchers) == ["relevance", "verifier"]
    assert "reward" in caplog.text
    assert registry.has("verifier") and not registry.has("reward")
    assert sorted(p.name.split("-")[0] for p in cache_dir(settings).glob("*.int8.onnx")) == [
        "relevance",
        "verifier",
    ]

    assert await registry.readiness() == "models not started"
    await registry.start()
    try:
        assert await registry.readiness() is None
        pairs = mixed_pairs(6, seed=21)
        for name in ("verifier", "relevance"):
            scores = await registry.get(name).submit(pairs)
            assert scores.shape == (6,)
            assert np.all((scores >= 0) & (scores <= 1))
        assert registry.classifier("relevance").task == "relevance"
        with pytest.raises(ModelNotLoaded, match="'reward' is not loaded"):
            registry.get("reward")
        with pytest.raises(ModelNotLoaded):
            registry.classifier("reward")
    finally:
        await registry.aclose()
    assert await registry.readiness() is not None


async def test_readiness_notices_a_stopped_batcher(settings: Settings) -> None:
    registry = ModelRegistry.load(settings, embedder=False)
    await registry.start()
    try:
        await registry.get("verifier").aclose()
        assert await registry.readiness() == "model batcher stopped: verifier"
    finally:
        await registry.aclose()


async def test_readiness_requires_the_embedder_when_asked_for(settings: Settings) -> None:
    registry = ModelRegistry(expects_embedder=True)
    await registry.start()
    assert await registry.readiness() == "embedder not loaded"


def test_a_broken_model_folder_fails_loudly(settings: Settings) -> None:
    (settings.models_dir / "verifier" / "tailor.json").unlink()
    with pytest.raises(FileNotFoundError):
        ModelRegistry.load(settings, embedder=False)


async def test_empty_models_folder_is_ready_with_nothing(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, models_dir=tmp_path / "none", onnx_intra_op_threads=1)
    registry = ModelRegistry.load(settings, embedder=False)
    await registry.start()
    assert registry.batchers == {}
    assert await registry.readiness() is None
    with pytest.raises(ModelNotLoaded, match="loaded: none"):
        registry.get("verifier")
    await registry.aclose()


async def test_loads_the_embedder_by_default(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, models_dir=tmp_path / "none", onnx_intra_op_threads=1)
    registry = ModelRegistry.load(settings)
    assert registry.embedder is not None and registry.embedder.dim == 384
    await registry.start()
    try:
        assert await registry.readiness() is None
        assert (await registry.embedder.aencode(["hello"])).shape == (1, 384)
    finally:
        await registry.aclose()
