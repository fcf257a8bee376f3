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

Every change of grammatical person in the service lives here: ``third_person`` (a user's clause
-> a stored statement, for the extractors), ``first_person`` (a stored statement -> the user's
words, for the verifier) and ``neutral`` (either form without its person markers, to match
extracted facts against gold ones in evaluation), with the word helpers the rule extractor shares.
"""

from __future__ import annotations

import re
from typing import Literal

from service.pipeline.extraction import lexicon as lx

# Typographic quotes and dashes are written as escapes so that the source stays ASCII-readable.
RSQUO, LSQUO, NDASH, MDASH = "\u2019", "\u2018", "\u2013", "\u2014"
APOSTROPHES = str.maketrans({RSQUO: "'", LSQUO: "'"})
EDGE = ".,!?;:\"()[]{}…*~_'“”"

Person = Literal["first", "third"]


def bare_word(token: str) -> str:
    return token.translate(APOSTROPHES).strip(EDGE).lower()


def verb_third_person(verb: str) -> str:
    lower = verb.lower()
    if lower in lx.IRREGULAR_THIRD:
        out = lx.IRREGULAR_THIRD[lower]
    elif lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        out = lower + "es"
    elif len(lower) > 2 and lower.endswith("y") and lower[-2] not in "aeiou":
        out = lower[:-1] + "ies"
    else:
        out = lower + "s"
    # Keep the user's emphasis: "I LOVE pizza" -> "LOVES".
    return out.upper() if verb.isupper() and len(verb) > 1 else out


def rewrite_rest(tokens: list[str], *, conjugate_coordinated: bool) -> list[str]:
    """The words after the head, with the speaker's pronouns in the third person.

    "I" later in the clause becomes "they" (so "because I am" becomes "because they are", which
    agrees without further rules). When the head verb was conjugated, a verb coordinated with it
    ("prefer structure and avoid drama") is conjugated too, unless it sits inside an infinitive
    ("love to cook and bake").
    """
    out: list[str] = []
    seen_to = False
    previous = ""
    after_conjunction = False
    for position, token in enumerate(tokens):
        bare = bare_word(token)
        core = token.strip(EDGE)
        replacement: str | None = None
        if bare == "myself" and (position == len(tokens) - 1 or token.endswith(",")):
            # Emphatic "myself" ("I'm a fan of jazz myself") adds nothing in the third person.
            if out and token.endswith(","):
                out[-1] += ","
            continue
        if previous == "i" and bare in {"am", "was"}:
            replacement = {"am": "are", "was": "were"}[bare]
        elif bare in lx.SPEAKER_PRONOUNS and (bare != "i" or core in {"I", "i"}):
            replacement = lx.SPEAKER_PRONOUNS[bare]
            # A capital "My" starts a sentence and keeps its capital as "Their"; "I", "I'm" and
            # "I've" are capitalised wherever they stand, so theirs says nothing.
            if core[:1].isupper() and not bare.startswith("i"):
                replacement = replacement.capitalize()
        elif (
            conjugate_coordinated
            and not seen_to
            and after_conjunction
            and bare in lx.VERBS_BASE
            and bare not in lx.IRREGULAR_THIRD
        ):
            replacement = verb_third_person(core)
        if bare == "to":
            seen_to = True
        if replacement is not None and core:
            token = token.replace(core, replacement, 1)
        out.append(token)
        # "and only listen": adverbs between the conjunction and the verb keep it coordinated.
        after_conjunction = bare in {"and", "or", "but"} or (
            after_conjunction and bare in lx.ADVERBS
        )
        previous = bare
    return out


def finish(head: str, rest: list[str]) -> str:
    words = list(rest)
    # Agreement words ("too", "as well") say the user agrees with someone; the fact is the rest.
    while words:
        last = bare_word(words[-1])
        if last in {"too", "also"}:
            words.pop()
        elif last == "well" and len(words) > 1 and bare_word(words[-2]) == "as":
            del words[-2:]
        else:
            break
    text = " ".join([head, *words]).strip()
    text = re.sub(rf"[\s,;:\-{NDASH}{MDASH}]+$", "", text.rstrip(".!?…"))
    return text + "."


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
    # "X and I are" (the clause starts at the user): the user is one of them.
    (("i", "are"), "The user is"),
    (("i", "were"), "The user was"),
    (("i", "r"), "The user is"),
    (("we", "are"), "The user is"),
    (("we", "were"), "The user was"),
    (("we", "have"), "The user has"),
    (("we", "do"), "The user does"),
    (("we", "don't"), "The user doesn't"),
    (("we're",), "The user is"),
    # Texting: "i m", "we r", "we've got".
    (("i", "m"), "The user is"),
    (("we", "r"), "The user is"),
    (("we've", "got"), "The user has"),
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
_ADVERBS = lx.VERB_ADVERBS | lx.words("no longer already")
# Verbs ending in "-ly" ("I fly", "I rely on"), which the "-ly" rule of _adverb must not pass over.
_LY_VERBS = lx.words("fly apply reply rely supply multiply comply imply ally rally tally bully")


def _adverb(token: str) -> bool:
    """A word between the subject and its verb, passed over so that the verb after it changes
    person: a listed adverb, or an "-ly" word that is not a verb ("finally", "nearly")."""
    bare = bare_word(token)
    return bare in _ADVERBS or (bare.endswith("ly") and len(bare) > 4 and bare not in _LY_VERBS)


def _verb_at(words: list[str]) -> int:
    """Where the verb stands after leading adverbs ("usually prefers", "no longer eats",
    "already have"); the last word at the latest."""
    at = 0
    while at < len(words) - 1 and _adverb(words[at]):
        at += 1
    return at


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
    have own need hate love like prefer avoid speak teach study work live grow keep run earn
    """
)
# Chat fillers that close off what was said before them ("not much lol im ...").
CHAT_FILLERS = lx.words(
    "lol lmao haha hahaha tbh rn fr ngl tho though btw honestly xd xo smh imo idk lmk pls"
)
_LEADING_JUNK = lx.words("and but so also plus because cause cuz coz since though then or")
_AS_A = re.compile(r"^as (?:a|an)\s+", re.IGNORECASE)
_SUBJECTS = lx.words("i i'm im i've ive i'd we we're we've")
_WE_PRONOUNS = {"our": "their", "ours": "theirs", "us": "them", "we": "they"}


def _conjugate(token: str) -> str:
    bare = bare_word(token)
    core = token.strip(".,!?;:")
    if (
        not bare.isalpha()
        or bare in _PAST
        or bare.endswith("ed")
        or bare in _KEEP_AFTER_SUBJECT
        or (bare.endswith("s") and not bare.endswith("ss"))
    ):
        return token
    return token.replace(core, verb_third_person(core), 1)


def _strip_leading(tokens: list[str]) -> list[str]:
    while len(tokens) > 1 and bare_word(tokens[0]) in (_LEADING_JUNK | lx.LEADING_MARKERS):
        tokens = tokens[1:]
    return tokens


def _rest(tokens: list[str]) -> list[str]:
    """Later pronouns of the speaker in the third person ("my" -> "their", "our" -> "their")."""
    out = rewrite_rest(tokens, conjugate_coordinated=True)
    fixed = []
    for token in out:
        bare = bare_word(token)
        core = token.strip(".,!?;:\"'()")
        if bare in _WE_PRONOUNS and core:
            token = token.replace(core, _WE_PRONOUNS[bare], 1)
        fixed.append(token)
    return fixed


def _in_place(tokens: list[str]) -> list[str] | None:
    """A clause whose first-person word sits inside it: the first one names the user."""
    for i, token in enumerate(tokens):
        bare = bare_word(token)
        core = token.strip(".,!?;:\"'()")
        if bare in {"my", "our"}:
            named = "the user's"
        elif bare in {"me", "us"}:
            named = "the user"
        elif bare in _SUBJECTS and i > 0:
            # "At 67 I'm finally doing my first solo trip": the speaker is the subject of the
            # rest, which is rewritten as a clause of its own after the words before it.
            rest = third_person(" ".join(tokens[i:])).removesuffix(".").split()
            if bare_word(tokens[i - 1]) in CHAT_FILLERS:
                # "not much lol im the oldest of 4": the words before the filler answered
                # something else.
                return rest
            return [*tokens[:i], rest[0].lower(), *rest[1:]]
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
        return finish(" ".join(tokens[:3]), _rest(tokens[3:]))
    bare = [bare_word(t) for t in tokens]
    for words, head in _HEADS:
        if tuple(bare[: len(words)]) == words:
            return finish(head, _rest(tokens[len(words) :]))
    if bare[0] in {"i", "we"}:
        rest = tokens[1:]
        at = 0
        while at < len(rest) and _adverb(rest[at]):
            at += 1
        if at < len(rest) and bare_word(rest[at]) not in _KEEP_AFTER_SUBJECT:
            rest = [*rest[:at], _conjugate(rest[at]), *rest[at + 1 :]]
        return finish("The user", _rest(rest))
    if bare[0] in {"my", "our"}:
        return finish("The user's", _rest(tokens[1:]))
    if bare[0] == "me" and len(bare) > 2 and bare[1] == "and":
        # "me and my wife love hiking" -> "The user and their wife love hiking."
        return finish("The user", _rest(tokens[1:]))
    opener = _subjectless(tokens)
    if opener is not None:
        # "already have my full G", "have never read a note of music in my life"
        return finish("The user", _rest(opener))
    placed = _in_place(tokens)
    if placed is not None:
        first = placed[0][:1].upper() + placed[0][1:]
        return finish(first, placed[1:])
    if bare[0] == "been":
        return finish("The user has", _rest(tokens))
    if bare[0] in _COPULA_OPENERS:
        return finish("The user is", _rest(tokens))
    if bare[0] in _PAST or bare[0].endswith("ed"):
        return finish("The user", _rest(tokens))
    return finish("The user:", _rest(tokens))


# After a verb-like first word, these make it a noun subject ("work is crazy", "love is blind").
_NOT_A_VERB_AFTER = lx.words("is was are were has had isn't wasn't 's can will")


def _subjectless(tokens: list[str]) -> list[str] | None:
    """A clause that drops its subject and opens with the user's verb, possibly after adverbs
    ("love jazz", "already have my full G", "never eat pork"): the tokens with that verb
    conjugated, else None. A verb followed by "is" or "was" is a noun ("work is crazy")."""
    at = _verb_at(tokens)
    verb = bare_word(tokens[at])
    if verb not in _SUBJECTLESS_VERBS:
        return None
    if at + 1 < len(tokens):
        following = bare_word(tokens[at + 1])
        if following in _NOT_A_VERB_AFTER or following.endswith("'s"):
            return None
    return [*tokens[:at], _conjugate(tokens[at]), *tokens[at + 1 :]]


# The verifier was trained on first-person persona sentences ("I have two dogs."), while the
# service states attributes in the third person ("The user has two dogs."). Scoring the
# first-person form keeps its input in the distribution it learned: on 177 rule candidates from
# prefeval_implicit conversations it raised the supported share from 32.2% to 37.9%
# (bench/verifier_windows.py, docs/extraction.md).
_IRREGULAR = {"is": "am", "has": "have", "does": "do", "was": "was", "isn't": "am not",
              "doesn't": "don't", "hasn't": "haven't", "wasn't": "wasn't"}  # fmt: skip
_SUBJECT = re.compile(r"^the user(?:'s|\u2019s)?\b", re.IGNORECASE)
_PRONOUNS = (
    (re.compile(r"\btheir\b"), "my"),
    (re.compile(r"\bthemselves\b|\bthemself\b"), "myself"),
    (re.compile(r"\bthem\b"), "me"),
)


def _base_form(token: str) -> str:
    """The first-person form of a third-person verb, punctuation after it kept ("smokes." ->
    "smoke.": a verb that ends the statement carries its period)."""
    verb = token.rstrip(".,!?;:")
    tail = token[len(verb) :]
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower] + tail
    if lower.endswith("ies") and len(lower) > 4:
        return verb[:-3] + "y" + tail
    if lower.endswith(("ches", "shes", "sses", "xes", "zes", "oes")):
        return verb[:-2] + tail
    if lower.endswith("s") and not lower.endswith(("ss", "us", "is")):
        return verb[:-1] + tail
    return token


def first_person(text: str) -> str:
    """ "The user usually prefers tea." -> "I usually prefer tea."; other texts unchanged
    (an attribute already in the first person, or one with another subject)."""
    match = _SUBJECT.match(text.strip())
    if match is None:
        return text
    rest = text.strip()[match.end() :].lstrip()
    if match.group(0).lower().endswith("s"):  # "The user's job is ..." -> "My job is ..."
        head = "My " + rest
    else:
        words = rest.split(" ")
        # Adverbs may stand between subject and verb ("usually prefers", "always picks",
        # "sometimes works", "no longer eats"): the verb after them takes the first person.
        at = _verb_at(words)  # "no longer" is two adverbs
        if at < len(words) and words[at]:
            words[at] = _base_form(words[at])
        head = "I " + " ".join(words)
    for pattern, replacement in _PRONOUNS:
        head = pattern.sub(replacement, head)
    return head


# (pattern, replacement), applied in order to lower-cased text. The subject and its auxiliary go
# first so that "i am" never leaves a stray "am" behind.
_FIRST_PERSON: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"\b(?:i am|i'm|im)\b", " "),
        (r"\bi was\b", " was "),
        (r"\b(?:i have|i've)(?: got)?\b", " have "),
        (r"\bi had\b", " had "),
        (r"\b(?:i do not|i don't|i dont)\b", " do not "),
        (r"\bi do\b", " do "),
        (r"\b(?:i|me|my|mine|myself)\b", " "),
    )
)
_THIRD_PERSON: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"\b(?:the )?user's\b", " "),
        (r"\b(?:the )?user is\b", " "),
        (r"\b(?:the )?user was\b", " was "),
        (r"\b(?:the )?user has(?: got)?\b", " have "),
        (r"\b(?:the )?user had\b", " had "),
        (r"\b(?:the )?user (?:does not|doesn't|doesnt)\b", " do not "),
        (r"\b(?:the )?user does\b", " do "),
        (r"\b(?:the )?user\b", " "),
        # In a candidate, "they" is the user: candidates are third-person statements about the
        # user, so these pronouns carry no content that the gold's "I"/"my" would not drop too.
        (r"\b(?:they are|they're)\b", " "),
        (r"\b(?:their|theirs|them|themselves|they)\b", " "),
    )
)


def neutral(text: str, person: Person) -> str:
    """text without its person markers: "I'm a nurse." / "The user is a nurse." -> "a nurse".

    person says which markers to strip: "first" for gold and partner sentences, "third" for
    candidates. If nothing is left (a sentence that was only markers), the lower-cased text is
    returned, so that it still embeds as something.
    """
    lowered = " ".join(text.translate(APOSTROPHES).lower().split())
    out = lowered
    for pattern, replacement in _FIRST_PERSON if person == "first" else _THIRD_PERSON:
        out = pattern.sub(replacement, out)
    out = " ".join(out.split()).strip(" .,!?;:")
    return out or lowered
