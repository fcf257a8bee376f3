"""How the verifier sees a conversation.

A conversation runs far past what a small cross-encoder reads well (SPC conversations are ~300
tokens, chat transcripts more), and evidence for a fact about the user is a user's *own* message.
So the verifier scores the attribute against one window per user message: that message, preceded
by the end of the partner's message it answers (so "me too" or "yes, for ten years" can be read
in context), with explicit speaker tags so that words said only by the partner can be learned to
be no evidence. The conversation-level score is the maximum over windows: a fact is supported if
some message of the user supports it, and the best window also names the evidence message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PARTNER_CONTEXT_CHARS = 240
USER_MESSAGE_CHARS = 600


@dataclass(frozen=True)
class Window:
    message_index: int
    text: str


def _tail(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    space = cut.find(" ")
    return "… " + (cut[space + 1 :] if 0 <= space < 40 else cut)


def _head(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " …"


def user_windows(conversation: Sequence[Mapping[str, str]]) -> list[Window]:
    windows = []
    for index, message in enumerate(conversation):
        if message.get("role") != "user" or not message.get("content", "").strip():
            continue
        parts = []
        if index > 0 and conversation[index - 1].get("role") != "user":
            parts.append(
                "other: " + _tail(conversation[index - 1]["content"], PARTNER_CONTEXT_CHARS)
            )
        parts.append("user: " + _head(message["content"], USER_MESSAGE_CHARS))
        windows.append(Window(index, "\n".join(parts)))
    return windows


QUOTE_PARTNER_CHARS = 120
QUOTE_USER_CHARS = 320


def quote_window(
    conversation: Sequence[Mapping[str, str]], message_index: int, quote: str
) -> Window:
    """The window for a candidate that cites its evidence: the user message cut around the
    quote, with the end of the partner's message before it.

    The verifier reads at most 128 tokens of (attribute, window); a long user message puts the
    cited sentence past that limit, and the verifier then judges words that do not contain the
    evidence. Centering on the quote keeps the evidence and its surroundings (a negation or an
    "if" just before it) inside what the model reads.
    """
    message = " ".join(conversation[message_index].get("content", "").split())
    needle = " ".join(quote.split())
    at = message.find(needle)
    if at < 0 or len(message) <= QUOTE_USER_CHARS:
        user = _head(message, QUOTE_USER_CHARS)
    else:
        spare = max(0, QUOTE_USER_CHARS - len(needle))
        start = max(0, at - spare // 2)
        end = min(len(message), start + max(QUOTE_USER_CHARS, len(needle)))
        start = max(0, end - max(QUOTE_USER_CHARS, len(needle)))
        # Whole words only: step to the next space after a cut start, back to one before a cut end.
        if start > 0:
            space = message.find(" ", start)
            start = space + 1 if 0 <= space < at else start
        if end < len(message):
            space = message.rfind(" ", at + len(needle), end)
            end = space if space > 0 else end
        user = (
            ("… " if start > 0 else "") + message[start:end] + (" …" if end < len(message) else "")
        )
    parts = []
    if message_index > 0 and conversation[message_index - 1].get("role") != "user":
        partner = conversation[message_index - 1].get("content", "")
        parts.append("other: " + _tail(partner, QUOTE_PARTNER_CHARS))
    parts.append("user: " + user)
    return Window(message_index, "\n".join(parts))
