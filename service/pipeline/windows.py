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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PARTNER_CONTEXT_CHARS = 240
USER_MESSAGE_CHARS = 600
# A message up to this long is one window; a longer one is read in chunks of whole sentences.
SINGLE_WINDOW_CHARS = 420
CHUNK_CHARS = 320
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


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


def _sentences(text: str) -> list[str]:
    """Sentence-ish pieces (split after . ! ? and line breaks), each at most CHUNK_CHARS."""
    pieces = [p for p in SENTENCE_END.split(text) if p.strip()]
    out: list[str] = []
    for piece in pieces:
        piece = " ".join(piece.split())
        while len(piece) > CHUNK_CHARS:
            cut = piece.rfind(" ", 0, CHUNK_CHARS)
            cut = cut if cut > CHUNK_CHARS // 2 else CHUNK_CHARS
            out.append(piece[:cut])
            piece = piece[cut:].strip()
        if piece:
            out.append(piece)
    return out


def message_chunks(text: str) -> list[str]:
    """A user message as the verifier reads it: whole when short, else overlapping chunks.

    The verifier reads 128 tokens of (attribute, window), about 400 characters of message: a
    fact in the middle of a long message would otherwise never be read. Chunks are runs of
    whole sentences of at most CHUNK_CHARS, each starting with the last sentence of the one
    before, so a fact that spans a sentence break is read whole in one of them.
    """
    flat = " ".join(text.split())
    if len(flat) <= SINGLE_WINDOW_CHARS:
        return [flat]
    sentences = _sentences(text)
    chunks: list[str] = []
    start = 0
    while start < len(sentences):
        end, size = start, 0
        while end < len(sentences) and (end == start or size + len(sentences[end]) < CHUNK_CHARS):
            size += len(sentences[end]) + 1
            end += 1
        chunks.append(" ".join(sentences[start:end]))
        if end >= len(sentences):
            break
        start = end - 1 if end - 1 > start else end
    return chunks


def user_windows(conversation: Sequence[Mapping[str, str]]) -> list[Window]:
    """One window per user message (several for a long one, see ``message_chunks``), the first
    preceded by the end of the partner message it answers."""
    windows = []
    for index, message in enumerate(conversation):
        if message.get("role") != "user" or not message.get("content", "").strip():
            continue
        context = ""
        if index > 0 and conversation[index - 1].get("role") != "user":
            context = "other: " + _tail(conversation[index - 1]["content"], PARTNER_CONTEXT_CHARS)
        for k, chunk in enumerate(message_chunks(message["content"])):
            parts = [context] if context and k == 0 else []
            parts.append("user: " + _head(chunk, USER_MESSAGE_CHARS))
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
