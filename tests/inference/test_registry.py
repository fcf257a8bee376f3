"""ModelRegistry: loads what the models folder holds, serves it, reports readiness."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from service.config import REPO_ROOT, Settings
from service.inference import ModelLoadError, ModelNotLoaded, ModelRegistry, cache_dir
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


def _with_shipped_embedder(tmp_path: Path) -> Path:
    """A models folder holding only the shipped embedder (linked, not copied)."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "embedder").symlink_to(REPO_ROOT / "models" / "embedder")
    return models


async def test_loads_the_embedder_by_default(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, models_dir=_with_shipped_embedder(tmp_path), onnx_intra_op_threads=1
    )
    assert settings.embedder_dir == settings.models_dir / "embedder"
    registry = ModelRegistry.load(settings)
    assert registry.embedder is not None and registry.embedder.dim == 384
    assert registry.embedder.card.cpu_precision == "fp32"
    assert [p.name.split("-")[0] for p in cache_dir(settings).glob("*.fp32.onnx")] == ["embedder"]
    assert await registry.readiness() == "models not started"
    await registry.start()
    try:
        assert registry.embedder.running  # aencode goes through its micro-batcher
        assert await registry.readiness() is None
        assert (await registry.embedder.aencode(["hello"])).shape == (1, 384)
        await registry.embedder.aclose()
        assert await registry.readiness() == "model batcher stopped: embedder"
    finally:
        await registry.aclose()


async def test_a_missing_shipped_embedder_is_not_ready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path, models_dir=tmp_path / "none", onnx_intra_op_threads=1)
    with caplog.at_level(logging.WARNING, logger="tailor.inference"):
        registry = ModelRegistry.load(settings)
    assert registry.embedder is None
    assert "export-embedder" in caplog.text
    await registry.start()
    assert await registry.readiness() == "embedder not loaded"
    await registry.aclose()


def test_an_embedder_path_that_is_not_a_folder_fails_loudly(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        models_dir=_with_shipped_embedder(tmp_path),
        embedder_path=tmp_path / "elsewhere",
        onnx_intra_op_threads=1,
    )
    with pytest.raises(ModelLoadError, match=r"TAILOR_EMBEDDER_PATH=.*elsewhere is not a folder"):
        ModelRegistry.load(settings)


def test_a_corrupt_embedder_graph_fails_with_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "my-embedder"
    shutil.copytree(REPO_ROOT / "models" / "embedder", folder)
    graph = folder / "model.fp16.onnx"
    graph.write_bytes(graph.read_bytes()[:100_000])
    settings = Settings(
        data_dir=tmp_path,
        models_dir=tmp_path / "none",
        embedder_path=folder,
        onnx_intra_op_threads=1,
    )
    with pytest.raises(ModelLoadError) as caught:
        ModelRegistry.load(settings)
    assert str(caught.value).startswith(
        f"model 'embedder' cannot be loaded from {folder}: {graph} is truncated or corrupt"
    ), caught.value
