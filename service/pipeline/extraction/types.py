"""What every extractor returns, and the grounding check that every extractor's output passes.

A candidate is a claim about the user that still has to be verified. It carries a verbatim quote
of the user message that supports it, so that the verifier, the audit log and a person reading
the memory can all see the words it came from, and so that a claim with no words behind it (an
LLM's invention, or a fact the *assistant* stated) can be rejected before anything else runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# A small fixed set: selection and the API group attributes by it, and a closed set keeps LLM
# extractors from inventing near-duplicate labels ("job" vs "work" vs "career").
CATEGORIES: tuple[str, ...] = (
    "identity",
    "occupation",
    "location",
    "family",
    "pets",
    "hobby",
    "preference",
    "diet",
    "health",
    "education",
    "possession",
    "other",
)


@dataclass(frozen=True)
class Candidate:
    """One claim about the user.

    text: a short third-person statement ("The user has two dogs.").
    category: one of CATEGORIES.
    message_index: the index in the conversation of the user message that supports it.
    quote: a verbatim substring of that message (whitespace may differ).
    source: the name of the extractor that produced it.
    """

    text: str
    category: str
    message_index: int
    quote: str
    source: str

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}; expected one of {CATEGORIES}")


class Extractor(Protocol):
    name: str

    async def extract(self, conversation: Sequence[Mapping[str, str]]) -> list[Candidate]: ...


def normalize_space(text: str) -> str:
    return " ".join(text.split())


def quote_is_grounded(
    conversation: Sequence[Mapping[str, str]], message_index: int, quote: str
) -> bool:
    """True when message_index names a user message that contains quote verbatim.

    Only whitespace is normalized (runs collapse to one space, ends are trimmed): an LLM that
    reflows a line break is not inventing anything, but one that changes a word, its case or its
    punctuation is no longer quoting. Assistant messages never ground a fact about the user.
    """
    # Negative indices would silently count from the end; a candidate must name its message.
    if not 0 <= message_index < len(conversation):
        return False
    message = conversation[message_index]
    if message.get("role") != "user":
        return False
    needle = normalize_space(quote)
    return bool(needle) and needle in normalize_space(message.get("content", ""))


def grounded(
    conversation: Sequence[Mapping[str, str]], candidates: Iterable[Candidate]
) -> list[Candidate]:
    """The candidates whose quote passes quote_is_grounded, in their order."""
    return [c for c in candidates if quote_is_grounded(conversation, c.message_index, c.quote)]
