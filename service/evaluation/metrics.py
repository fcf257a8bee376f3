"""Binary classification metrics and threshold choice."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Binary:
    precision: float
    recall: float
    f1: float
    accuracy: float
    n: int
    tp: int
    fp: int
    fn: int
    tn: int

    def as_dict(self) -> dict[str, float | int]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def binary(predicted: Sequence[bool] | np.ndarray, gold: Sequence[bool] | np.ndarray) -> Binary:
    p = np.asarray(predicted, dtype=bool)
    g = np.asarray(gold, dtype=bool)
    tp = int((p & g).sum())
    fp = int((p & ~g).sum())
    fn = int((~p & g).sum())
    tn = int((~p & ~g).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    n = len(g)
    return Binary(precision, recall, f1, (tp + tn) / n if n else 0.0, n, tp, fp, fn, tn)


def best_f1_threshold(scores: np.ndarray, gold: np.ndarray) -> tuple[float, Binary]:
    """The threshold (midpoint between adjacent distinct scores) with the highest F1."""
    candidates = np.unique(scores)
    cuts = np.concatenate([[candidates[0] - 1e-6], (candidates[:-1] + candidates[1:]) / 2])
    best_t, best = float(cuts[0]), binary(scores >= cuts[0], gold)
    for t in cuts[1:]:
        m = binary(scores >= t, gold)
        if m.f1 > best.f1:
            best_t, best = float(t), m
    return best_t, best


def recall_at_precision(scores: np.ndarray, gold: np.ndarray, min_precision: float) -> float:
    best = 0.0
    for t in np.unique(scores):
        m = binary(scores >= t, gold)
        if m.precision >= min_precision:
            best = max(best, m.recall)
    return best
