"""The per-request budget of model work."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from service.inference import ModelRegistry
from service.pipeline.budget import Budget, OverBudget, request_budget


class _Words:
    """Counts one token per word, plus 3 special tokens, like a pair classifier would."""

    def token_counts(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        return [len(a.split()) + len(b.split()) + 3 for a, b in pairs]


class _Batcher:
    def __init__(self) -> None:
        self.seen = 0

    async def submit(self, pairs: Sequence[tuple[str, str]]) -> NDArray[np.float32]:
        self.seen += len(pairs)
        return np.ones(len(pairs), dtype=np.float32)


def _registry() -> tuple[ModelRegistry, _Batcher]:
    registry = ModelRegistry()
    batcher = _Batcher()
    registry.classifiers["verifier"] = _Words()  # type: ignore[assignment]
    registry.batchers["verifier"] = batcher  # type: ignore[assignment]
    return registry, batcher


async def test_work_is_summed_across_calls_and_refused_before_the_model_runs() -> None:
    registry, batcher = _registry()
    budget = Budget(max_pairs=100, max_tokens=50)
    score = budget.scorer(registry, "verifier", "attributes")
    await score([("a b", "c d e")] * 5)  # 5 x 8 tokens
    assert budget.spent == 40
    with pytest.raises(OverBudget) as refused:
        await score([("a b", "c d e")] * 2)  # 56 > 50
    assert refused.value.field == "attributes"
    assert "56" in str(refused.value) and "50" in str(refused.value)
    assert batcher.seen == 5
    assert budget.spent == 40


async def test_one_submission_may_not_take_more_than_its_share_of_the_queue() -> None:
    registry, batcher = _registry()
    budget = request_budget(queue_size=8, max_tokens=10_000)
    assert budget.max_pairs == 4
    with pytest.raises(OverBudget, match="5 verifier pairs"):
        await budget.scorer(registry, "verifier", "conversation")([("a", "b")] * 5)
    assert batcher.seen == 0
