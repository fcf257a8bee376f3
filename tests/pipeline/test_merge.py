"""The merge policy on the shipped embedder, with the pairs its thresholds were read from."""

from __future__ import annotations

import numpy as np
import pytest

from service.inference.embedder import Embedder
from service.pipeline.merge import Stored, decide, negated, numbers


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load()


@pytest.mark.parametrize(
    ("old", "old_cat", "new", "new_cat", "action"),
    [
        ("The user has two dogs.", "pets", "The user has 2 dogs.", "pets", "duplicate"),
        ("The user loves jazz.", "preference", "The user enjoys jazz music.", "preference",
         "duplicate"),
        ("The user has two dogs.", "pets", "The user has three dogs.", "pets", "supersede"),
        ("The user is 30 years old.", "identity", "The user is 31 years old.", "identity",
         "supersede"),
        ("The user likes hiking.", "hobby", "The user does not like hiking.", "hobby",
         "supersede"),
        ("The user lives in Paris.", "location", "The user lives in Berlin.", "location",
         "supersede"),
        ("The user is vegetarian.", "diet", "The user eats meat.", "diet", "supersede"),
        ("The user has a dog.", "pets", "The user has a cat.", "pets", "add"),
        ("The user lives in Paris.", "location", "The user likes Paris.", "preference", "add"),
        ("The user likes to read.", "hobby", "The user likes to cook.", "hobby", "add"),
        ("The user works as a nurse.", "occupation", "The user works night shifts.",
         "occupation", "add"),
    ],
)  # fmt: skip
def test_decide(
    embedder: Embedder, old: str, old_cat: str, new: str, new_cat: str, action: str
) -> None:
    vectors = embedder.encode([old, new])
    decision = decide(new, new_cat, vectors[1], [Stored("a1", old, old_cat, vectors[0])])
    assert decision.action == action
    assert decision.target_id == (None if action == "add" else "a1")


def test_duplicate_beats_a_contradiction_and_the_closest_wins(embedder: Embedder) -> None:
    texts = [
        "The user lives in Berlin.",
        "The user lives in Berlin, Germany.",
        "The user is vegan.",
    ]
    v = embedder.encode([*texts, "The user lives in Berlin.", "The user lives in Paris."])
    stored = [
        Stored("paris", "The user lives in Paris.", "location", v[4]),
        Stored("berlin", texts[0], "location", v[0]),
        Stored("vegan", texts[2], "diet", v[2]),
    ]  # fmt: skip
    assert decide("The user lives in Berlin.", "location", v[3], stored).target_id == "berlin"


def test_stored_rows_without_vectors_are_ignored() -> None:
    vector = np.ones(4, dtype=np.float32) / 2
    assert decide("x", None, vector, [Stored("a", "x", None, None)]).action == "add"
    other_dim = Stored("b", "x", None, np.ones(3, dtype=np.float32))
    assert decide("x", None, vector, [other_dim]).action == "add"


def test_polarity_and_numbers() -> None:
    assert negated("The user doesn't eat meat.") and negated("The user no longer smokes.")
    assert not negated("The user knows Norway well.")
    assert numbers("The user has two dogs and 3 cats.") == {"2", "3"}
    assert numbers("The user has a couple of bikes.") == {"2"}
