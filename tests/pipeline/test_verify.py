"""The verification use cases on a stand-in verifier: every attribute read in the first person
against every user window, the best window reported, the calibrated threshold, the request's
budget, and candidates scored against the window around their quote."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from service.inference import ModelRegistry
from service.pipeline.budget import Budget, OverBudget
from service.pipeline.extraction.types import Candidate
from service.pipeline.verify import verify_attributes, verify_candidates


class Overlap:
    """Scores (attribute, window) by the share of the attribute's words found in the window;
    threshold 0.75."""

    threshold = 0.75

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []

    @staticmethod
    def _words(text: str) -> set[str]:
        return {w.strip(".,!?").lower() for w in text.split()} - {""}

    async def submit(self, pairs: Sequence[tuple[str, str]]) -> NDArray[np.float32]:
        self.pairs += list(pairs)
        out = []
        for attribute, window in pairs:
            words = self._words(attribute)
            out.append(len(words & self._words(window)) / len(words))
        return np.array(out, dtype=np.float32)

    def token_counts(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        return [len(a.split()) + len(w.split()) for a, w in pairs]


def registry() -> tuple[ModelRegistry, Overlap]:
    models = ModelRegistry()
    verifier = Overlap()
    models.classifiers["verifier"] = verifier  # type: ignore[assignment]
    models.batchers["verifier"] = verifier  # type: ignore[assignment]
    return models, verifier


def budget(max_tokens: int = 10_000) -> Budget:
    return Budget(max_pairs=100, max_tokens=max_tokens)


CHAT = [
    {"role": "user", "content": "Hi! Quick question about dinner."},
    {"role": "assistant", "content": "Sure, what are you cooking?"},
    {"role": "user", "content": "Something for my sister, she is vegan. I eat everything."},
]


async def test_each_attribute_gets_its_best_user_window_in_the_first_person() -> None:
    models, verifier = registry()
    verdicts = await verify_attributes(
        models, CHAT, ["The user eats everything.", "The user is vegan."], budget=budget()
    )
    eats, vegan = verdicts
    assert eats.supported and eats.message_index == 2 and eats.score == 1.0
    # "I am vegan": "am" is in no window, so 2 of 3 words; under the threshold.
    assert not vegan.supported and vegan.score == pytest.approx(2 / 3)
    assert {a for a, _ in verifier.pairs} == {"I eat everything.", "I am vegan."}
    # Two user windows for each of the two attributes; the assistant message is never one.
    assert len(verifier.pairs) == 4
    assert all(not w.startswith("Sure") for _, w in verifier.pairs)


async def test_a_conversation_without_user_words_supports_nothing_and_runs_no_model() -> None:
    models, verifier = registry()
    verdicts = await verify_attributes(
        models, [{"role": "assistant", "content": "You are vegan."}], ["The user is vegan."],
        budget=budget(),
    )  # fmt: skip
    assert [(v.supported, v.score, v.message_index) for v in verdicts] == [(False, 0.0, None)]
    assert verifier.pairs == []


async def test_the_budget_refuses_before_the_model_runs_and_names_the_field() -> None:
    models, verifier = registry()
    with pytest.raises(OverBudget) as refused:
        await verify_attributes(models, CHAT, ["The user is vegan."], budget=budget(5))
    assert refused.value.field == "attributes"
    assert verifier.pairs == []


async def test_candidates_are_scored_against_the_window_around_their_quote() -> None:
    models, verifier = registry()
    quoted = Candidate("The user eats everything.", "diet", 2, "I eat everything.", "rules")
    verdicts = await verify_candidates(models, CHAT, [quoted], budget=budget())
    assert [(v.supported, v.message_index) for v in verdicts] == [(True, 2)]
    ((attribute, window),) = verifier.pairs
    assert attribute == "I eat everything." and "I eat everything." in window


async def test_a_candidate_citing_the_assistant_is_a_programming_error() -> None:
    models, _ = registry()
    said = Candidate("The user is cooking.", "other", 1, "what are you cooking", "llm")
    with pytest.raises(ValueError, match="not a user message"):
        await verify_candidates(models, CHAT, [said], budget=budget())
