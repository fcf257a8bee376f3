"""Model loading and serving: the pair classifiers (behind micro-batchers) and the embedder."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from service.config import Settings
from service.inference.batcher import (
    BatcherClosed,
    MicroBatcher,
    Overloaded,
    overloaded_problem,
)
from service.inference.embedder import Embedder
from service.inference.pair_classifier import Encoded, PairClassifier

log = logging.getLogger("tailor.inference")

CLASSIFIERS = ("verifier", "relevance", "reward", "extractor")

__all__ = [
    "CLASSIFIERS",
    "BatcherClosed",
    "Embedder",
    "Encoded",
    "MicroBatcher",
    "ModelNotLoaded",
    "ModelRegistry",
    "Overloaded",
    "PairClassifier",
    "cache_dir",
    "overloaded_problem",
]


class ModelNotLoaded(LookupError):
    """The named model is not part of this deployment (its folder was missing at start-up)."""


def cache_dir(settings: Settings) -> Path:
    """Where derived graphs are cached: beside the database, since the models folder may be
    read-only (baked into an image)."""
    return settings.data_dir / "onnx-cache"


@dataclass
class ModelRegistry:
    """Everything ``load`` found, one batcher per classifier; shared by the whole process."""

    classifiers: dict[str, PairClassifier] = field(default_factory=dict)
    batchers: dict[str, MicroBatcher] = field(default_factory=dict)
    embedder: Embedder | None = None
    # What load() was asked for, so readiness can tell "not loaded" from "not wanted".
    expects_embedder: bool = False
    started: bool = False

    @classmethod
    def load(cls, settings: Settings, *, embedder: bool = True) -> ModelRegistry:
        """Load every classifier present under ``settings.models_dir`` and the embedder.

        Blocking (seconds: the first start also derives the CPU graphs); call it through
        ``asyncio.to_thread`` from the lifespan. A missing model folder is skipped with a log
        line; a folder that exists but cannot be loaded raises, since serving without a model
        the deployment ships would be a silent downgrade.
        """
        registry = cls(expects_embedder=embedder)
        for name in CLASSIFIERS:
            model_dir = settings.models_dir / name
            if not model_dir.is_dir():
                log.info("model %s: no folder at %s, not served", name, model_dir)
                continue
            classifier = PairClassifier.load(
                model_dir,
                provider=settings.onnx_provider,
                threads=settings.onnx_intra_op_threads,
                cache_dir=cache_dir(settings),
            )
            registry.classifiers[name] = classifier
            registry.batchers[name] = MicroBatcher.from_settings(classifier, name, settings)
        if embedder:
            registry.embedder = Embedder.load(
                settings.embedder_path, threads=settings.onnx_intra_op_threads
            )
        return registry

    async def start(self) -> None:
        for batcher in self.batchers.values():
            await batcher.start()
        self.started = True

    async def aclose(self) -> None:
        self.started = False
        for batcher in self.batchers.values():
            await batcher.aclose()
        if self.embedder is not None:
            self.embedder.close()

    def get(self, name: str) -> MicroBatcher:
        try:
            return self.batchers[name]
        except KeyError:
            loaded = ", ".join(sorted(self.batchers)) or "none"
            raise ModelNotLoaded(
                f"model '{name}' is not loaded (loaded: {loaded}); "
                f"its folder must exist under the models directory at start-up"
            ) from None

    def classifier(self, name: str) -> PairClassifier:
        self.get(name)  # same error for a missing model
        return self.classifiers[name]

    def has(self, name: str) -> bool:
        return name in self.batchers

    async def readiness(self) -> str | None:
        """None when everything load() was asked for is loaded and serving, else why not."""
        if self.expects_embedder and self.embedder is None:
            return "embedder not loaded"
        if not self.started:
            return "models not started"
        stopped = sorted(name for name, b in self.batchers.items() if not b.running)
        if stopped:
            return f"model batcher stopped: {', '.join(stopped)}"
        return None
