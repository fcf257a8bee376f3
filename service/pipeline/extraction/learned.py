"""The learned extractor: every clause of the user's messages, scored by a fine-tuned
cross-encoder for "a lasting fact about the user worth remembering", rewritten in the third
person.

Three steps, each simple on its own:
1. **Segment** (``clauses``): each user message into sentences, then clauses (at semicolons,
   spaced dashes, a conjunction or comma before a new first-person subject, "I", "my", "we",
   "our"). Every clause is a span of the message, so its text is a verbatim quote.
2. **Classify**: the ``extractor`` model (models/extractor, a MiniLM cross-encoder trained on the
   written corpus in datasets/extraction) scores (clause, context), where the context is the end
   of the assistant message the user answers and the user's message around the clause. It
   learned what the rule extractor's lists could not: a fact in passing inside a request ("can
   you suggest a dinner? I'm vegetarian"), a preference said colourfully ("opera puts me to
   sleep"), an answer to the assistant's question, and what is not a fact (requests, moods,
   hypotheticals, someone else's facts, sarcasm). Clauses at or over the card's threshold are
   kept.
3. **Rewrite** (person.py): the clause in the third person; a category from its head verb and
   keywords (the rule extractor's categorizer).
4. **Mentions** (``mentions``): a relative, pet or place named in passing ("a tablet for my 3
   kids", "any good ramen here in Busan?") gives "The user has 3 kids." or "The user lives in
   Busan." when no candidate already names it: often the one lasting fact in a request, and no
   clause states it as such.

Candidates then go to the verifier like any extractor's. ``with_rules`` adds the rule
extractor's candidates where no learned candidate quotes the same words (its agreement echoes,
"Me too!" after "I love hiking", are resolved against the partner's sentence, which a clause
rewrite cannot do). It is off by default: on the validation chats it changed F1 by less than
0.002 (0.694 with, 0.695 without, before the verifier) and it adds the echoes that SPC counts
as partner leaks. Without the extractor model the service falls back to the rules alone
(``extractors.choose``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from service.pipeline.extraction import lexicon as lx
from service.pipeline.extraction.person import CHAT_FILLERS, bare_word, third_person
from service.pipeline.extraction.rules import (
    _SENTENCE,
    RuleExtractor,
    _category,
    _content_key,
    _Head,
    _is_duplicate,
    _spans,
    _trim,
)
from service.pipeline.extraction.types import Candidate

NAME = "learned"
PARTNER_CHARS = 160
AROUND_CHARS = 180
MIN_CLAUSE_CHARS = 4
MAX_CLAUSE_CHARS = 240
SUBMIT_PAIRS = 256

_RSQUO, _NDASH, _MDASH = "\u2019", "\u2013", "\u2014"
_SPEAKER = rf"(?:i|i['{_RSQUO}]m|im|i['{_RSQUO}]ve|i['{_RSQUO}]d|i['{_RSQUO}]ll|my|we|we['{_RSQUO}]re|we['{_RSQUO}]ve|our|me and)\b"  # noqa: E501
_QUESTION = (
    r"(?:what|how|who|where|when|why|which|do|does|did|are|is|can|could|would|will|any|you"
    r"|pls|please|btw)\b"
)
_SEPARATOR = re.compile(
    r"\s*;\s*"
    rf"|\s+[-{_NDASH}{_MDASH}]+\s+"
    r"|,?\s+(?:and|but|so|because|although|though|plus|yet|or|cause|cuz|since|as)"
    rf"\s+(?={_SPEAKER})"
    rf"|,\s+(?={_SPEAKER}|{_QUESTION})"
    r"|\s*\n\s*"
    # Emoji end a thought in chat as a full stop does ("i love jazz 😭 she hates her carrier").
    r"|\s*[\U0001F300-\U0001FAFF\u2600-\u27BF]+[\uFE0F\U0001F3FB-\U0001F3FF]*\s*",
    re.IGNORECASE,
)

# Inside a clause: commas, brackets and conjunctions. A clause often carries a fact and more
# ("I'm 42 and honestly the writing is killing me"); its pieces are scored too, so the fact can
# be kept without the rest.
_PIECE = re.compile(
    r"\s*,\s*|\s*[()]\s*|\s+(?:and|but|so|tho|though|although|because|cause|cuz|which|plus)\s+",
    re.IGNORECASE,
)
MIN_PIECE_WORDS = 2
# A clause about someone else: it opens with another person's pronoun and never names the
# user ("she hates her carrier", "he was sleeping 5-6 hr stretches").
_OTHER_SUBJECTS = lx.words(
    "he she they it his her their its he's she's they're it's this that there there's these those"
)
_USER_WORDS = lx.words("i i'm im i've ive i'd i'll my me mine myself we we're we've our us")
# People outside the family: what they are or do is theirs, not the user's (the guideline stores
# family relations, never friends' or colleagues' facts; the rule extractor does the same).
_NOT_FAMILY = lx.words(
    """
    friend friends buddy buddies mate mates pal pals coworker coworkers co-worker colleague
    colleagues boss manager neighbour neighbor neighbours neighbors roommate roommates flatmate
    flatmates housemate classmate classmates teammate teammates landlord landlady
    """
)

# Relatives and pets named in passing ("a tablet for my 3 kids", "since my brother's deployment")
# and the place a user says they are in ("here in Busan"): what such a mention says about the user
# (they have three kids, a brother; they live in Busan) is often the one lasting fact of the
# sentence, and no clause states it as such.
_MODIFIER = (
    r"(?:\d+|two|three|four|five|six|little|big|baby|youngest|oldest|eldest|older|younger|new"
    r"|teenage|teen|twin|adopted|step)"
)
_RELATION = "|".join(
    sorted(map(re.escape, lx.RELATIVES | lx.PETS | {"gf", "bf"}), key=lambda w: -len(w))
)
_GONE = "|".join(sorted(lx.GONE))
_MENTION = re.compile(
    rf"\b(?:my|our)\s+((?:{_MODIFIER}\s+){{0,2}})({_RELATION})(?:['{_RSQUO}]s)?\b"
    rf"(?!\s+(?:{_GONE})\b)",
    re.IGNORECASE,
)
_HERE_IN = re.compile(r"\bhere in ((?:the\s+)?[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+){0,2})")
_PLURAL_NOUNS = frozenset({"children", "grandchildren", "grandkids", "twins"})

Pair = tuple[str, str]
Scorer = Callable[[Sequence[Pair]], Awaitable[NDArray[np.float32]]]


@dataclass(frozen=True)
class Clause:
    """A span [start, end) of user message ``message_index``, with the classifier's context."""

    message_index: int
    start: int
    end: int
    text: str
    context: str


def _flat(text: str) -> str:
    return " ".join(text.split())


def _context(partner: str | None, content: str, start: int, end: int) -> str:
    before = _flat(content[max(0, start - AROUND_CHARS) : start])
    after = _flat(content[end : end + AROUND_CHARS])
    clause = _flat(content[start:end])
    user = f"{'… ' if start > AROUND_CHARS else ''}{before} [{clause}] {after}"
    user = user.strip() + (" …" if end + AROUND_CHARS < len(content) else "")
    if partner:
        tail = _flat(partner)
        if len(tail) > PARTNER_CHARS:
            tail = "… " + tail[-PARTNER_CHARS:].split(" ", 1)[-1]
        return f"assistant: {tail} | user: {user}"
    return f"user: {user}"


def clauses(conversation: Sequence[Mapping[str, str]]) -> list[Clause]:
    """Every clause of every user message, in order."""
    out: list[Clause] = []
    for index, message in enumerate(conversation):
        if message.get("role") != "user":
            continue
        content = message.get("content", "") or ""
        partner = (
            conversation[index - 1].get("content", "")
            if index > 0 and conversation[index - 1].get("role") == "assistant"
            else None
        )
        seen: set[tuple[int, int]] = set()
        for match in _SENTENCE.finditer(content):
            s_start, s_end = match.span()
            for a, b in _spans(content, _SEPARATOR, s_start, s_end):
                start, end = _trim(content, a, b)
                spans = [(start, end)]
                pieces = [_trim(content, x, y) for x, y in _spans(content, _PIECE, start, end)]
                if len(pieces) > 1:
                    spans += [
                        p for p in pieces if len(content[p[0] : p[1]].split()) >= MIN_PIECE_WORDS
                    ]
                for start, end in spans:
                    start, end = _drop_fillers(content, start, end)
                    text = content[start:end]
                    if (start, end) in seen or " " not in text:
                        continue
                    if not MIN_CLAUSE_CHARS <= len(text) <= MAX_CLAUSE_CHARS:
                        continue
                    seen.add((start, end))
                    context = _context(partner, content, start, end)
                    out.append(Clause(index, start, end, text, context))
    return out


def _drop_fillers(content: str, start: int, end: int) -> tuple[int, int]:
    while True:
        words = content[start:end].split()
        if len(words) < 2:
            return start, end
        last = words[-1]
        bare = bare_word(last)
        # Chat fillers at the end carry nothing a stored fact needs ("im a roofer lol").
        if bare and bare not in CHAT_FILLERS and any(ch.isalnum() for ch in last):
            return start, end
        cut = content.rfind(last, start, end)
        start, end = _trim(content, start, cut)


def about_someone_else(clause: str) -> bool:
    """A clause about another person: it opens with their pronoun and never names the user
    ("she hates her carrier"), or with "my"/"our" and a friend, colleague or neighbour ("my
    coworker is obsessed w plants", "my mate says creatine makes u go bald")."""
    words = [bare_word(w) for w in clause.split()]
    if not words:
        return False
    if words[0] in _OTHER_SUBJECTS and not (set(words) & _USER_WORDS):
        return True
    head = words[1:3] if words[0] in {"my", "our"} else []
    return bool(head) and (
        head[0] in _NOT_FAMILY or (head[0] in {"best", "old", "close"} and head[1:] == ["friend"])
    )


@dataclass(frozen=True)
class Mention:
    """A relative, pet or place named in passing, and the fact it gives about the user."""

    message_index: int
    quote: str
    text: str
    category: str
    key: str  # the word a candidate that already covers the fact would contain


def mentions(conversation: Sequence[Mapping[str, str]]) -> list[Mention]:
    """ "my 3 kids" -> "The user has 3 kids.", "our new puppy" -> "The user has a new puppy.",
    "here in Busan" -> "The user lives in Busan." Relatives and pets only when nothing says they
    are gone ("my dog died"), never friends' ("my friend's kids" does not match), and nothing
    from a hypothetical sentence ("if it were my kid")."""
    out: list[Mention] = []
    for index, message in enumerate(conversation):
        if message.get("role") != "user":
            continue
        content = message.get("content", "") or ""
        for sentence in _SENTENCE.finditer(content):
            if {bare_word(w) for w in sentence.group(0).split()} & lx.HYPOTHETICAL:
                continue
            out += _sentence_mentions(index, sentence.group(0))
    return out


def _sentence_mentions(index: int, sentence: str) -> list[Mention]:
    out: list[Mention] = []
    for match in _MENTION.finditer(sentence):
        modifiers, noun = match.group(1).split(), match.group(2)
        words = [*modifiers, noun]
        plural = noun.lower().endswith("s") or noun.lower() in _PLURAL_NOUNS
        if not plural and not (modifiers and modifiers[0][0].isdigit()):
            words.insert(0, "an" if words[0][:1].lower() in "aeiou" else "a")
        category = "pets" if noun.lower() in lx.PETS else "family"
        quote = sentence[match.start() : match.end(2)]
        text = "The user has " + " ".join(words) + "."
        out.append(Mention(index, quote, text, category, noun.lower()))
    for match in _HERE_IN.finditer(sentence):
        place = match.group(1)
        text = f"The user lives in {place}."
        out.append(Mention(index, match.group(0), text, "location", place.lower()))
    return out


def _covered(mention: Mention, texts: Sequence[str]) -> bool:
    """A candidate already names the relative, pet or place."""
    key = mention.key
    singular = key[:-1] if key.endswith("s") and mention.category != "location" else key
    pattern = re.compile(rf"\b(?:{re.escape(key)}|{re.escape(singular)})\b", re.IGNORECASE)
    return any(pattern.search(t) for t in texts)


def category_of(text: str) -> str:
    """The rule extractor's categorizer, given the head verb of a third-person statement."""
    words = [bare_word(w) for w in text.split()]
    verb = ""
    if len(words) > 2 and words[:2] == ["the", "user"]:
        rest = [w for w in words[2:] if w not in lx.ADVERBS]
        verb = rest[0] if rest else ""
    lemma = {"is": "be", "was": "be", "has": "have", "had": "have", "does": "do"}.get(verb)
    if lemma is None:
        lemma = verb[:-3] + "y" if verb.endswith("ies") else verb.removesuffix("s")
    head = _Head(text, [], lemma, copula=lemma == "be")
    return _category(head, text)


class LearnedExtractor:
    """Clauses kept by the extractor model, rewritten as third-person candidates."""

    name = NAME

    def __init__(self, score: Scorer, threshold: float, *, with_rules: bool = False) -> None:
        self._score = score
        self.threshold = threshold
        self.with_rules = with_rules

    async def scored(self, conversation: Sequence[Mapping[str, str]]) -> list[tuple[Clause, float]]:
        found = clauses(conversation)
        pairs = [(c.text, c.context) for c in found]
        scores: list[float] = []
        # A long conversation is submitted in parts, so that one request never asks the
        # model's micro-batcher for more than a bounded share of its queue.
        for at in range(0, len(pairs), SUBMIT_PAIRS):
            scores += [float(x) for x in await self._score(pairs[at : at + SUBMIT_PAIRS])]
        return list(zip(found, scores, strict=True))

    async def extract(self, conversation: Sequence[Mapping[str, str]]) -> list[Candidate]:
        candidates: list[Candidate] = []
        keys: list[frozenset[str]] = []
        spans: list[tuple[int, int, int]] = []
        kept = [
            c
            for c, score in await self.scored(conversation)
            if score >= self.threshold and not about_someone_else(c.text)
        ]
        # Overlapping clauses (a clause and its pieces) that all pass: the shortest wins, so
        # "im a roofer" is stored rather than "im a roofer so no surprise"; pieces that do not
        # overlap each other are all kept.
        chosen: list[Clause] = []
        for clause in sorted(kept, key=lambda c: c.end - c.start):
            if not any(
                o.message_index == clause.message_index
                and o.start < clause.end
                and clause.start < o.end
                for o in chosen
            ):
                chosen.append(clause)
        for clause in sorted(chosen, key=lambda c: (c.message_index, c.start)):
            text = third_person(clause.text)
            key = _content_key(text)
            if _is_duplicate(key, keys):
                continue
            keys.append(key)
            spans.append((clause.message_index, clause.start, clause.end))
            candidates.append(
                Candidate(text, category_of(text), clause.message_index, clause.text, NAME)
            )
        for mention in mentions(conversation):
            if _covered(mention, [c.text for c in candidates]):
                continue
            keys.append(_content_key(mention.text))
            candidates.append(
                Candidate(
                    mention.text, mention.category, mention.message_index, mention.quote, NAME
                )
            )
        if self.with_rules:
            for c in RuleExtractor().extract_sync(conversation):
                if _overlaps(conversation, c, spans) or _is_duplicate(_content_key(c.text), keys):
                    continue
                keys.append(_content_key(c.text))
                candidates.append(c)
        return candidates


def _overlaps(
    conversation: Sequence[Mapping[str, str]], c: Candidate, spans: list[tuple[int, int, int]]
) -> bool:
    content = conversation[c.message_index].get("content", "") or ""
    at = content.find(c.quote)
    if at < 0:
        return False
    end = at + len(c.quote)
    return any(i == c.message_index and a < end and at < b for i, a, b in spans)
