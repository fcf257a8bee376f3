"""How a new supported fact meets the facts already stored for the user.

Three outcomes, decided from the attribute embeddings (unit vectors, so the dot product is the
cosine) plus two cheap textual checks, because embeddings alone cannot tell a restatement from
a contradiction: all-MiniLM-L6-v2 gives "has two dogs" / "has three dogs" 0.91 and "is 30" /
"is 31" 0.96, as close as true paraphrases ("loves jazz" / "enjoys jazz music" 0.91).

- duplicate (update the stored one, no new row): cosine >= DUPLICATE_COSINE, same polarity and
  the same numbers;
- contradiction (the new fact supersedes the old; both stay in the audit log):
  cosine >= CONTRADICTION_COSINE and the polarity or the numbers differ ("likes hiking" /
  "does not like hiking" 0.79), or both are in a single-valued category (where a person has one
  value at a time: location, occupation, diet, identity) with cosine >= SAME_SLOT_COSINE
  ("lives in Paris" / "lives in Berlin" 0.64; "is a teacher" / "is a software engineer" 0.57);
- otherwise a new attribute.
Figures measured on this encoder on 2026-11-30 (see tests/pipeline/test_merge.py for the pairs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

DUPLICATE_COSINE = 0.85
CONTRADICTION_COSINE = 0.70
SAME_SLOT_COSINE = 0.55
SINGLE_VALUED = frozenset({"location", "occupation", "diet", "identity"})

_NEGATION = re.compile(
    r"\b(?:not|never|no|none|nobody|nothing|neither|nor|no longer|without)\b|n't\b", re.IGNORECASE
)
_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "a couple": "2", "twice": "2", "once": "1",
}  # fmt: skip
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?|\b(?:" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)


@dataclass(frozen=True)
class Stored:
    id: str
    text: str
    category: str | None
    vector: NDArray[np.float32] | None


@dataclass(frozen=True)
class Decision:
    action: Literal["add", "duplicate", "supersede"]
    target_id: str | None = None
    similarity: float | None = None


def negated(text: str) -> bool:
    return bool(_NEGATION.search(text.replace("\u2019", "'")))


def numbers(text: str) -> frozenset[str]:
    found = set()
    for match in _NUMBER.finditer(text):
        token = match.group(0).lower()
        found.add(_NUMBER_WORDS.get(token, token.replace(",", ".")))
    return frozenset(found)


def decide(
    text: str, category: str | None, vector: NDArray[np.float32], stored: Sequence[Stored]
) -> Decision:
    """The action for a new fact given the user's active attributes (the closest one wins)."""
    best: Decision = Decision("add")
    best_rank = (-1, -1.0)
    for old in stored:
        if old.vector is None or old.vector.shape != vector.shape:
            continue
        cosine = float(np.dot(vector, old.vector))
        same_form = negated(text) == negated(old.text) and numbers(text) == numbers(old.text)
        same_slot = (
            category is not None
            and category == old.category
            and category in SINGLE_VALUED
            and cosine >= SAME_SLOT_COSINE
        )
        if cosine >= DUPLICATE_COSINE and same_form:
            candidate, rank = Decision("duplicate", old.id, cosine), 2
        elif (cosine >= CONTRADICTION_COSINE and not same_form) or same_slot:
            candidate, rank = Decision("supersede", old.id, cosine), 1
        else:
            continue
        # A duplicate beats a contradiction (the fact is already known, nothing to retire);
        # within a kind the most similar stored fact is the one it speaks about.
        if (rank, cosine) > best_rank:
            best, best_rank = candidate, (rank, cosine)
    return best
