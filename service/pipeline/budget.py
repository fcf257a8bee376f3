"""What one request may cost in model work.

A cross-encoder's CPU time grows with the tokens it scores (about 10,000 tokens per CPU-second
for the MiniLM-L6 int8 graphs on the 2-core reference machine: `bench/request_cost.py`), so a
request's model work is counted in tokens, summed over every pair it has scored, whichever model
scored them. A request that would go over its budget is refused before the model runs, naming
the field to shorten. Each submission is also held to a share of the model's queue, so that one
request never turns every other caller's request into a 429."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from service.inference import ModelRegistry

Pair = tuple[str, str]
Scorer = Callable[[Sequence[Pair]], Awaitable[NDArray[np.float32]]]


class OverBudget(ValueError):
    """The request needs more model work than one request may use."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        # The request field to shorten: "attributes" for /v1/verify, "conversation" when the
        # work comes from the conversation itself.
        self.field = field


@dataclass
class Budget:
    max_pairs: int  # pairs one submission may queue
    max_tokens: int  # tokens scored in all, across every model the request runs
    spent: int = 0

    def charge(self, models: ModelRegistry, model: str, pairs: Sequence[Pair], field: str) -> None:
        if len(pairs) > self.max_pairs:
            raise OverBudget(
                f"this request needs {len(pairs)} {model} pairs at once; at most "
                f"{self.max_pairs} are scored per request: send fewer attributes or a shorter "
                "conversation",
                field,
            )
        needed = self.spent + sum(models.classifier(model).token_counts(pairs))
        if needed > self.max_tokens:
            raise OverBudget(
                f"this request needs at least {needed} tokens of model work; one request may "
                f"use {self.max_tokens}: send fewer attributes or a shorter conversation",
                field,
            )
        self.spent = needed

    def scorer(self, models: ModelRegistry, model: str, field: str) -> Scorer:
        """``model``'s scores for pairs, charged to this budget first."""
        batcher = models.get(model)

        async def score(pairs: Sequence[Pair]) -> NDArray[np.float32]:
            self.charge(models, model, pairs, field)
            return await batcher.submit(pairs)

        return score


def request_budget(queue_size: int, max_tokens: int) -> Budget:
    """Half the model's queue per submission, and ``max_tokens`` in all."""
    return Budget(max_pairs=max(1, queue_size // 2), max_tokens=max_tokens)
