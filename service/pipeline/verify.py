"""Verification: is a statement about the user supported by what the user said?

The verifier is a cross-encoder over (attribute, window) pairs, one window per user message
(windows.py). Two entry points:
- ``verify_attributes``: stateless verdicts for free-standing attributes; every user window is
  scored and the best one names the evidence message (max-pooling, as the model was trained).
- ``verify_candidates``: extraction candidates already name their evidence, so each is scored
  against the message it quotes, cut around the quote (windows.quote_window). A fact must be
  supported by the words it cites; max-pooling over other messages would let a candidate borrow
  support it does not quote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from service.inference import ModelRegistry
from service.pipeline.budget import Budget
from service.pipeline.extraction.person import first_person
from service.pipeline.extraction.types import Candidate
from service.pipeline.windows import quote_window, user_windows

VERIFIER = "verifier"


@dataclass(frozen=True)
class Verdict:
    text: str
    score: float
    supported: bool
    # The user message whose window scored highest; None when the user said nothing.
    message_index: int | None


async def verify_attributes(
    models: ModelRegistry,
    conversation: Sequence[Mapping[str, str]],
    attributes: Sequence[str],
    *,
    budget: Budget,
) -> list[Verdict]:
    windows = user_windows(conversation)
    classifier = models.classifier(VERIFIER)
    if not windows:
        return [Verdict(a, 0.0, False, None) for a in attributes]
    pairs = [(first_person(a), w.text) for a in attributes for w in windows]
    scorer = budget.scorer(models, VERIFIER, "attributes")
    scores = await scorer(pairs) if pairs else np.zeros(0, np.float32)
    verdicts = []
    for i, text in enumerate(attributes):
        row = scores[i * len(windows) : (i + 1) * len(windows)]
        best = int(np.argmax(row))
        score = float(row[best])
        verdicts.append(
            Verdict(text, score, score >= classifier.threshold, windows[best].message_index)
        )
    return verdicts


def candidate_pairs(
    conversation: Sequence[Mapping[str, str]], candidates: Sequence[Candidate]
) -> list[tuple[str, str]]:
    """The verifier's input for each candidate: its first-person form, and the message it
    cites cut around the quote. Candidates must be grounded (their message is the user's)."""
    pairs = []
    for c in candidates:
        if conversation[c.message_index].get("role") != "user":
            raise ValueError(f"candidate cites message {c.message_index}, not a user message")
        window = quote_window(conversation, c.message_index, c.quote)
        pairs.append((first_person(c.text), window.text))
    return pairs


async def verify_candidates(
    models: ModelRegistry,
    conversation: Sequence[Mapping[str, str]],
    candidates: Sequence[Candidate],
    *,
    budget: Budget,
) -> list[Verdict]:
    """One verdict per candidate, scored against the window of the message it quotes.

    Candidates must be grounded already (their message is a user message)."""
    classifier = models.classifier(VERIFIER)
    pairs = candidate_pairs(conversation, candidates)
    if not pairs:
        return []
    scores = await budget.scorer(models, VERIFIER, "conversation")(pairs)
    return [
        Verdict(c.text, float(s), float(s) >= classifier.threshold, c.message_index)
        for c, s in zip(candidates, scores, strict=True)
    ]
