"""Candidate and the grounding check every extractor's output passes."""

from __future__ import annotations

import pytest

from service.pipeline.extraction.types import Candidate, grounded, quote_is_grounded

CONVERSATION = [
    {"role": "user", "content": "Hi there!\nI have  two dogs and a cat."},
    {"role": "assistant", "content": "I am a nurse."},
    {"role": "user", "content": "Nice."},
]


def test_quote_is_grounded_accepts_a_verbatim_user_quote_modulo_whitespace() -> None:
    assert quote_is_grounded(CONVERSATION, 0, "I have two dogs")
    assert quote_is_grounded(CONVERSATION, 0, "Hi there! I have  two\tdogs")
    assert quote_is_grounded(CONVERSATION, 0, "  I have two dogs and a cat.  ")


@pytest.mark.parametrize(
    ("index", "quote", "why"),
    [
        (1, "I am a nurse", "assistant message"),
        (3, "I have two dogs", "missing index"),
        (-3, "I have two dogs", "negative index"),
        (0, "I have three dogs", "invented quote"),
        (0, "i have two dogs", "case changed"),
        (2, "I have two dogs", "quote from another message"),
        (0, "   ", "empty quote"),
    ],
)
def test_quote_is_grounded_rejects(index: int, quote: str, why: str) -> None:
    assert not quote_is_grounded(CONVERSATION, index, quote), why


def test_grounded_filters_and_keeps_order() -> None:
    good = Candidate("The user has two dogs.", "pets", 0, "I have two dogs", "test")
    invented = Candidate("The user is a nurse.", "occupation", 1, "I am a nurse", "test")
    also_good = Candidate("The user has a cat.", "pets", 0, "a cat", "test")
    assert grounded(CONVERSATION, [good, invented, also_good]) == [good, also_good]


def test_candidate_category_is_from_the_fixed_set() -> None:
    with pytest.raises(ValueError, match="unknown category"):
        Candidate("The user has two dogs.", "animals", 0, "I have two dogs", "test")
