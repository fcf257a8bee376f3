"""What the per-turn extraction job reads: the user's newest message, with the assistant message
before it as context (so "yes, for ten years" can be understood).

Only the new turn is read, not the whole history the caller sends each time: earlier turns were
extracted when they were new, and re-reading them on every turn would pile duplicate evidence
onto the same attributes. Evidence indexes are mapped back to the caller's message list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from service.pipeline.extract import Judged

EXTRACT_KIND = "extract"


def turn_window(messages: Sequence[Mapping[str, str]]) -> tuple[list[dict[str, str]], int]:
    """The messages to extract from and the caller's index of the first of them."""
    last = len(messages) - 1
    start = last - 1 if last >= 1 and messages[last - 1].get("role") == "assistant" else last
    window = [
        {"role": m.get("role", "user"), "content": m.get("content", "")} for m in messages[start:]
    ]
    return window, start


def payload(messages: Sequence[Mapping[str, str]], extractor: str | None) -> dict[str, Any]:
    window, offset = turn_window(messages)
    return {"conversation": window, "offset": offset, "extractor": extractor}


def shift(judged: Sequence[Judged], offset: int) -> list[Judged]:
    """Evidence indexes relative to the caller's whole message list."""
    return [
        dataclasses.replace(
            j,
            candidate=dataclasses.replace(
                j.candidate, message_index=j.candidate.message_index + offset
            ),
        )
        for j in judged
    ]
