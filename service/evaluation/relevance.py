"""Relevance evaluation and the two baselines (BM25, embedding cosine) it is compared with.

Every scorer is used the same way: score each (prompt, attribute) of a row, select those at or
over a threshold, keep at most ``cap`` (highest first). Thresholds are chosen on validation rows
by the same F1 search for the model and for each baseline.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.evaluation.metrics import binary
from service.inference.relevance_adapter import RelevanceAdapter, combine

RowScorer = Callable[[Sequence[dict[str, Any]]], list[np.ndarray]]
Rows = Sequence[dict[str, Any]]
Encode = Callable[[list[str]], np.ndarray]
TOKEN = re.compile(r"[a-z0-9]+")


def load_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def select(scores: np.ndarray, threshold: float, cap: int) -> np.ndarray:
    chosen = np.zeros(len(scores), dtype=bool)
    order = np.argsort(-scores)
    for i in order[:cap]:
        if scores[i] >= threshold:
            chosen[i] = True
    return chosen


def gold_mask(row: dict[str, Any]) -> np.ndarray:
    mask = np.zeros(len(row["attributes"]), dtype=bool)
    mask[list(row["relevant"])] = True
    return mask


def metrics(
    row_scores: list[np.ndarray],
    rows: Sequence[dict[str, Any]],
    threshold: float,
    cap: int,
    *,
    by_kind: bool = False,
) -> dict[str, Any]:
    """Precision, recall, F1, the selection rate against gold and the quiet rate; with
    ``by_kind``, the same per prompt kind (reports only: threshold searches call this hundreds
    of times)."""
    chosen = [select(s, threshold, cap) for s in row_scores]
    predicted = np.concatenate(chosen)
    gold = np.concatenate([gold_mask(r) for r in rows])
    m = binary(predicted, gold)
    # Prompts where nothing applies (small talk, arithmetic, ...): selecting nothing is right.
    empty = [i for i, r in enumerate(rows) if not r["relevant"]]
    quiet = sum(not chosen[i].any() for i in empty)
    kinds = _by_kind(chosen, rows) if by_kind else {}
    return {
        "precision": round(m.precision, 4),
        "recall": round(m.recall, 4),
        "f1": round(m.f1, 4),
        "selection_rate": round(float(predicted.mean()), 4),
        "gold_rate": round(float(gold.mean()), 4),
        "n": len(rows),
        "pairs": len(gold),
        "threshold": round(threshold, 6),
        "cap": cap,
        "nothing_applies": len(empty),
        "nothing_selected_when_nothing_applies": round(quiet / len(empty), 4) if empty else None,
    } | ({"by_kind": kinds} if kinds else {})


def _by_kind(chosen: list[np.ndarray], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Precision, recall and F1 over the prompts of each ``kind`` the corpus records (direct,
    indirect, mixed; ``none`` prompts have no gold, so their figure is how often nothing was
    selected); empty for rows without kinds."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if isinstance(r.get("kind"), str):
            groups.setdefault(r["kind"], []).append(i)
    out: dict[str, Any] = {}
    for kind, idx in sorted(groups.items()):
        if kind == "none":
            quiet = sum(not chosen[i].any() for i in idx)
            out[kind] = {"n": len(idx), "nothing_selected": round(quiet / len(idx), 4)}
            continue
        m = binary(
            np.concatenate([chosen[i] for i in idx]),
            np.concatenate([gold_mask(rows[i]) for i in idx]),
        )
        out[kind] = {
            "n": len(idx),
            "precision": round(m.precision, 4),
            "recall": round(m.recall, 4),
            "f1": round(m.f1, 4),
        }
    return out


def tune_threshold(row_scores: list[np.ndarray], rows: Sequence[dict[str, Any]], cap: int) -> float:
    flat = np.unique(np.concatenate(row_scores))
    # Quantiles keep the search short on ~100k scores without missing the useful range.
    candidates = np.unique(np.quantile(flat, np.linspace(0.5, 1.0, 400)))
    best_t, best_f1 = float(candidates[0]), -1.0
    for t in candidates:
        f1 = metrics(row_scores, rows, float(t), cap)["f1"]
        if f1 > best_f1:
            best_t, best_f1 = float(t), f1
    return best_t


def quiet_enough(m: dict[str, Any], min_quiet: float) -> bool:
    """Whether ``metrics`` output ``m`` selects nothing for at least ``min_quiet`` of the prompts
    where nothing applies (true when there are none)."""
    quiet = m["nothing_selected_when_nothing_applies"]
    return quiet is None or quiet >= min_quiet


def calibrate(
    row_scores: list[np.ndarray],
    rows: Sequence[dict[str, Any]],
    cap: int,
    rate_tolerance: float = 0.15,
    min_quiet: float = 0.0,
) -> float:
    """The best-F1 threshold among those whose selection rate is within ``rate_tolerance`` of
    the gold rate (relative), so the selector picks about as many facts as people would, and
    that select nothing for at least ``min_quiet`` of the prompts where nothing applies; the
    plain best-F1 threshold when none is."""
    flat = np.concatenate(row_scores)
    gold_rate = float(np.mean(np.concatenate([gold_mask(r) for r in rows])))
    candidates = np.unique(np.quantile(flat, np.linspace(0.3, 1.0, 500)))
    best_t, best_f1 = None, -1.0
    for t in candidates:
        m = metrics(row_scores, rows, float(t), cap)
        if (
            abs(m["selection_rate"] - gold_rate) <= rate_tolerance * gold_rate
            and quiet_enough(m, min_quiet)
            and m["f1"] > best_f1
        ):
            best_t, best_f1 = float(t), m["f1"]
    return best_t if best_t is not None else tune_threshold(row_scores, rows, cap)


def _tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def bm25_scores(
    rows: Sequence[dict[str, Any]], k1: float = 1.5, b: float = 0.75
) -> list[np.ndarray]:
    """Okapi BM25 of the prompt against each attribute, the user's attributes as the corpus."""
    out = []
    for row in rows:
        docs = [_tokens(a) for a in row["attributes"]]
        avg = sum(len(d) for d in docs) / max(1, len(docs))
        df: Counter[str] = Counter(t for d in docs for t in set(d))
        n = len(docs)
        query = _tokens(row["prompt"])
        scores = np.zeros(n, dtype=np.float32)
        for i, doc in enumerate(docs):
            tf = Counter(doc)
            for term in query:
                if term not in tf:
                    continue
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                denom = tf[term] + k1 * (1 - b + b * len(doc) / max(avg, 1e-9))
                scores[i] += idf * tf[term] * (k1 + 1) / denom
        out.append(scores)
    return out


def embedding_scores(
    rows: Sequence[dict[str, Any]], encode: Callable[[list[str]], np.ndarray]
) -> list[np.ndarray]:
    """Cosine similarity of normalized embeddings (prompt vs each attribute)."""
    texts = sorted({t for r in rows for t in [r["prompt"], *r["attributes"]]})
    vectors = encode(texts)
    index = {t: i for i, t in enumerate(texts)}
    out = []
    for row in rows:
        q = vectors[index[row["prompt"]]]
        a = vectors[[index[t] for t in row["attributes"]]]
        out.append((a @ q).astype(np.float32))
    return out


def pair_scores(
    rows: Sequence[dict[str, Any]], score: Callable[[list[tuple[str, str]]], np.ndarray]
) -> list[np.ndarray]:
    pairs = [(r["prompt"], a) for r in rows for a in r["attributes"]]
    flat = score(pairs)
    out, start = [], 0
    for r in rows:
        out.append(flat[start : start + len(r["attributes"])])
        start += len(r["attributes"])
    return out


@dataclass
class Vectors:
    """Each row's prompt vector and its facts' vectors."""

    prompts: np.ndarray  # [rows, dim]
    facts: list[np.ndarray]  # per row [n, dim]
    gold: list[np.ndarray]  # per row [n] bool

    @classmethod
    def of(cls, rows: Rows, encode: Encode) -> Vectors:
        texts = sorted({t for r in rows for t in [r["prompt"], *r["attributes"]]})
        matrix = np.asarray(encode(texts), dtype=np.float32)
        index = {t: i for i, t in enumerate(texts)}
        return cls(
            prompts=matrix[[index[r["prompt"]] for r in rows]],
            facts=[matrix[[index[t] for t in r["attributes"]]] for r in rows],
            gold=[gold_mask(r) for r in rows],
        )


def adapter_logits(adapter: RelevanceAdapter, vectors: Vectors) -> list[np.ndarray]:
    return [adapter.logits(q, f) for q, f in zip(vectors.prompts, vectors.facts, strict=True)]


def shortlist_scores(
    adapter: RelevanceAdapter,
    rows: Rows,
    vectors: Vectors,
    model_scores: Callable[[list[tuple[str, str]]], np.ndarray],
    weight: float,
    shortlist: int,
) -> list[np.ndarray]:
    """Each row's final scores as the service computes them: the adapter's logits for every
    fact, the cross-encoder on the ``shortlist`` best, the combined score for those; 0 for the
    facts the cross-encoder never read."""
    a_logits = adapter_logits(adapter, vectors)
    picks = [np.argsort(-a, kind="stable")[:shortlist] for a in a_logits]
    pairs = [
        (r["prompt"], r["attributes"][int(i)]) for r, p in zip(rows, picks, strict=True) for i in p
    ]
    flat = model_scores(pairs)
    out, k = [], 0
    for a, pick in zip(a_logits, picks, strict=True):
        scores = np.zeros(len(a), dtype=np.float32)
        scores[pick] = combine(a[pick], flat[k : k + len(pick)], weight)
        k += len(pick)
        out.append(scores)
    return out


def pad_rows(rows: Rows, size: int, seed: int) -> list[dict[str, Any]]:
    """Each row with facts of other profiles added (never relevant) up to ``size`` facts, in
    random positions: a long-lived user's memory, for the shortlist's choice and its report."""
    rng = random.Random(seed)
    by_profile: dict[str, set[str]] = {}
    for r in rows:
        by_profile.setdefault(r["profile_id"], set()).update(r["attributes"])
    out = []
    for r in rows:
        others = sorted(
            {a for p, facts in by_profile.items() if p != r["profile_id"] for a in facts}
            - set(r["attributes"])
        )
        extra = rng.sample(others, max(0, min(len(others), size - len(r["attributes"]))))
        facts = [(a, i in r["relevant"]) for i, a in enumerate(r["attributes"])]
        facts += [(a, False) for a in extra]
        rng.shuffle(facts)
        out.append(
            dict(r)
            | {
                "attributes": [a for a, _ in facts],
                "relevant": [i for i, (_, rel) in enumerate(facts) if rel],
            }
        )
    return out
