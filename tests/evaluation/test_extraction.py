"""Extraction evaluation: one-to-one matching and the metric arithmetic (the neutral form it
compares in is tested with the person module)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from service.evaluation.extraction import evaluate, greedy_match, load_rows
from service.pipeline.extraction.types import Candidate


class StubEmbedder:
    """Vectors from a table keyed by the neutral text: a missing key fails the test, so the
    table also pins down which neutral forms evaluate embeds."""

    def __init__(self, table: Mapping[str, Sequence[float]]) -> None:
        self.table = table
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.calls += 1
        return np.array([self.table[t] for t in texts], dtype=np.float32)


class FixedExtractor:
    """Returns prepared candidates, looked up by the conversation's first message."""

    name = "fixed"

    def __init__(self, by_first_message: Mapping[str, list[Candidate]]) -> None:
        self.by_first_message = by_first_message

    async def extract(self, conversation: Sequence[Mapping[str, str]]) -> list[Candidate]:
        return self.by_first_message[conversation[0]["content"]]


def unit(*weights: tuple[int, float]) -> list[float]:
    """A vector in 8 dimensions from (axis, weight) pairs."""
    v = [0.0] * 8
    for axis, w in weights:
        v[axis] = w
    return v


def rest(x: float) -> float:
    return math.sqrt(1 - x * x)


A = "I have two dogs and I live near Paris, well, close to it."
B = "I love jazz. I really love jazz!"
C = "I avoid spicy food."

ROWS = [
    {
        "id": "a",
        "source": "spc",
        "conversation": [{"role": "user", "content": A}],
        "gold_attributes": ["I have two dogs.", "I am a nurse."],
        "partner_attributes": ["I live in Paris."],
    },
    {
        "id": "b",
        "source": "spc",
        "conversation": [{"role": "user", "content": B}],
        "gold_attributes": ["I love jazz."],
        "partner_attributes": ["I love jazz music."],
    },
    {
        "id": "c",
        "source": "prefeval",
        "conversation": [
            {"role": "user", "content": C},
            {"role": "assistant", "content": "I hate everything."},
        ],
        "gold_attributes": ["I avoid spicy food."],
        "partner_attributes": [],
    },
]

CANDIDATES = {
    A: [
        Candidate("The user has two dogs.", "pets", 0, "I have two dogs", "fixed"),
        # Leaks the partner's fact: closer to "I live in Paris." than to any gold sentence.
        Candidate("The user lives near Paris.", "location", 0, "I live near Paris", "fixed"),
    ],
    B: [
        # Close to the partner's "I love jazz music." too, but closer to gold: no leak.
        Candidate("The user loves jazz.", "preference", 0, "I love jazz", "fixed"),
        # A second paraphrase of the same gold sentence: matching is one-to-one.
        Candidate("The user really loves jazz.", "preference", 0, "I really love jazz", "fixed"),
    ],
    C: [
        Candidate("The user avoids spicy food.", "diet", 0, "I avoid spicy food", "fixed"),
        # Invented quote (and from the assistant's message): dropped before scoring.
        Candidate("The user hates everything.", "other", 1, "I hate everything", "fixed"),
    ],
}

TABLE = {
    "have two dogs": unit((0, 1.0)),  # gold and candidate share one neutral form
    "a nurse": unit((1, 1.0)),
    "live in paris": unit((2, 1.0)),
    "lives near paris": unit((2, 0.9), (3, rest(0.9))),
    "love jazz": unit((4, 1.0)),
    "love jazz music": unit((4, 0.9), (5, rest(0.9))),
    "loves jazz": unit((4, 1.0)),
    "really loves jazz": unit((4, 0.9), (3, rest(0.9))),
    "avoid spicy food": unit((6, 1.0)),
    "avoids spicy food": unit((6, 0.6), (7, 0.8)),
}


def test_greedy_match_is_one_to_one_and_best_first() -> None:
    sim = np.array([[0.9, 0.8], [0.85, 0.1]], dtype=np.float32)
    # (0, 0) is taken first; prediction 1's only candidate over the threshold is then used.
    # A maximum matching would pair (0, 1) and (1, 0): greedy is simpler and is what is
    # documented.
    assert greedy_match(sim, 0.5) == [(0, 0)]
    assert greedy_match(sim, 0.95) == []
    assert greedy_match(np.zeros((0, 3), dtype=np.float32), 0.5) == []
    assert sorted(greedy_match(np.eye(3, dtype=np.float32), 0.5)) == [(0, 0), (1, 1), (2, 2)]


async def test_metric_arithmetic_on_three_rows() -> None:
    embedder = StubEmbedder(TABLE)
    result = await evaluate(FixedExtractor(CANDIDATES), ROWS, embedder, threshold=0.55)
    # 5 grounded predictions (1 dropped), 4 gold, 3 matched (two dogs, jazz, spicy food).
    assert result["n"] == 3
    assert result["predictions"] == 5
    assert result["gold"] == 4
    assert result["matched"] == 3
    assert result["precision"] == pytest.approx(0.6)
    assert result["recall"] == pytest.approx(0.75)
    assert result["f1"] == pytest.approx(round(2 * 0.6 * 0.75 / 1.35, 4))
    assert result["partner_leak_rate"] == pytest.approx(0.2)  # "lives near Paris"
    assert result["ungrounded"] == 1
    assert result["ungrounded_rate"] == pytest.approx(round(1 / 6, 4))
    assert result["candidates_per_conversation"] == pytest.approx(round(5 / 3, 4))
    assert result["extractor"] == "fixed"
    assert result["threshold"] == 0.55
    assert embedder.calls == 1  # every distinct text in one call

    spc = result["by_source"]["spc"]
    assert (spc["n"], spc["predictions"], spc["gold"], spc["matched"]) == (2, 4, 3, 2)
    assert spc["precision"] == pytest.approx(0.5)
    assert spc["recall"] == pytest.approx(round(2 / 3, 4))
    assert spc["partner_leak_rate"] == pytest.approx(0.25)
    prefeval = result["by_source"]["prefeval"]
    assert (prefeval["precision"], prefeval["recall"], prefeval["partner_leak_rate"]) == (
        1.0,
        1.0,
        0.0,
    )
    assert result["by_category"]["preference"] == {"predictions": 2, "precision": 0.5}
    assert result["by_category"]["pets"] == {"predictions": 1, "precision": 1.0}
    assert "other" not in result["by_category"]  # the ungrounded one never got scored


async def test_threshold_decides_a_match() -> None:
    # "avoids spicy food" is 0.6 from its gold sentence: a match at 0.55, not at 0.7.
    result = await evaluate(FixedExtractor(CANDIDATES), ROWS, StubEmbedder(TABLE), threshold=0.7)
    assert result["matched"] == 2
    assert result["by_source"]["prefeval"]["recall"] == 0.0


async def test_no_predictions_and_no_rows() -> None:
    empty = FixedExtractor({A: [], B: [], C: []})
    result = await evaluate(empty, ROWS, StubEmbedder(TABLE))
    assert (result["precision"], result["recall"], result["f1"]) == (0.0, 0.0, 0.0)
    assert result["partner_leak_rate"] == 0.0
    assert result["gold"] == 4
    nothing = await evaluate(empty, [], StubEmbedder({}))
    assert nothing["n"] == 0 and nothing["precision"] == 0.0


def test_load_rows(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [
        {"id": "x", "source": "s", "conversation": [], "gold_attributes": ["I am a nurse."]},
        {
            "id": "y",
            "source": "s",
            "conversation": [],
            "gold_attributes": [],
            "partner_attributes": ["I am."],
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    loaded = load_rows(path)
    assert [r["id"] for r in loaded] == ["x", "y"]
    assert loaded[0]["partner_attributes"] == []
    assert loaded[1]["partner_attributes"] == ["I am."]


async def test_third_person_gold_and_chats_with_nothing_to_store() -> None:
    """Rows written as the service stores facts (gold_person "third", as in
    datasets/extraction) are compared in the same neutral form, and rows whose gold is empty
    report how often nothing was produced."""
    rows = [
        {
            "id": "t1",
            "conversation": [{"role": "user", "content": "im a nurse lol"}],
            "gold_attributes": ["The user is a nurse."],
            "gold_person": "third",
        },
        {
            "id": "t2",
            "conversation": [{"role": "user", "content": "what is 2+2"}],
            "gold_attributes": [],
            "gold_person": "third",
        },
        {
            "id": "t3",
            "conversation": [{"role": "user", "content": "my friend loves sushi"}],
            "gold_attributes": [],
            "gold_person": "third",
        },
    ]
    extractor = FixedExtractor(
        {
            "im a nurse lol": [
                Candidate("The user is a nurse.", "occupation", 0, "im a nurse", "x")
            ],
            "what is 2+2": [],
            "my friend loves sushi": [
                Candidate("The user loves sushi.", "preference", 0, "loves sushi", "x")
            ],
        }
    )
    embedder = StubEmbedder({"a nurse": unit((0, 1.0)), "loves sushi": unit((1, 1.0))})
    result = await evaluate(extractor, rows, embedder)
    assert (result["precision"], result["recall"]) == (0.5, 1.0)
    assert result["nothing_to_store_rows"] == 2
    assert result["nothing_stored_rate"] == 0.5
