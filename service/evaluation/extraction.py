"""Extraction evaluation: how many extracted candidates match the gold attributes of a row.

Gold attributes are first-person persona sentences ("I have two dogs."); candidates are
third-person statements ("The user has two dogs."). Both are put into one *neutral* form before
they are embedded: the person markers are removed ("I", "my", "the user", "their") and the
auxiliary that follows the subject is made person-free ("I am"/"the user is" -> nothing,
"I have"/"the user has" -> "have"). Mapping one side onto the other would need a grammar for
every extractor's phrasing; stripping both needs only a list of markers, and it removes the
subject words that otherwise dominate the embedding of a short sentence: all-MiniLM-L6-v2 gives
"I am a teacher." vs "The user is a teacher." a cosine of only 0.57, but 1.0 in neutral form.

A prediction matches a gold attribute when the cosine of their neutral forms is at least the
threshold; matching is one-to-one and greedy by similarity, so two paraphrases of one gold
sentence count once. The threshold was chosen by reading pairs near the boundary (see
docs/extraction.md). Every candidate passes quote_is_grounded first, as it does in the service:
an invented quote is dropped (and counted), never scored.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from service.pipeline.extraction.person import Person, neutral
from service.pipeline.extraction.types import Candidate, Extractor, grounded

# Chosen by reading 50 (candidate, closest gold) pairs with cosines 0.50-0.75 on dev rows
# (docs/extraction.md): 0.55 made the fewest wrong calls (8 of 50; 0.50: 13, 0.60: 14).
DEFAULT_THRESHOLD = 0.55


class TextEncoder(Protocol):
    """What evaluation needs from an embedder (service.inference.embedder.Embedder fits)."""

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


def load_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of an extraction file: {id, source, conversation, gold_attributes,
    partner_attributes}, and optionally gold_person ("first", the default, for persona
    sentences; "third" for statements written as the service stores them, as in
    datasets/extraction)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            row.setdefault("partner_attributes", [])
            rows.append(row)
    return rows


def _gold_person(row: Mapping[str, Any]) -> Person:
    return "third" if row.get("gold_person") == "third" else "first"


def greedy_match(similarity: NDArray[np.float32], threshold: float) -> list[tuple[int, int]]:
    """One-to-one (prediction, gold) pairs with similarity >= threshold, best pairs first."""
    if similarity.size == 0:
        return []
    rows, cols = np.nonzero(similarity >= threshold)
    order = np.argsort(-similarity[rows, cols], kind="stable")
    used_rows: set[int] = set()
    used_cols: set[int] = set()
    pairs = []
    for k in order:
        r, c = int(rows[k]), int(cols[k])
        if r in used_rows or c in used_cols:
            continue
        used_rows.add(r)
        used_cols.add(c)
        pairs.append((r, c))
    return pairs


@dataclass
class _Tally:
    """Sums that the metrics of one group of rows are computed from."""

    rows: int = 0
    predictions: int = 0
    gold: int = 0
    matched: int = 0
    leaks: int = 0
    ungrounded: int = 0
    # Rows whose gold is empty (nothing to store), and how many of them got no candidate.
    empty: int = 0
    empty_quiet: int = 0

    def add(self, other: _Tally) -> None:
        self.rows += other.rows
        self.predictions += other.predictions
        self.gold += other.gold
        self.matched += other.matched
        self.leaks += other.leaks
        self.ungrounded += other.ungrounded
        self.empty += other.empty
        self.empty_quiet += other.empty_quiet

    def metrics(self) -> dict[str, Any]:
        precision = self.matched / self.predictions if self.predictions else 0.0
        recall = self.matched / self.gold if self.gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        produced = self.predictions + self.ungrounded
        return {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
            "partner_leak_rate": round(self.leaks / self.predictions, 4)
            if self.predictions
            else 0.0,
            "n": self.rows,
            "predictions": self.predictions,
            "gold": self.gold,
            "matched": self.matched,
            "candidates_per_conversation": round(self.predictions / self.rows, 4)
            if self.rows
            else 0.0,
            "ungrounded": self.ungrounded,
            "ungrounded_rate": round(self.ungrounded / produced, 4) if produced else 0.0,
            "nothing_to_store_rows": self.empty,
            "nothing_stored_rate": round(self.empty_quiet / self.empty, 4) if self.empty else None,
        }


@dataclass
class _CategoryTally:
    predictions: Counter[str] = field(default_factory=Counter)
    matched: Counter[str] = field(default_factory=Counter)


def _unit(vectors: NDArray[np.float32]) -> NDArray[np.float32]:
    # Embedder output is already unit length; a stub or another encoder may not be.
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)


async def _extract_all(
    extractor: Extractor, rows: Sequence[Mapping[str, Any]], concurrency: int
) -> list[list[Candidate]]:
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def one(row: Mapping[str, Any]) -> list[Candidate]:
        async with semaphore:
            return await extractor.extract(row["conversation"])

    return list(await asyncio.gather(*(one(r) for r in rows)))


def _score_row(
    candidates: Sequence[Candidate],
    gold: Sequence[str],
    partner: Sequence[str],
    vector: Mapping[tuple[str, Person], NDArray[np.float32]],
    threshold: float,
    categories: _CategoryTally,
    gold_person: Person = "first",
) -> _Tally:
    tally = _Tally(rows=1, predictions=len(candidates), gold=len(gold))
    if not gold:
        tally.empty = 1
        tally.empty_quiet = int(not candidates)
    if not candidates:
        return tally
    predicted = np.stack([vector[(neutral(c.text, "third"), "third")] for c in candidates])

    def similarity(texts: Sequence[str], person: Person) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((len(candidates), 0), dtype=np.float32)
        others = np.stack([vector[(neutral(t, person), person)] for t in texts])
        return (predicted @ others.T).astype(np.float32)

    to_gold = similarity(gold, gold_person)
    to_partner = similarity(partner, "first")
    pairs = greedy_match(to_gold, threshold)
    tally.matched = len(pairs)
    matched_predictions = {p for p, _ in pairs}
    best_gold = to_gold.max(axis=1) if to_gold.shape[1] else np.full(len(candidates), -np.inf)
    if to_partner.shape[1]:
        best_partner = to_partner.max(axis=1)
        # A leak: the candidate reads as a partner fact, and more so than as any gold fact.
        leaks = (best_partner >= threshold) & (best_partner > best_gold)
        tally.leaks = int(leaks.sum())
    for i, candidate in enumerate(candidates):
        categories.predictions[candidate.category] += 1
        if i in matched_predictions:
            categories.matched[candidate.category] += 1
    return tally


async def evaluate(
    extractor: Extractor,
    rows: Sequence[Mapping[str, Any]],
    embedder: TextEncoder,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    concurrency: int = 1,
) -> dict[str, Any]:
    """Precision, recall, f1, partner_leak_rate and n (keys fixed by DESIGN.md), overall and by
    source, with candidates per conversation, grounding rejections and timings.

    concurrency: how many conversations an extractor may work on at once (an LLM-backed one
    gains from more; the rule extractor is synchronous and does not).
    """
    started = time.perf_counter()
    raw = await _extract_all(extractor, rows, concurrency)
    extract_seconds = time.perf_counter() - started
    kept = [grounded(row["conversation"], cands) for row, cands in zip(rows, raw, strict=True)]

    keys: dict[tuple[str, Person], None] = {}
    for row, cands in zip(rows, kept, strict=True):
        for c in cands:
            keys[(neutral(c.text, "third"), "third")] = None
        person = _gold_person(row)
        for text in row["gold_attributes"]:
            keys[(neutral(text, person), person)] = None
        for text in row.get("partner_attributes", []):
            keys[(neutral(text, "first"), "first")] = None
    texts = sorted({text for text, _ in keys})
    started = time.perf_counter()
    # One encode call for every distinct text: the embedder batches by itself, and a single
    # call keeps it from competing with itself for the same cores.
    by_text: dict[str, NDArray[np.float32]] = {}
    if texts:
        encoded = _unit(np.asarray(await asyncio.to_thread(embedder.encode, texts)))
        by_text = dict(zip(texts, encoded, strict=True))
    embed_seconds = time.perf_counter() - started
    vector = {key: by_text[key[0]] for key in keys}

    total = _Tally()
    by_source: dict[str, _Tally] = defaultdict(_Tally)
    categories = _CategoryTally()
    for row, cands, produced in zip(rows, kept, raw, strict=True):
        tally = _score_row(
            cands,
            row["gold_attributes"],
            row.get("partner_attributes", []),
            vector,
            threshold,
            categories,
            _gold_person(row),
        )
        tally.ungrounded = len(produced) - len(cands)
        total.add(tally)
        by_source[str(row.get("source", "unknown"))].add(tally)

    result = total.metrics()
    result |= {
        "extractor": extractor.name,
        "threshold": threshold,
        "by_source": {name: t.metrics() for name, t in sorted(by_source.items())},
        "by_category": {
            name: {
                "predictions": count,
                "precision": round(categories.matched[name] / count, 4),
            }
            for name, count in sorted(categories.predictions.items())
        },
        "extract_seconds": round(extract_seconds, 3),
        "embed_seconds": round(embed_seconds, 3),
    }
    return result


def best_matches(
    candidates: Iterable[str],
    gold: Sequence[str],
    embedder: TextEncoder,
) -> list[tuple[str, str, float]]:
    """(candidate, closest gold, cosine) for each candidate: the pairs read to set the
    threshold (docs/extraction.md)."""
    cands = list(candidates)
    if not cands or not gold:
        return []
    a = _unit(embedder.encode([neutral(c, "third") for c in cands]))
    b = _unit(embedder.encode([neutral(g, "first") for g in gold]))
    sims = a @ b.T
    best = sims.argmax(axis=1)
    return [(c, gold[int(best[i])], float(sims[i, best[i]])) for i, c in enumerate(cands)]
