"""Training data for the learned extractor's clause classifier (models/extractor).

Every clause that ``learned.clauses`` cuts from a user message of the written corpus
(datasets/extraction) is one example: (clause, context) -> 1 when it states a gold fact, else 0.
A clause states a gold fact when it holds at least half of the fact's quote and the quote is at
least ``MIN_CLAUSE_SHARE`` of the clause (a long clause that mentions a fact among much else
is a negative; its piece that holds the fact is the positive).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from service.pipeline.extraction.learned import Clause, clauses
from service.training.crossencoder import PointExample

MIN_QUOTE_SHARE = 0.5
MIN_CLAUSE_SHARE = 0.3


def load(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def _quote_span(content: str, quote: str) -> tuple[int, int] | None:
    at = content.find(quote)
    if at >= 0:
        return at, at + len(quote)
    # Whitespace may differ (the grounding rule allows it): match on collapsed text.
    flat_quote = " ".join(quote.split())
    for start in range(len(content)):
        if content[start].isspace():
            continue
        flat = " ".join(content[start : start + len(quote) * 2].split())
        if flat.startswith(flat_quote):
            return start, start + len(quote)
    return None


def gold_spans(row: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """(message_index, start, end) of every gold fact's quote."""
    out = []
    for fact in row.get("facts", []):
        index = int(fact["message_index"])
        span = _quote_span(row["conversation"][index]["content"], fact["quote"])
        if span is not None:
            out.append((index, *span))
    return out


def states_fact(clause: Clause, spans: Iterable[tuple[int, int, int]]) -> bool:
    for index, start, end in spans:
        if index != clause.message_index:
            continue
        overlap = min(end, clause.end) - max(start, clause.start)
        if overlap <= 0:
            continue
        if (
            overlap / (end - start) >= MIN_QUOTE_SHARE
            and overlap / (clause.end - clause.start) >= MIN_CLAUSE_SHARE
        ):
            return True
    return False


def labelled_clauses(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Clause, int]]:
    out = []
    for row in rows:
        spans = gold_spans(row)
        for clause in clauses(row["conversation"]):
            out.append((clause, int(states_fact(clause, spans))))
    return out


def examples(rows: Sequence[Mapping[str, Any]]) -> list[PointExample]:
    return [PointExample(c.text, c.context, float(y)) for c, y in labelled_clauses(rows)]


def coverage(rows: Sequence[Mapping[str, Any]]) -> float:
    """Share of gold facts that some clause states: the recall the segmenter allows."""
    total = covered = 0
    for row in rows:
        found = clauses(row["conversation"])
        for span in gold_spans(row):
            total += 1
            covered += any(states_fact(c, [span]) for c in found)
    return covered / total if total else 0.0
