"""Offline scoring of many pairs: length-sorted batches (less padding), input order kept."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import numpy as np

Pair = tuple[str, str]


def sorted_batches(pairs: Sequence[Pair], batch_size: int) -> list[list[int]]:
    """Indexes of ``pairs`` in batches of ``batch_size``, shortest pairs first."""
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def score_in_sorted_batches(
    score: Callable[[list[Pair]], np.ndarray], pairs: Sequence[Pair], batch_size: int = 64
) -> np.ndarray:
    out = np.zeros(len(pairs), dtype=np.float32)
    for idx in sorted_batches(pairs, batch_size):
        out[idx] = score([pairs[i] for i in idx])
    return out


async def ascore_in_sorted_batches(
    score: Callable[[list[Pair]], Awaitable[np.ndarray]],
    pairs: Sequence[Pair],
    batch_size: int = 64,
) -> np.ndarray:
    """``score_in_sorted_batches`` with an async scorer, one batch at a time."""
    out = np.zeros(len(pairs), dtype=np.float32)
    for idx in sorted_batches(pairs, batch_size):
        out[idx] = await score([pairs[i] for i in idx])
    return out
