"""Model loading and serving: the pair classifiers (behind micro-batchers) and the embedder."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from service.config import Settings
from service.inference import derive
from service.inference.batcher import (
    BatcherClosed,
    MicroBatcher,
    Overloaded,
)
from service.inference.embedder import Embedder
from service.inference.pair_classifier import (
    CARD_FILE,
    TOKENIZER_FILE,
    Encoded,
    Pair,
    PairClassifier,
)
from service.inference.relevance_adapter import AdapterMismatch, RelevanceAdapter
from service.startup import StartupError

log = logging.getLogger("tailor.inference")

CLASSIFIERS = ("verifier", "relevance", "reward", "extractor")
# The models the request paths cannot do without: /v1/select and /v1/turns need relevance,
# /v1/extract and the per-turn extraction jobs the verifier. The others are optional (the
# extractor falls back to rules; reward only judges evaluations). /readyz requires these.
SERVING_MODELS = ("verifier", "relevance")
# What the readiness probe scores, and how long a model may take to answer it.
PROBE_PAIR = ("I like tea.", "The user likes tea.")
PROBE_TIMEOUT_S = 3.0

__all__ = [
    "CLASSIFIERS",
    "SERVING_MODELS",
    "BatcherClosed",
    "Embedder",
    "Encoded",
    "MicroBatcher",
    "ModelLoadError",
    "ModelNotLoaded",
    "ModelRegistry",
    "Overloaded",
    "PairClassifier",
    "cache_dir",
]


class ModelNotLoaded(LookupError):
    """The named model is not part of this deployment (its folder was missing at start-up)."""


class ModelLoadError(StartupError):
    """A model folder (the embedder's too) that exists but cannot be loaded: the service does not
    start, with one line naming the file and the fix."""


class ModelFileMissing(ModelLoadError, FileNotFoundError):
    """A file a model folder must hold is not there."""


_FIX = (
    "restore the folder from the release (or delete it to run without this model), "
    "or point TAILOR_MODELS_DIR at a complete copy"
)


def _check_files(name: str, model_dir: Path) -> None:
    for needed in (CARD_FILE, TOKENIZER_FILE):
        if not (model_dir / needed).is_file():
            raise ModelFileMissing(
                f"model '{name}' cannot be loaded: {model_dir / needed} is missing; {_FIX}"
            )
    try:
        derive.source_graph(model_dir)
    except FileNotFoundError:
        raise ModelFileMissing(
            f"model '{name}' cannot be loaded: {model_dir} holds neither "
            f"{derive.FP32_GRAPH} nor {derive.FP16_GRAPH}; {_FIX}"
        ) from None


def _load_error(name: str, model_dir: Path, exc: Exception) -> ModelLoadError:
    message = " ".join(str(exc).split())[:200]
    if type(exc).__module__.startswith(("google.protobuf", "onnx")) or "protobuf" in message:
        graph = derive.source_graph(model_dir)
        problem = f"{graph} is truncated or corrupt ({type(exc).__name__}: {message})"
    else:
        problem = f"{type(exc).__name__}: {message}"
    return ModelLoadError(f"model '{name}' cannot be loaded from {model_dir}: {problem}; {_FIX}")


def _load_embedder(settings: Settings) -> Embedder | None:
    """The embedder folder of the settings, loaded like a classifier's. The shipped folder
    missing is skipped with a warning, as a classifier's is (/readyz then says the embedder is
    not loaded, and selection and extraction answer 503); a TAILOR_EMBEDDER_PATH that names no
    folder, or a folder that cannot be loaded, stops the start-up with one line."""
    path = settings.embedder_dir
    if not path.is_dir():
        if settings.embedder_path is None:
            log.warning(
                "embedder: no folder at %s, not served (selection and extraction answer 503); "
                "`tailor export-embedder --out %s` writes it",
                path,
                path,
            )
            return None
        raise ModelFileMissing(
            f"the embedder cannot be loaded: TAILOR_EMBEDDER_PATH={path} is not a folder; "
            "point it at a folder written by `tailor export-embedder`, or unset it to use the "
            "shipped models/embedder"
        )
    _check_files("embedder", path)
    try:
        return Embedder.load(
            path,
            threads=settings.onnx_intra_op_threads,
            provider=settings.onnx_provider,
            cache_dir=cache_dir(settings),
        )
    except Exception as exc:
        raise _load_error("embedder", path, exc) from exc


def cache_dir(settings: Settings) -> Path:
    """Where derived graphs are cached: beside the database, since the models folder may be
    read-only (baked into an image)."""
    return settings.data_dir / "onnx-cache"


@dataclass
class ModelRegistry:
    """Everything ``load`` found, one batcher per classifier; shared by the whole process."""

    classifiers: dict[str, PairClassifier] = field(default_factory=dict)
    batchers: dict[str, MicroBatcher[Pair]] = field(default_factory=dict)
    # Behind its own micro-batcher (Embedder.start), not in ``batchers``: its items are texts.
    embedder: Embedder | None = None
    # The relevance model's adapter (its tailor.json names one), used by selection.
    relevance_adapter: RelevanceAdapter | None = None
    # What load() was asked for, so readiness can tell "not loaded" from "not wanted".
    expects_embedder: bool = False
    started: bool = False
    # How long readiness reuses its last probe (a tiny real inference per model).
    probe_ttl_s: float = 5.0
    _probe: float | None = field(default=None, repr=False)  # when the last probe passed
    _settings: Settings | None = field(default=None, repr=False)  # the embedder's batch settings
    _probe_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @classmethod
    def load(cls, settings: Settings, *, embedder: bool = True) -> ModelRegistry:
        """Load every classifier present under ``settings.models_dir`` and the embedder.

        Blocking (seconds: the first start also derives the CPU graphs); call it through
        ``asyncio.to_thread`` from the lifespan. A missing model folder is skipped with a log
        line (``/readyz`` then names the missing models the API needs); a folder that exists
        but cannot be loaded (a file missing, truncated or corrupt) raises ``ModelLoadError``,
        one line naming the file and the fix, since serving without a model the deployment
        ships would be a silent downgrade.
        """
        # numpy's BLAS (OpenBLAS) would run the request path's small products (the relevance
        # adapter's maps, the prefilter's cosines) on threads that keep spinning afterwards and
        # take the cores ONNX Runtime needs next: with two threads the selector's model work
        # doubled (p50 40 -> 88 ms, 90 facts, 2 cores). One thread does them in microseconds.
        threadpool_limits(limits=1, user_api="blas")
        registry = cls(
            expects_embedder=embedder, probe_ttl_s=settings.readiness_cache_s, _settings=settings
        )
        for name in CLASSIFIERS:
            model_dir = settings.models_dir / name
            if not model_dir.is_dir():
                level = logging.WARNING if name in SERVING_MODELS else logging.INFO
                log.log(level, "model %s: no folder at %s, not served", name, model_dir)
                continue
            _check_files(name, model_dir)
            try:
                classifier = PairClassifier.load(
                    model_dir,
                    provider=settings.onnx_provider,
                    threads=settings.onnx_intra_op_threads,
                    cache_dir=cache_dir(settings),
                )
            except Exception as exc:
                raise _load_error(name, model_dir, exc) from exc
            if name == "relevance":
                try:
                    registry.relevance_adapter = RelevanceAdapter.load(model_dir)
                except Exception as exc:
                    raise _load_error(name, model_dir, exc) from exc
            registry.classifiers[name] = classifier
            registry.batchers[name] = MicroBatcher.from_settings(classifier, name, settings)
        if embedder:
            registry.embedder = _load_embedder(settings)
        adapter = registry.relevance_adapter
        if adapter is not None and registry.embedder is not None:
            try:
                adapter.check_embedder(registry.embedder.card.base_model, registry.embedder.dim)
            except AdapterMismatch as exc:
                raise ModelLoadError(f"model 'relevance': {exc}") from exc
        return registry

    async def start(self) -> None:
        for batcher in self.batchers.values():
            await batcher.start()
        if self.embedder is not None:
            await self.embedder.start(self._settings)
        self.started = True

    async def aclose(self) -> None:
        self.started = False
        for batcher in self.batchers.values():
            await batcher.aclose()
        if self.embedder is not None:
            await self.embedder.aclose()

    def get(self, name: str) -> MicroBatcher[Pair]:
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

    def missing(self, names: tuple[str, ...] = SERVING_MODELS) -> list[str]:
        """Which of ``names`` are not loaded."""
        return [name for name in names if name not in self.batchers]

    async def readiness(self) -> str | None:
        """None when everything load() was asked for is loaded and answers, else why not.

        Each model (and the embedder) must answer a tiny real inference: a model that is
        loaded but cannot run (a broken graph, a dead batcher thread, a hung run) is not
        ready. A passing probe is reused for ``probe_ttl_s``, so frequent probes cost one pair
        per model every few seconds; a failing one is repeated at the next call."""
        if self.expects_embedder and self.embedder is None:
            return "embedder not loaded"
        if not self.started:
            return "models not started"
        stopped = sorted(name for name, b in self.batchers.items() if not b.running)
        if self.embedder is not None and not self.embedder.running:
            stopped.append("embedder")
        if stopped:
            return f"model batcher stopped: {', '.join(stopped)}"
        return await self._probed()

    def _passed_lately(self) -> bool:
        return self._probe is not None and time.monotonic() - self._probe < self.probe_ttl_s

    async def _probed(self) -> str | None:
        if self._passed_lately():
            return None
        async with self._probe_lock:  # concurrent probes share one run
            if self._passed_lately():
                return None
            checks = [self._probe_model(name) for name in sorted(self.batchers)]
            if self.embedder is not None:
                checks.append(self._probe_embedder(self.embedder))
            problems = [p for p in await asyncio.gather(*checks) if p]
            self._probe = None if problems else time.monotonic()
            return "; ".join(problems) or None

    async def _probe_model(self, name: str) -> str | None:
        try:
            scores = await asyncio.wait_for(
                self.batchers[name].submit([PROBE_PAIR]), PROBE_TIMEOUT_S
            )
        except Overloaded:
            return None  # its queue is full of real work: it is answering, just busy
        except TimeoutError:
            return f"{name}: no answer within {PROBE_TIMEOUT_S:g} s"
        except Exception as exc:
            log.warning("model %s: readiness probe failed", name, exc_info=True)
            return f"{name}: inference failed ({type(exc).__name__})"
        values = np.asarray(scores, dtype=np.float64).ravel()
        if values.shape != (1,) or not (math.isfinite(values[0]) and 0.0 <= values[0] <= 1.0):
            return f"{name}: inference answered {values.tolist()!r}, not one score in [0, 1]"
        return None

    async def _probe_embedder(self, embedder: Embedder) -> str | None:
        try:
            vectors = await asyncio.wait_for(embedder.aencode([PROBE_PAIR[0]]), PROBE_TIMEOUT_S)
        except Overloaded:
            return None  # its queue is full of real work: it is answering, just busy
        except TimeoutError:
            return f"embedder: no answer within {PROBE_TIMEOUT_S:g} s"
        except Exception as exc:
            log.warning("embedder: readiness probe failed", exc_info=True)
            return f"embedder: inference failed ({type(exc).__name__})"
        if vectors.shape != (1, embedder.dim) or not np.all(np.isfinite(vectors)):
            return f"embedder: inference answered shape {vectors.shape}, not (1, {embedder.dim})"
        return None
