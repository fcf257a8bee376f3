"""The relevance adapter: a learned relevance score from the embeddings alone.

The relevance cross-encoder reads every (prompt, fact) pair it scores, so its cost grows with
the shortlist, and on its own it ranks only moderately well (a 6-layer MiniLM trained on a few
thousand written prompts). The adapter is a small learned map on top of the embedder's vectors,
which the service already has for every stored fact and computes once per prompt:

    p = normalise(q + q Uq Vq)      a = normalise(f + f Uf Vf)      logit = scale * p.a + bias

with low-rank ``U V`` per side (the prompt and the fact are mapped differently: "what should I
pack for the campsite" must land near "The user has a two-year-old", which plain cosine does not
put it). Several members trained from different seeds are averaged (their logits), which
steadies the scores of a model trained on a small corpus.

Selection uses it twice (``pipeline/select.py``): to choose the shortlist the cross-encoder
reads (better than raw cosine, so the shortlist can be short), and in the final score, a
weighted sum of the adapter's logit and the cross-encoder's (``combine``); the weight, the
threshold and the cap are chosen on the validation split by ``tailor train relevance-adapter``
and written to the relevance model's ``tailor.json``. The arrays live beside the graph in
``adapter.npz``; they are only valid for the embedder they were trained on, whose
``base_model`` and dimension the card names and the registry checks at start-up.

numpy only: no torch at run time (training is in ``service/training/relevance_adapter.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

Float32Array = NDArray[np.float32]

ADAPTER_FILE = "adapter.npz"
ARRAYS = ("prompt_u", "prompt_v", "fact_u", "fact_v", "scale", "bias")


class AdapterMismatch(ValueError):
    """The adapter was trained on another embedder than the one loaded."""


@dataclass(frozen=True)
class AdapterCard:
    """The ``adapter`` object of the relevance model's tailor.json."""

    # Share of the adapter's logit in the final score (the cross-encoder's is 1 - weight).
    weight: float
    # How many facts, best by the adapter, the cross-encoder reads.
    shortlist: int
    embedder: str
    dim: int

    @classmethod
    def from_json(cls, path: Path, raw: Any) -> AdapterCard:
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: adapter must be an object")
        try:
            card = cls(
                weight=float(raw["weight"]),
                shortlist=int(raw["shortlist"]),
                embedder=str(raw["embedder"]),
                dim=int(raw["dim"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: adapter is invalid ({exc!r})") from exc
        if not 0.0 <= card.weight <= 1.0:
            raise ValueError(f"{path}: adapter weight {card.weight} is not within [0, 1]")
        if card.shortlist < 1:
            raise ValueError(f"{path}: adapter shortlist must be at least 1")
        return card


@dataclass(frozen=True)
class RelevanceAdapter:
    card: AdapterCard
    prompt_u: Float32Array  # [members, dim, rank]
    prompt_v: Float32Array  # [members, rank, dim]
    fact_u: Float32Array
    fact_v: Float32Array
    scale: Float32Array  # [members]
    bias: Float32Array  # [members]

    @classmethod
    def load(cls, model_dir: Path) -> RelevanceAdapter | None:
        """The adapter of a relevance model folder; None when its tailor.json names none."""
        card_path = model_dir / "tailor.json"
        raw = json.loads(card_path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or raw.get("adapter") is None:
            return None
        card = AdapterCard.from_json(card_path, raw["adapter"])
        path = model_dir / ADAPTER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing (tailor.json names an adapter)")
        with np.load(path) as data:
            missing = [name for name in ARRAYS if name not in data]
            if missing:
                raise ValueError(f"{path}: arrays missing: {', '.join(missing)}")
            arrays = {name: np.asarray(data[name], dtype=np.float32) for name in ARRAYS}
        adapter = cls(card=card, **arrays)
        adapter._check_shapes(path)
        return adapter

    def _check_shapes(self, path: Path) -> None:
        m, d, r = self.prompt_u.shape
        expected = {
            "prompt_u": (m, d, r),
            "prompt_v": (m, r, d),
            "fact_u": (m, d, r),
            "fact_v": (m, r, d),
            "scale": (m,),
            "bias": (m,),
        }
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise ValueError(
                    f"{path}: {name} has shape {getattr(self, name).shape}, not {shape}"
                )
        if d != self.card.dim:
            raise ValueError(f"{path}: arrays are for dimension {d}, the card says {self.card.dim}")

    def check_embedder(self, base_model: str | None, dim: int) -> None:
        if dim != self.card.dim or (base_model is not None and base_model != self.card.embedder):
            raise AdapterMismatch(
                f"the relevance adapter was trained on {self.card.embedder} ({self.card.dim} "
                f"dimensions) but the embedder is {base_model or 'unnamed'} ({dim}); retrain it "
                "with `tailor train relevance-adapter`, or remove `adapter` from the relevance "
                "model's tailor.json"
            )

    def logits(self, prompt: Float32Array, facts: Float32Array) -> Float32Array:
        """The adapter's logit for each row of ``facts`` [n, dim] against ``prompt`` [dim]:
        the mean of the members' logits."""
        # Two thin matmuls per side ([n, dim] -> [n, rank] -> [n, dim]), never a dim x dim map
        # nor a naive einsum (which costs seconds here).
        q = prompt[None, None, :] + (prompt[None, None, :] @ self.prompt_u) @ self.prompt_v
        a = facts[None, :, :] + (facts[None, :, :] @ self.fact_u) @ self.fact_v
        q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), 1e-12)
        a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
        cos = (a * q).sum(-1)  # [members, n]
        out = self.scale[:, None] * cos + self.bias[:, None]
        return np.asarray(out.mean(0), dtype=np.float32)


def logit(p: Float32Array) -> Float32Array:
    clipped = np.clip(p.astype(np.float64), 1e-6, 1 - 1e-6)
    return np.asarray(np.log(clipped / (1 - clipped)), dtype=np.float32)


def combine(
    adapter_logits: Float32Array, model_scores: Float32Array, weight: float
) -> Float32Array:
    """The final relevance score in [0, 1]: the sigmoid of the weighted sum of the adapter's
    logit and the cross-encoder's (its sigmoid score turned back into a logit)."""
    z = weight * adapter_logits.astype(np.float64) + (1 - weight) * logit(model_scores)
    return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float32)
