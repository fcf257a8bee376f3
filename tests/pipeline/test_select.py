"""The selection use case on a registry of small stand-ins: the prefilter, the cross-encoder on
the shortlist only, the calibrated threshold and the cap."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.typing import NDArray

from service.inference import ModelRegistry
from service.inference.relevance_adapter import AdapterCard, RelevanceAdapter, combine
from service.pipeline.extract import EmbedderMissing
from service.pipeline.select import Item, select

DIM = 4


class Axes:
    """Embeds a text on the axis named by its first word (north/east/south/west)."""

    dim = DIM
    AXES = ("north", "east", "south", "west")

    def __init__(self) -> None:
        self.seen: list[str] = []

    def vector(self, text: str) -> NDArray[np.float32]:
        v = np.zeros(DIM, dtype=np.float32)
        v[self.AXES.index(text.split()[0])] = 1.0
        return v

    async def aencode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.seen += list(texts)
        return np.stack([self.vector(t) for t in texts])


class Relevance:
    """Scores a pair by a number written at the end of the attribute; threshold 0.5, cap 2."""

    threshold = 0.5

    def __init__(self) -> None:
        self.card = SimpleNamespace(cap=2)
        self.pairs_seen = 0

    async def submit(self, pairs: Sequence[tuple[str, str]]) -> NDArray[np.float32]:
        self.pairs_seen += len(pairs)
        return np.array([float(a.split()[-1]) for _, a in pairs], dtype=np.float32)


def registry() -> tuple[ModelRegistry, Axes, Relevance]:
    models = ModelRegistry()
    axes, relevance = Axes(), Relevance()
    models.embedder = axes  # type: ignore[assignment]
    models.classifiers["relevance"] = relevance  # type: ignore[assignment]
    models.batchers["relevance"] = relevance  # type: ignore[assignment]
    return models, axes, relevance


def item(text: str, axes: Axes) -> Item:
    return Item(text, text, axes.vector(text))


async def test_only_the_prefiltered_are_scored_and_the_cap_holds() -> None:
    models, axes, relevance = registry()
    items = [item(t, axes) for t in ("north 0.9", "north 0.8", "north 0.7", "south 0.99")]
    scored = await select(models, "north please", items, prefilter_k=3)
    assert relevance.pairs_seen == 3  # "south" was prefiltered out
    assert [s.text for s in scored if s.selected] == ["north 0.9", "north 0.8"]  # cap 2
    assert [s.score for s in scored] == [pytest.approx(0.9), pytest.approx(0.8),
                                         pytest.approx(0.7), None]  # fmt: skip
    assert scored[-1].similarity == 0.0


async def test_the_threshold_can_select_nothing() -> None:
    models, axes, _ = registry()
    scored = await select(models, "east", [item("east 0.2", axes)], prefilter_k=8)
    assert [s.selected for s in scored] == [False]


async def test_items_without_a_stored_vector_are_embedded_with_the_prompt() -> None:
    models, axes, _ = registry()
    items = [Item("west 0.6"), item("north 0.9", axes)]
    scored = await select(models, "west", items, prefilter_k=1)
    assert axes.seen == ["west", "west 0.6"]
    assert [(s.text, s.selected) for s in scored] == [("west 0.6", True), ("north 0.9", False)]


async def test_nothing_stored_needs_no_model_and_no_embedder_is_an_error() -> None:
    assert await select(ModelRegistry(), "anything", [], prefilter_k=8) == []
    with pytest.raises(EmbedderMissing):
        await select(ModelRegistry(), "anything", [Item("north 1")], prefilter_k=8)


def rotating_adapter(shortlist: int, weight: float) -> RelevanceAdapter:
    """An adapter that maps a prompt on one axis to the next axis (north → east): what plain
    cosine ranks last, it ranks first."""
    rotate = np.roll(np.eye(DIM, dtype=np.float32), 1, axis=1) - np.eye(DIM, dtype=np.float32)
    return RelevanceAdapter(
        card=AdapterCard(weight=weight, shortlist=shortlist, embedder="axes", dim=DIM),
        prompt_u=rotate[None],
        prompt_v=np.eye(DIM, dtype=np.float32)[None],
        fact_u=np.zeros((1, DIM, DIM), np.float32),
        fact_v=np.zeros((1, DIM, DIM), np.float32),
        scale=np.array([10.0], np.float32),
        bias=np.array([-5.0], np.float32),
    )


async def test_the_adapter_chooses_the_shortlist_and_shares_the_score() -> None:
    models, axes, relevance = registry()
    models.relevance_adapter = rotating_adapter(shortlist=1, weight=0.5)
    items = [item(t, axes) for t in ("north 0.9", "east 0.6")]
    scored = await select(models, "north please", items, prefilter_k=32)
    assert relevance.pairs_seen == 1  # the card's shortlist, not prefilter_k
    assert scored[0].text == "east 0.6"  # the adapter's pick, not the cosine's
    adapter_logit = 10.0 * 1.0 - 5.0
    expected = combine(np.array([adapter_logit], np.float32), np.array([0.6], np.float32), 0.5)[0]
    assert scored[0].score == pytest.approx(float(expected), rel=1e-5)
    assert scored[0].selected
    assert scored[1].score is None and scored[1].similarity == 1.0


async def test_prefilter_k_still_bounds_the_adapters_shortlist() -> None:
    models, axes, relevance = registry()
    models.relevance_adapter = rotating_adapter(shortlist=8, weight=1.0)
    items = [item(t, axes) for t in ("north 0.9", "east 0.6", "south 0.1")]
    await select(models, "north please", items, prefilter_k=2)
    assert relevance.pairs_seen == 2
