"""Verifier evaluation: conversation-level verdicts from window scores (max-pooled)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from service.evaluation.metrics import binary, recall_at_precision
from service.pipeline.extraction.person import first_person
from service.pipeline.windows import user_windows

ScoreFn = Callable[[Sequence[tuple[str, str]]], np.ndarray]


def load_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            row["supported"] = row["label"] == "supported"
            rows.append(row)
    return rows


def pooled_scores(
    score: ScoreFn, rows: Iterable[Mapping[str, Any]]
) -> tuple[np.ndarray, list[int | None]]:
    """Max window score per row, and the message index of the best window."""
    pairs: list[tuple[str, str]] = []
    spans: list[tuple[int, int, list[int]]] = []
    for row in rows:
        windows = user_windows(row["conversation"])
        start = len(pairs)
        # As the service reads it (/v1/verify): a stored "The user ..." statement in the first
        # person the model was trained on; first-person sentences pass unchanged.
        attribute = first_person(row["attribute"])
        pairs += [(attribute, w.text) for w in windows]
        spans.append((start, len(pairs), [w.message_index for w in windows]))
    flat = score(pairs) if pairs else np.zeros(0, dtype=np.float32)
    out = np.zeros(len(spans), dtype=np.float32)
    where: list[int | None] = []
    for i, (start, end, indices) in enumerate(spans):
        if end == start:
            where.append(None)
            continue
        best = int(np.argmax(flat[start:end]))
        out[i] = flat[start + best]
        where.append(indices[best])
    return out, where


def evaluate(score: ScoreFn, rows: Sequence[Mapping[str, Any]], threshold: float) -> dict[str, Any]:
    scores, _ = pooled_scores(score, rows)
    gold = np.array([bool(r["supported"]) for r in rows])
    result: dict[str, Any] = binary(scores >= threshold, gold).as_dict()
    result["threshold"] = threshold
    result["recall_at_precision_0.85"] = round(recall_at_precision(scores, gold, 0.85), 4)
    categories = sorted({str(r["category"]) for r in rows if "category" in r})
    if categories:
        by_category = {}
        for cat in categories:
            idx = [i for i, r in enumerate(rows) if r.get("category") == cat]
            correct = [(scores[i] >= threshold) == gold[i] for i in idx]
            by_category[cat] = {"accuracy": round(float(np.mean(correct)), 4), "n": len(idx)}
        result["by_category"] = by_category
    return result
