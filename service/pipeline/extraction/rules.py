"""Attribute extraction by rules: first-person statements of the user, rewritten in third person.

No model runs here, so the embedded default extracts in microseconds per conversation. The rules
aim for precision over recall, because every candidate they produce costs a verifier call and a
wrong one that the verifier lets through becomes a false memory. A clause yields a candidate only
when it is a declarative statement whose subject is the speaker ("I ...", "my job is ...") and
whose verb is on a list of verbs that state standing facts (lexicon.py); questions, conditionals,
requests to the assistant, talk ("I think so", "I'm good"), other people's facts and clauses that
lean on an earlier sentence ("I love it") yield nothing.

The quote of every candidate is a slice of the user's message, so it is always grounded; the one
exception in meaning (not in form) is an agreement echo ("Me too!"), which is quoted as the user
wrote it and resolved against the partner's statement just before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from service.pipeline.extraction import lexicon as lx
from service.pipeline.extraction.person import (
    APOSTROPHES,
    EDGE,
    MDASH,
    NDASH,
    RSQUO,
    bare_word,
    finish,
    rewrite_rest,
    verb_third_person,
)
from service.pipeline.extraction.types import Candidate

MIN_CLAUSE_CHARS = 6
MAX_CLAUSE_CHARS = 200
MAX_CLAUSE_WORDS = 30
# Two candidates whose content words overlap this much say the same thing; the first is kept.
DUPLICATE_JACCARD = 0.8

# A sentence runs to its terminal punctuation; a dot inside a token ("3.5", "e.g") does not end
# it. Newlines end sentences too: chat users often drop the final full stop.
_SENTENCE = re.compile(r"(?:[^.!?…\n]|[.!?…](?=[^\s.!?…]))+[.!?…]*")
_FIRST_PERSON = rf"(?:i|i['{RSQUO}]m|im|i['{RSQUO}]ve|i['{RSQUO}]d|i['{RSQUO}]ll|my)\b"
_QUESTION_START = (
    r"(?:what|how|who|where|when|why|which|do|does|did|are|is|have|has|can|could|would|will"
    r"|any|you)\b"
)
# Clause boundaries: semicolons, spaced dashes, a conjunction before a new first-person subject
# ("..., but I hate cats"), and a comma before a first-person subject or a question
# ("Oh, I love that", "I'm a teacher, what do you do?"). "while", "since" and "whereas" are not
# boundaries: the clause they open frames the one before ("prefer quiet music while I work").
_CLAUSE_SEPARATOR = re.compile(
    r"\s*;\s*"
    rf"|\s+[-{NDASH}{MDASH}]+\s+"
    r"|,?\s+(?:and|but|so|because|although|though|plus|yet|or|cause|cuz)"
    rf"\s+(?={_FIRST_PERSON})"
    rf"|,\s+(?={_FIRST_PERSON}|{_QUESTION_START})",
    re.IGNORECASE,
)
_TRIM_END = f" \t\n,.!?;:-{NDASH}{MDASH}…*~\"'“”"
_TRIM_START = _TRIM_END.replace("?", "") + "("
_PLACEHOLDER = re.compile(r"\(\s*(?:\w+\s+)?name\s*\)|<[^>]*>", re.IGNORECASE)
_EMOTICON = re.compile(r"\s*(?:[:;=]-?[)(DPp3]|<3|xD)+$")
_PHRASE_BLOCK = re.compile(
    r"\b(?:" + "|".join(re.escape(p.strip()) for p in lx.CLAUSE_BLOCK_PHRASES) + r")\b"
)
_TALK_OBJECT = re.compile(
    r"^(?:had |got )?(?:an? |no |some |the )?(?:\w+ )?(?:time|day|week|weekend|night|morning"
    r"|evening|chat|talk|conversation|question|chance|opportunity|pleasure)\b"
)
# Verbs that make sense with no object ("I don't smoke", "I knit").
_INTRANSITIVE = lx.words(
    """
    cook bake knit sew crochet hike swim run jog smoke vape drink ski snowboard surf skate dance
    sing paint draw garden fish hunt camp climb meditate pray exercise box golf bowl code blog
    travel
    """
)
# Verbs that state a fact only with a particular word after them ("I come from ...").
_NEEDS_NEXT = {"come": "from", "hail": "from", "belong": "to", "identify": "as"}
_AUXILIARIES = {
    "don't": "doesn't",
    "dont": "doesn't",
    "didn't": "didn't",
    "didnt": "didn't",
    "can't": "can't",
    "cant": "can't",
    "cannot": "cannot",
    "can": "can",
    "do": "does",
    "did": "did",
}
_GENERIC_NOUNS = lx.words(
    """
    one ones thing things stuff show shows movie movies book books game games song songs band
    place kind type sort idea series team city food dish restaurant music sport hobby area part
    """
)
_PARTICIPLE_BLOCK = lx.words(
    """
    seen heard known thought done said told gone come found felt made meant wondered noticed
    wanted considered decided realized realised figured
    """
)
_NUMBERS = lx.words("two three four five six seven eight nine ten several many some few a one")
_NEGATIONS = frozenset({"not", "never", "no"})

# Checked in this order; the first that matches names the category.
_PATTERNS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern)
    for name, pattern in (
        (
            "health",
            r"\b(?:allerg\w*|asthma|diabet\w*|cancer|disease|illness|sick|injur\w*|surgery"
            r"|transplant|disab\w*|wheelchair|blind|deaf|anxiety|depress\w*|adhd|autis\w*"
            r"|medication|therapy|chronic|migraines?|pregnant|health\w*|heart)\b",
        ),
        (
            "diet",
            r"\b(?:vegan|vegetarian|pescatarian|gluten|dairy|lactose|meat|keto|paleo|kosher"
            r"|halal|diet|eats?|eating|food|foods|spicy|sugar|carbs|organic|drinks?|coffee"
            r"|tea|alcohol|wine|beer|cuisine|seafood)\b",
        ),
        ("pets", r"\b(?:" + "|".join(sorted(lx.PETS)) + r")\b"),
        (
            "family",
            r"\b(?:married|marry|wedding|wife|husband|spouse|kids?|children|child|sons?"
            r"|daughters?|brothers?|sisters?|siblings?|twins?|grand\w+|fianc\w*|boyfriend"
            r"|girlfriend|single|divorced|engaged|widow\w*|family|mom|mother|dad|father"
            r"|parents?|babies|baby)\b",
        ),
        (
            "occupation",
            r"\b(?:works?|worked|working|job|career|retired|profession\w*|employ\w*|boss"
            r"|office|company|business|officer|nurse|doctor|teacher|engineer|lawyer|accountant"
            r"|manager|chef|cook|farmer|mechanic|plumber|electrician|programmer|developer"
            r"|designer|artist|writer|author|musician|singer|actor|actress|firefighter|police"
            r"|soldier|veteran|pilot|driver|cashier|waiter|waitress|bartender|barista|lawyer"
            r"|dentist|surgeon|scientist|researcher|professor|librarian|salesman|realtor"
            r"|entrepreneur|freelancer|consultant|architect|carpenter|photographer|journalist"
            r"|coach|trainer|therapist|pharmacist|veterinarian|vet|cop|military|army|navy"
            r"|worker|clerk|agent|technician|guide|wrestler|athlete|tutor|instructor|owner"
            r"|stylist|model|dancer|stunt|janitor|secretary|receptionist|paramedic|nanny)\b",
        ),
        (
            "education",
            r"\b(?:student|school|college|university|studying|studies|studied|study|degree"
            r"|major\w*|graduat\w*|class|classes|course|courses|phd|masters|freshman|senior"
            r"|homeschool\w*)\b",
        ),
        (
            "location",
            r"\b(?:lives?|lived|living|from|moved|grew up|born in|been to|city|town"
            r"|neighbou?rhood|countryside|suburbs?|abroad|relocated)\b",
        ),
        (
            "identity",
            r"\b(?:years old|name|age|boy|girl|man|woman|male|female|gay|lesbian|christian"
            r"|muslim|jewish|atheist|religio\w*|introvert\w*|extrovert\w*|tall|short|born"
            r"|feminist|hair|eyes|skin)\b",
        ),
        (
            "hobby",
            r"\b(?:plays?|playing|hobby|hobbies|hik\w*|read\w*|paint\w*|draw\w*|knit\w*"
            r"|garden\w*|fishing|camp\w*|sing\w*|danc\w*|cook\w*|bak\w*|games?|gaming"
            r"|music|guitar|piano|sports?|soccer|football|basketball|baseball|tennis|golf"
            r"|swim\w*|running|yoga|travel\w*|photograph\w*|collect\w*|volunteer\w*)\b",
        ),
        (
            "preference",
            r"\b(?:loves?|likes?|enjoys?|hates?|prefers?|dislikes?|favou?rite|fan of|into"
            r"|avoids?|stand|despises?|detests?|interested|adores?|passionate|keen)\b",
        ),
        (
            "possession",
            r"\b(?:owns?|drives?|collection|(?:has|had) (?:a|an|two|three|four|five|several"
            r"|many|some|over)\b)",
        ),
    )
}


@dataclass(frozen=True)
class _Fact:
    text: str
    category: str
    quote: str
    negated: bool


def _spans(text: str, pattern: re.Pattern[str], start: int, end: int) -> Iterator[tuple[int, int]]:
    """Pieces of text[start:end] between the matches of pattern, as absolute spans."""
    cursor = start
    for match in pattern.finditer(text, start, end):
        yield cursor, match.start()
        cursor = match.end()
    yield cursor, end


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Drop surrounding space, trailing punctuation and emoticons, and leading discourse
    markers ("Oh,", "Well", "By the way,") from a span."""
    while True:
        while start < end and text[start] in _TRIM_START:
            start += 1
        while end > start and text[end - 1] in _TRIM_END:
            end -= 1
        emoticon = _EMOTICON.search(text, start, end)
        if emoticon:
            end = emoticon.start()
            continue
        lowered = text[start:end].lower().translate(APOSTROPHES)
        phrase = next(
            (p for p in lx.LEADING_PHRASES if re.match(re.escape(p) + r"\b", lowered)), None
        )
        if phrase is not None:
            start += len(phrase)
            continue
        first = re.match(r"[a-z']+", lowered)
        rest = lowered[first.end() :] if first else ""
        # A marker is stripped only when something follows it: "No." stays "No." (and yields
        # nothing), "No, I don't" becomes "I don't".
        if (
            first
            and first.group() in lx.LEADING_MARKERS
            and rest[:1] in (" ", ",", "!", ".")
            and rest.strip(" ,!.")
        ):
            start += first.end()
            continue
        return start, end


def _echo_kind(clause: str) -> str | None:
    words = [bare_word(w) for w in clause.split()]
    words = [w for w in words if w and w not in {"haha", "lol", "actually", "really"}]
    # "So do I" starts with a word that is a discourse marker elsewhere; try with and without.
    while words:
        phrase = " ".join(words)
        if phrase in lx.ECHO_POSITIVE:
            return "positive"
        if phrase in lx.ECHO_NEGATIVE:
            return "negative"
        if words[0] not in lx.LEADING_MARKERS:
            return None
        words = words[1:]
    return None


def _is_blocked(clause: str, bare: list[str]) -> bool:
    # Quoted speech is someone else's words; brackets and "(name)" are dataset placeholders.
    if any(ch in clause for ch in '"“”[]') or _PLACEHOLDER.search(clause):
        return True
    if any(b in lx.CLAUSE_BLOCK for b in bare):
        return True
    # "it'd be nice", "that'd help": a contracted "would" (or "had") is never a standing fact.
    if any(b.endswith("'d") for b in bare):
        return True
    return _PHRASE_BLOCK.search(" ".join(bare)) is not None


def _leans_on_context(rest: list[str], *, copula: bool = False) -> bool:
    """True when the object of the clause refers back to something said earlier."""
    words = [w for w in rest if w]
    while words and (words[0] in lx.ADVERBS or words[0] == "not"):
        words.pop(0)
    while words and words[-1] in lx.TRAILING_FILLERS:
        words.pop()
    if not words:
        return False
    if words[0] in lx.ANAPHORA or words[-1] in lx.ANAPHORA:
        return True
    if any(w in lx.OTHERS_POSSESSIVES for w in words):
        return True
    # "I don't use mine much": "mine" stands for a noun said before ("a friend of mine" is fine).
    if any(w == "mine" and (i == 0 or words[i - 1] != "of") for i, w in enumerate(words)):
        return True
    # "I'm 14" is an age; "I have three" is three of something said before.
    if not copula and all(w in lx.BARE_QUANTIFIERS or w.isdigit() for w in words):
        return True
    for i, word in enumerate(words):
        if word in {"this", "these", "those"}:
            return True
        if word == "that" and i + 1 < len(words) and words[i + 1] in _GENERIC_NOUNS:
            return True
    return False


@dataclass(frozen=True)
class _Head:
    """The start of a clause rewritten in third person, and what follows it.

    verb: the lemma that decides the category ("be", "have", "love", ...).
    conjugate: later verbs coordinated with the head take the third person too.
    copula: the head is "is"/"was", whose complement may be a bare number ("I'm 14").
    """

    text: str
    rest: list[str]
    verb: str
    conjugate: bool = True
    copula: bool = False
    category: str | None = None


_PREFERENCE_VERBS = lx.words(
    """
    love like enjoy hate prefer adore dislike despise detest loathe avoid appreciate admire
    stand crave favor favour value cherish
    """
)


def _category(head: _Head, text: str) -> str:
    """Coarse category from the head verb and the first words after it.

    Only the first words count: in "is an electrician who works on their parents' farm" the
    user is described by "electrician", not by "parents".
    """
    if head.category is not None:
        return head.category
    lower = text.lower()
    core = " ".join(lower.split()[:9])
    for name in ("health", "diet", "pets"):
        if _PATTERNS[name].search(core):
            return name
    # "is a baby delivery nurse": a role noun describes the user before any other keyword does.
    copula_noun = head.copula and re.match(r"the user is (?:\w+ )?an? ", lower)
    if copula_noun and _PATTERNS["occupation"].search(core):
        return "occupation"
    if head.verb in _PREFERENCE_VERBS:
        after = re.search(rf"\b{re.escape(head.verb)}\w*\s+(\w+)", core)
        following = after.group(1) if after else ""
        if following == "to" or following.endswith("ing") or _PATTERNS["hobby"].search(core):
            return "hobby"
        return "preference"
    if re.fullmatch(r"the user is (?:\d+|[a-z]+)\.", lower) and (
        re.search(r"\d", lower) or re.fullmatch(r"The user is [A-Z][a-z]+\.", text)
    ):
        return "identity"  # "I'm 14", "I'm Sarah"
    for scope in (core, lower):
        for name, pattern in _PATTERNS.items():
            if pattern.search(scope):
                return name
    return "other"


def _copula_complement_ok(bare: list[str]) -> bool:
    """Is "I'm <bare...>" a standing fact rather than talk or a passing state?"""
    j = 0
    while j < len(bare) and (bare[j] in lx.ADVERBS or bare[j] == "not"):
        j += 1
    if j + 1 < len(bare) and bare[j] == "a" and bare[j + 1] in {"little", "bit", "lot"}:
        j += 2
        while j < len(bare) and bare[j] in lx.ADVERBS:
            j += 1
    if j >= len(bare):
        return False
    word = bare[j]
    following = bare[j + 1] if j + 1 < len(bare) else ""
    if word in lx.FEAR_WORDS:
        return following == "of"
    if word == "getting":
        return following in lx.GETTING_OK
    return word not in lx.COPULA_BLOCK


def _have_object_ok(bare: list[str]) -> bool:
    j = 0
    while j < len(bare) and bare[j] in lx.ADVERBS:
        j += 1
    if j >= len(bare):
        return False
    joined = " ".join(bare[j:]) + " "
    if any(joined.startswith(t) for t in lx.HAVE_TALK) or _TALK_OBJECT.match(joined):
        return False
    word = bare[j]
    if word == "been":
        return _copula_complement_ok(bare[j + 1 :])
    if word in _PARTICIPLE_BLOCK:
        return False
    return not (word.endswith("ed") and word not in lx.PARTICIPLES)


def _first_person(tokens: list[str], bare: list[str]) -> _Head | None:
    """Parse a clause that starts with "I", "I'm" or "I've"."""
    first = bare[0]
    if first in {"i'm", "im"}:
        if not _copula_complement_ok(bare[1:]):
            return None
        return _Head("The user is", tokens[1:], "be", copula=True)
    if first in {"i've", "ive"}:
        skip = 2 if bare[1:2] == ["got"] else 1
        if not _have_object_ok(bare[skip:]):
            return None
        return _Head("The user has", tokens[skip:], "have")
    if first != "i":
        return None
    i = 1
    adverbs: list[str] = []
    while i < len(bare) and bare[i] in lx.ADVERBS:
        adverbs.append(tokens[i])
        i += 1
    if i >= len(bare):
        return None
    word = bare[i]
    if word in {"am", "was"}:
        if not _copula_complement_ok(bare[i + 1 :]):
            return None
        verb = "is" if word == "am" else "was"
        return _Head(" ".join(["The user", *adverbs, verb]), tokens[i + 1 :], "be", copula=True)
    if word in {"have", "had"}:
        start = i + 2 if word == "have" and bare[i + 1 : i + 2] == ["got"] else i + 1
        if not _have_object_ok(bare[start:]):
            return None
        verb = "has" if word == "have" else "had"
        return _Head(" ".join(["The user", *adverbs, verb]), tokens[start:], "have")
    auxiliary: str | None = None
    if word in _AUXILIARIES:
        auxiliary = _AUXILIARIES[word]
        i += 1
        if word in {"do", "did", "can"} and bare[i : i + 1] == ["not"]:
            auxiliary = {"do": "does not", "did": "did not", "can": "cannot"}[word]
            i += 1
        while i < len(bare) and bare[i] in lx.ADVERBS:
            adverbs.append(tokens[i])
            i += 1
        if i >= len(bare):
            return None
        word = bare[i]
    head_words = ["The user", *adverbs] if auxiliary is None else ["The user", auxiliary, *adverbs]
    if word in {"used", "tend"} and bare[i + 1 : i + 2] == ["to"] and auxiliary is None:
        # "I used to be a teacher", "I tend to avoid crowds": the verb after "to" decides.
        following = bare[i + 2] if i + 2 < len(bare) else ""
        if following == "be":
            if not _copula_complement_ok(bare[i + 3 :]):
                return None
        elif following not in lx.VERBS_BASE:
            return None
        verb_out = "used" if word == "used" else verb_third_person(tokens[i].strip(EDGE))
        return _Head(
            " ".join([*head_words, verb_out, "to"]), tokens[i + 2 :], following, conjugate=False
        )
    if word == "stand" and auxiliary not in {"can't", "cannot"}:
        return None
    needed = _NEEDS_NEXT.get(word)
    if needed is not None and bare[i + 1 : i + 2] != [needed]:
        return None
    if word in lx.VERBS_BASE:
        verb = tokens[i].strip(EDGE)
        verb_out = verb_third_person(verb) if auxiliary is None else verb
    elif word in lx.VERBS_PAST and auxiliary is None:
        verb_out = tokens[i].strip(EDGE)
    else:
        return None
    has_object = any(b not in lx.TRAILING_FILLERS for b in bare[i + 1 :])
    if not has_object and word not in _INTRANSITIVE:
        return None
    return _Head(
        " ".join([*head_words, verb_out]), tokens[i + 1 :], word, conjugate=auxiliary is None
    )


def _possessive(tokens: list[str], bare: list[str]) -> _Head | None:
    """Parse "my ...", or return None when the clause is about someone else.

    "My favorite color is blue" is about the speaker. "My sister is a nurse" is about the sister:
    all it says about the speaker is that they have a sister, so that is all that is kept, and the
    rest of the sentence is dropped.
    """
    verb_at = next(
        (
            k
            for k in range(1, min(len(bare), 6))
            if bare[k] in {"is", "are", "has", "have", "includes", "include"}
            or bare[k].endswith("'s")
        ),
        None,
    )
    noun_phrase = bare[1 : verb_at if verb_at is not None else min(len(bare), 5)]
    if verb_at is not None and bare[verb_at].endswith("'s"):
        # "my name's Sam": the noun carries the contracted verb; "my friend's dog" is no verb,
        # but its noun is not an own attribute either, so it yields nothing below.
        noun_phrase = [*noun_phrase, bare[verb_at][:-2]]
    relation = next(
        (k for k, w in enumerate(noun_phrase, start=1) if w in lx.RELATIVES or w in lx.PETS),
        None,
    )
    if relation is not None:
        modifiers = bare[1:relation]
        if any(w.endswith("'s") or w in lx.VERBS_BASE for w in modifiers) or len(modifiers) > 3:
            return None  # "my friend's dog", "my best friend's sister"
        after = bare[relation + 1 : relation + 3]
        if not after or any(w in lx.GONE or w.endswith("ed") for w in after):
            return None  # "my dog died", "my sister was ..."
        noun = bare[relation]
        words = [t.strip(EDGE) for t in tokens[1 : relation + 1]]
        plural = noun.endswith("s") or noun in {"children", "grandchildren"}
        if not (plural or (modifiers and modifiers[0] in _NUMBERS)):
            words.insert(0, "an" if words[0][:1].lower() in "aeiou" else "a")
        category = "pets" if noun in lx.PETS else "family"
        return _Head("The user has " + " ".join(words), [], "have", category=category)
    own = [w for w in noun_phrase if w in lx.OWN_ATTRIBUTES]
    if verb_at is None or not own:
        return None
    if len(bare) - verb_at < 2 or _leans_on_context(bare[verb_at + 1 :]):
        return None
    if bare[verb_at].endswith("'s"):
        contracted = tokens[verb_at].strip(EDGE)[:-2]  # "name's" -> "name is"
        head = "The user's " + " ".join([*tokens[1:verb_at], contracted, "is"])
    else:
        head = "The user's " + " ".join(tokens[1 : verb_at + 1])
    named = lx.ATTRIBUTE_CATEGORIES.get(own[0])
    return _Head(head, tokens[verb_at + 1 :], "be", copula=True, category=named)


def _clause_fact(clause: str, quote: str) -> _Fact | None:
    tokens = clause.split()
    bare = [bare_word(t) for t in tokens]
    if not (MIN_CLAUSE_CHARS <= len(clause) <= MAX_CLAUSE_CHARS):
        return None
    if not (2 <= len(tokens) <= MAX_CLAUSE_WORDS) or _is_blocked(clause, bare):
        return None
    head = _possessive(tokens, bare) if bare[0] == "my" else _first_person(tokens, bare)
    if head is None:
        return None
    if _leans_on_context([bare_word(t) for t in head.rest], copula=head.copula):
        return None
    text = finish(head.text, rewrite_rest(head.rest, conjugate_coordinated=head.conjugate))
    negated = any(b in _NEGATIONS or b.endswith("n't") for b in bare)
    return _Fact(text, _category(head, text), quote, negated)


@dataclass(frozen=True)
class _Sentence:
    question: bool
    facts: tuple[_Fact, ...]
    echo: tuple[str, str] | None  # (kind, quote) when the sentence is an agreement echo


def _sentences(content: str) -> list[_Sentence]:
    out: list[_Sentence] = []
    for match in _SENTENCE.finditer(content):
        s_start, s_end = match.span()
        sentence = content[s_start:s_end].strip()
        if not sentence:
            continue
        question = sentence.rstrip("\"')]}“” ").endswith("?")
        raw = list(_spans(content, _CLAUSE_SEPARATOR, s_start, s_end))
        clauses = [span for span in (_trim(content, a, b) for a, b in raw) if span[1] > span[0]]
        echo: tuple[str, str] | None = None
        # Checked before markers are trimmed, which would turn "So do I" into "do I".
        kind = _echo_kind(content[raw[0][0] : raw[0][1]])
        if kind is not None:
            start, end = raw[0]
            while end > start and content[end - 1] in " \t\n,.!?;:…~":
                end -= 1
            while start < end and content[start].isspace():
                start += 1
            echo = (kind, content[start:end])
        sentence_words = {bare_word(w) for w in sentence.split()}
        if sentence_words & lx.HYPOTHETICAL:
            out.append(_Sentence(question, (), None))
            continue
        if question:
            # The last clause is the question. Clauses before it are statements of their own
            # only when the question starts fresh ("I'm a teacher, what do you do?"); otherwise
            # ("Do you think, since I'm new here, ...?") they are part of the question.
            last = content[clauses[-1][0] : clauses[-1][1]].lower() if clauses else ""
            opener = re.match(_QUESTION_START, last) or last.startswith(("what about", "and you"))
            clauses = clauses[:-1] if opener else []
        facts: list[_Fact] = []
        skip_next = False
        previous_was_fact = False
        for start, end in clauses:
            clause = content[start:end]
            first = bare_word(clause.split()[0]) if clause.split() else ""
            if skip_next:
                skip_next = False
                previous_was_fact = False
                continue
            if first in lx.SUBORDINATORS:
                # "When I retire, I'm moving to Florida": the main clause depends on this one.
                skip_next = True
                continue
            fact = _clause_fact(clause, clause)
            if fact is None and previous_was_fact and not re.match(_FIRST_PERSON, clause, re.I):
                # "I prefer in-person classes - can't stand online courses": the subject of the
                # second clause is the first one's.
                fact = _clause_fact("I " + clause, clause)
            if fact is not None:
                facts.append(fact)
            previous_was_fact = fact is not None
        out.append(_Sentence(question, tuple(facts), echo))
    return out


def _partner_statement(content: str) -> _Fact | None:
    """The partner's last declarative sentence, when it is one first-person statement.

    Trailing questions ("What about you?") are skipped: "I love hiking. Do you?" followed by
    "Me too!" still agrees with the hiking. Anything less clear resolves to nothing.
    """
    for sentence in reversed(_sentences(content)):
        if sentence.question:
            continue
        return sentence.facts[0] if len(sentence.facts) == 1 and sentence.echo is None else None
    return None


def _content_key(text: str) -> frozenset[str]:
    stop = {"the", "user", "user's", "a", "an", "their", "is", "are", "has", "have", "really"}
    stop |= {"also", "too", "very", "so", "and", "of", "to", "they"}
    words = re.findall(r"[a-z0-9']+", text.lower())
    return frozenset(w.rstrip("s") for w in words if w not in stop)


def _is_duplicate(key: frozenset[str], keys: list[frozenset[str]]) -> bool:
    for other in keys:
        union = key | other
        if not union or len(key & other) / len(union) >= DUPLICATE_JACCARD:
            return True
    return False


class RuleExtractor:
    """First-person statements of the user, as third-person candidates. Deterministic."""

    name = "rules"

    async def extract(self, conversation: Sequence[Mapping[str, str]]) -> list[Candidate]:
        return self.extract_sync(conversation)

    def extract_sync(self, conversation: Sequence[Mapping[str, str]]) -> list[Candidate]:
        candidates: list[Candidate] = []
        keys: list[frozenset[str]] = []
        for index, message in enumerate(conversation):
            if message.get("role") != "user":
                continue
            partner = (
                conversation[index - 1].get("content", "")
                if index > 0 and conversation[index - 1].get("role") == "assistant"
                else None
            )
            for sentence in _sentences(message.get("content", "")):
                facts = list(sentence.facts)
                if sentence.echo is not None and partner:
                    kind, quote = sentence.echo
                    stated = _partner_statement(partner)
                    if stated is not None and (kind == "positive" or stated.negated):
                        facts.insert(0, _Fact(stated.text, stated.category, quote, stated.negated))
                for fact in facts:
                    key = _content_key(fact.text)
                    if _is_duplicate(key, keys):
                        continue
                    keys.append(key)
                    candidates.append(
                        Candidate(fact.text, fact.category, index, fact.quote, self.name)
                    )
        return candidates
