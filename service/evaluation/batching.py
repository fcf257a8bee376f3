"""Offline scoring of many pairs: length-sorted batches (less padding), input order kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Pair = tuple[str, str]


def score_in_sorted_batches(
    score: Callable[[list[Pair]], np.ndarray], pairs: Sequence[Pair], batch_size: int = 64
) -> np.ndarray:
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    out = np.zeros(len(pairs), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        out[idx] = score([pairs[i] for i in idx])
    return out
