"""A user's own words as a third-person statement: "I can't stand horror movies" ->
"The user can't stand horror movies.".

The learned extractor (learned.py) decides *which* clause states a fact; this module only
rewrites it, so it accepts any clause and never filters. It keeps every word the user wrote and
changes only the speaker: the subject and its auxiliary ("I'm" -> "The user is", "I've got" ->
"The user has", "I don't" -> "The user doesn't", "we're" -> "The user is"), the head verb's
agreement ("I always pick" -> "The user always picks"), and the speaker's pronouns later on
("my" -> "their", "me" -> "them"). A clause without a subject gets one ("been vegan since 2015"
-> "The user has been vegan since 2015."; "allergic to shellfish" -> "The user is allergic to
shellfish."); one whose only first-person word sits inside it is rewritten in place ("Knitting
is my passion" -> "Knitting is the user's passion."). A clause that names no one, such as an
answer to the assistant's question ("two boys, 5 and 8"), is stated as "The user: …".
"""

from __future__ import annotations

import re

from service.pipeline.extraction import lexicon as lx
from service.pipeline.extraction.rules import _bare, _finish, _rewrite_rest, _third_person

# Subject + auxiliary at the start of a clause -> the third-person head and how many tokens it
# used. Checked longest first.
_HEADS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("i", "am"), "The user is"),
    (("i", "was"), "The user was"),
    (("i've", "got"), "The user has"),
    (("ive", "got"), "The user has"),
    (("i", "have", "got"), "The user has"),
    (("i", "have"), "The user has"),
    (("i", "has"), "The user has"),
    (("i", "do"), "The user does"),
    (("i", "don't"), "The user doesn't"),
    (("i", "dont"), "The user doesn't"),
    (("i", "do", "not"), "The user does not"),
    (("i'm",), "The user is"),
    (("im",), "The user is"),
    (("i've",), "The user has"),
    (("ive",), "The user has"),
    (("i'd",), "The user would"),
    (("i'll",), "The user will"),
    (("we", "are"), "The user is"),
    (("we", "were"), "The user was"),
    (("we", "have"), "The user has"),
    (("we", "do"), "The user does"),
    (("we", "don't"), "The user doesn't"),
    (("we're",), "The user is"),
    (("were",), "The user is"),
    (("we've",), "The user has"),
)
# Words after "I" that are already right in the third person ("I can't", "I never", "I used to").
_KEEP_AFTER_SUBJECT = lx.words(
    """
    can can't cannot cant could couldn't will won't would wouldn't should shouldn't must might
    may had didn't didnt did used got get quit moved grew started stopped became went was
    """
)
# Adverbs that can stand between the subject and the verb; the verb after them is conjugated.
_ADVERBS = lx.VERB_ADVERBS | lx.words("no longer")
# Irregular past forms: a verb that is already past stays as it is.
_PAST = lx.words(
    """
    was were had did went grew got made took came became began bought brought caught drove ate
    fell felt found gave knew left lost met paid put ran said saw sold sent spent stood taught
    thought told understood woke won wore wrote rode swam sang sat slept spoke broke chose
    forgot hid held kept led lent lit meant read set shook shot shut split spread stuck struck
    swore threw tore built burnt learnt dreamt quit
    """
)
# Clause openers without a subject that take "The user is" ("allergic to cats", "a nurse").
_COPULA_OPENERS = lx.words(
    """
    a an not allergic intolerant married single divorced widowed engaged retired pregnant vegan
    vegetarian pescatarian diabetic sober self-employed unemployed freelance left-handed
    right-handed big huge total massive lifelong originally currently still from into terrible
    bad good great awful obsessed addicted afraid scared terrified severely mildly super very
    pretty really quite always never
    """
)
_SUBJECTLESS_VERBS = lx.VERBS_BASE | lx.words(
    """
    have own need hate love like prefer avoid speak teach study work live grow keep run
    """
)
_LEADING_JUNK = lx.words("and but so also plus because cause cuz coz since though then or")
_AS_A = re.compile(r"^as (?:a|an)\s+", re.IGNORECASE)
_WE_PRONOUNS = {"our": "their", "ours": "theirs", "us": "them", "we": "they"}


def _conjugate(token: str) -> str:
    bare = _bare(token)
    core = token.strip(".,!?;:")
    if (
        not bare.isalpha()
        or bare in _PAST
        or bare.endswith("ed")
        or bare in _KEEP_AFTER_SUBJECT
        or (bare.endswith("s") and not bare.endswith("ss"))
    ):
        return token
    return token.replace(core, _third_person(core), 1)


def _strip_leading(tokens: list[str]) -> list[str]:
    while len(tokens) > 1 and _bare(tokens[0]) in (_LEADING_JUNK | lx.LEADING_MARKERS):
        tokens = tokens[1:]
    return tokens


def _rest(tokens: list[str]) -> list[str]:
    """Later pronouns of the speaker in the third person ("my" -> "their", "our" -> "their")."""
    out = _rewrite_rest(tokens, conjugate_coordinated=True)
    fixed = []
    for token in out:
        bare = _bare(token)
        core = token.strip(".,!?;:\"'()")
        if bare in _WE_PRONOUNS and core:
            token = token.replace(core, _WE_PRONOUNS[bare], 1)
        fixed.append(token)
    return fixed


def _in_place(tokens: list[str]) -> list[str] | None:
    """A clause whose first-person word sits inside it: the first one names the user."""
    for i, token in enumerate(tokens):
        bare = _bare(token)
        core = token.strip(".,!?;:\"'()")
        if bare in {"my", "our"}:
            named = "the user's"
        elif bare in {"me", "us"}:
            named = "the user"
        else:
            continue
        head = [*tokens[:i], token.replace(core, named, 1)]
        return head + _rest(tokens[i + 1 :])
    return None


def third_person(clause: str) -> str:
    """The clause as a statement about the user, ending with a period."""
    tokens = _strip_leading(clause.split())
    if not tokens:
        return "The user."
    text = " ".join(tokens)
    if _AS_A.match(text):  # "as a nurse on nights" -> "The user is a nurse on nights."
        tokens = ["The", "user", "is", *text[3:].split()]
        return _finish(" ".join(tokens[:3]), _rest(tokens[3:]))
    bare = [_bare(t) for t in tokens]
    for words, head in _HEADS:
        if tuple(bare[: len(words)]) == words:
            return _finish(head, _rest(tokens[len(words) :]))
    if bare[0] in {"i", "we"}:
        rest = tokens[1:]
        at = 0
        while at < len(rest) and _bare(rest[at]) in _ADVERBS:
            at += 1
        if at < len(rest) and _bare(rest[at]) not in _KEEP_AFTER_SUBJECT:
            rest = [*rest[:at], _conjugate(rest[at]), *rest[at + 1 :]]
        return _finish("The user", _rest(rest))
    if bare[0] in {"my", "our"}:
        return _finish("The user's", _rest(tokens[1:]))
    if bare[0] == "me" and len(bare) > 2 and bare[1] == "and":
        # "me and my wife love hiking" -> "The user and their wife love hiking."
        return _finish("The user", _rest(tokens[1:]))
    placed = _in_place(tokens)
    if placed is not None:
        first = placed[0][:1].upper() + placed[0][1:]
        return _finish(first, placed[1:])
    if bare[0] == "been":
        return _finish("The user has", _rest(tokens))
    if bare[0] in _COPULA_OPENERS:
        return _finish("The user is", _rest(tokens))
    if bare[0] in _SUBJECTLESS_VERBS or bare[0] in _PAST or bare[0].endswith("ed"):
        return _finish("The user", _rest([_conjugate(tokens[0]), *tokens[1:]]))
    return _finish("The user:", _rest(tokens))
