"""LearnedExtractor: segmentation into quotable clauses, the threshold, rewriting, merging."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from service.pipeline.extraction.learned import (
    LearnedExtractor,
    about_someone_else,
    category_of,
    clauses,
    mentions,
)
from service.pipeline.extraction.types import quote_is_grounded

Pair = tuple[str, str]


def scorer(facts: set[str]):  # type: ignore[no-untyped-def]
    """A stand-in for the model: 0.9 for the clauses named, 0.1 for the rest."""
    seen: list[Pair] = []

    async def score(pairs: Sequence[Pair]) -> NDArray[np.float32]:
        seen.extend(pairs)
        return np.array([0.9 if a in facts else 0.1 for a, _ in pairs], dtype=np.float32)

    score.seen = seen  # type: ignore[attr-defined]
    return score


CHAT = [
    {
        "role": "user",
        "content": "can you suggest a quick dinner? I'm vegetarian and my husband hates mushrooms",
    },
    {"role": "assistant", "content": "Sure! Do you have kids eating too?"},
    {"role": "user", "content": "yeah two boys, 5 and 8. I'm exhausted today lol"},
]


def test_clauses_are_spans_of_user_messages_only() -> None:
    found = clauses(CHAT)
    texts = [c.text for c in found]
    assert "I'm vegetarian" in texts
    assert "my husband hates mushrooms" in texts
    assert all(c.message_index in (0, 2) for c in found)
    for c in found:
        content = CHAT[c.message_index]["content"]
        assert content[c.start : c.end] == c.text
    assert not any("Do you have kids" in c.text for c in found)


def test_context_carries_the_partner_question_and_the_clause_in_brackets() -> None:
    answer = next(c for c in clauses(CHAT) if c.text.startswith("two boys"))
    assert answer.context.startswith("assistant: Sure! Do you have kids eating too?")
    assert "[two boys" in answer.context


async def test_kept_clauses_become_grounded_third_person_candidates() -> None:
    score = scorer({"I'm vegetarian", "my husband hates mushrooms"})
    extractor = LearnedExtractor(score, threshold=0.5)
    out = await extractor.extract(CHAT)
    assert [(c.text, c.quote, c.message_index) for c in out] == [
        ("The user is vegetarian.", "I'm vegetarian", 0),
        ("The user's husband hates mushrooms.", "my husband hates mushrooms", 0),
    ]
    assert all(quote_is_grounded(CHAT, c.message_index, c.quote) for c in out)
    assert {c.source for c in out} == {"learned"}
    assert out[0].category == "diet"


async def test_nothing_over_the_threshold_gives_only_the_relatives_named() -> None:
    extractor = LearnedExtractor(scorer(set()), threshold=0.5, with_rules=False)
    out = await extractor.extract(CHAT)
    assert [(c.text, c.quote, c.category) for c in out] == [
        ("The user has a husband.", "my husband", "family")
    ]
    chat = [{"role": "user", "content": "can you suggest a quick dinner? I'm exhausted today"}]
    assert await extractor.extract(chat) == []


async def test_rules_fill_in_where_no_learned_candidate_quotes_the_same_words() -> None:
    chat = [
        {"role": "assistant", "content": "I love hiking. Do you?"},
        {"role": "user", "content": "Me too! I'm vegetarian"},
    ]
    extractor = LearnedExtractor(scorer({"I'm vegetarian"}), threshold=0.5, with_rules=True)
    out = await extractor.extract(chat)
    texts = [c.text for c in out]
    assert texts.count("The user is vegetarian.") == 1
    assert "The user loves hiking." in texts  # the rules' agreement echo


async def test_a_chat_without_user_words_is_not_scored() -> None:
    score = scorer(set())
    extractor = LearnedExtractor(score, threshold=0.5)
    assert await extractor.extract([{"role": "assistant", "content": "Hello there"}]) == []
    assert score.seen == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("The user is vegetarian.", "diet"),
        ("The user has two cats.", "pets"),
        ("The user can't stand horror movies.", "preference"),
    ],
)
def test_category_of(text: str, category: str) -> None:
    assert category_of(text) == category


@pytest.mark.parametrize(
    ("clause", "someone_else"),
    [
        ("she hates her carrier", True),
        ("he was sleeping 5-6 hr stretches", True),
        ("my coworker is obsessed w plants", True),
        ("My buddy won't shut up about the Tour de France", True),
        ("my best friend swears by it", True),
        ("my sister is a nurse", False),
        ("she loves my cooking", False),
        ("I'm vegetarian", False),
    ],
)
def test_about_someone_else(clause: str, someone_else: bool) -> None:
    assert about_someone_else(clause) is someone_else


async def test_a_long_conversation_is_scored_in_bounded_parts() -> None:
    from service.pipeline.extraction import learned

    sizes: list[int] = []

    async def score(pairs: Sequence[Pair]) -> NDArray[np.float32]:
        sizes.append(len(pairs))
        return np.zeros(len(pairs), dtype=np.float32)

    message = ". ".join(f"I have {n} red bikes" for n in range(700))
    chat = [{"role": "user", "content": message}]
    assert await LearnedExtractor(score, threshold=0.5).extract(chat) == []
    assert sum(sizes) == 700
    assert max(sizes) <= learned.SUBMIT_PAIRS


@pytest.mark.parametrize(
    ("message", "facts"),
    [
        ("lookin for a tablet for my 3 kids to share", ["The user has 3 kids."]),
        ("since my brother's deployment mum is a wreck", ["The user has a brother."]),
        ("our new puppy chews everything", ["The user has a new puppy."]),
        ("any good ramen here in Busan?", ["The user lives in Busan."]),
        ("what do the kids eat here in the UK", ["The user lives in the UK."]),
        ("my dog died last spring", []),
        ("my friend's kids are coming over", []),
        ("if it were my kid I'd let him in", []),
    ],
)
def test_relatives_pets_and_places_named_in_passing(message: str, facts: list[str]) -> None:
    chat = [{"role": "user", "content": message}]
    found = mentions(chat)
    assert [m.text for m in found] == facts
    assert all(quote_is_grounded(chat, m.message_index, m.quote) for m in found)


async def test_a_mention_is_not_repeated_when_a_candidate_names_the_relative() -> None:
    extractor = LearnedExtractor(scorer({"my husband hates mushrooms"}), threshold=0.5)
    texts = [c.text for c in await extractor.extract(CHAT)]
    assert texts == ["The user's husband hates mushrooms."]
