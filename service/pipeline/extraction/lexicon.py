"""Word lists for the rule extractor, kept apart from the logic so that they can be read and
argued about as lists.

Everything here leans towards precision: a verb that is not listed makes the clause yield
nothing, because every candidate that reaches the verifier costs a model call, and a
self-statement with an unlisted verb is rare enough that missing it is the cheaper error.
"""

from __future__ import annotations


def words(text: str) -> frozenset[str]:
    """A word list written as running text, one entry per whitespace-separated word."""
    return frozenset(text.split())


# Words said before the real clause starts ("Oh, ...", "Yeah so ..."). Stripped, never kept.
LEADING_MARKERS: frozenset[str] = words(
    """
    oh ooh well yes yeah yea yep yup no nope nah actually honestly so and but also haha hah
    hahaha lol wow um umm uh hmm ok okay sure cool great nice awesome anyway anyways personally
    true right ah aw aww hey hi hello hehe ha plus then now definitely absolutely totally indeed
    btw alright anyhow though
    """
)
LEADING_PHRASES: tuple[str, ...] = (
    "by the way",
    "speaking of which",
    "speaking of that",
    "on another note",
    "on a different note",
    "on a side note",
    "to be honest",
    "in fact",
    "as for me",
    "for me",
    "of course",
    "most of the time",
    "these days",
    "in general",
    "for the most part",
    "funnily enough",
    "funny enough",
    "as a matter of fact",
)

# Adverbs that may sit between the subject and the verb; kept in the output text.
ADVERBS: frozenset[str] = words(
    """
    really also usually always often sometimes generally mostly mainly typically normally
    definitely absolutely totally actually still just currently recently particularly
    especially truly honestly personally now even rarely seldom occasionally regularly
    frequently strongly genuinely kinda pretty kind sort of much too both all so very
    certainly simply literally seriously never only exclusively strictly primarily
    """
)
# Adverbs that may stand between a subject and its verb when a statement changes person ("The
# user always picks" <-> "I always pick"): the verb after them is the one to conjugate.
VERB_ADVERBS: frozenset[str] = ADVERBS | words("sorta basically barely hardly")

# Base forms of verbs whose first-person present states a habit, a preference or a standing
# fact ("I bake", "I live in", "I prefer"). Verbs of thinking, wanting, hoping and the like are
# left out on purpose: "I think", "I guess", "I want to know", "I hope so" are talk, not facts.
VERBS_BASE: frozenset[str] = words(
    """
    love like enjoy hate prefer adore dislike despise detest loathe avoid appreciate admire
    work live play read watch listen cook bake run jog swim drive ride own collect volunteer
    teach study practice practise train eat drink speak write paint draw sing dance travel hike
    bike cycle grow garden knit sew crochet fish hunt camp climb ski snowboard surf skate shop
    follow support belong attend coach use wear raise rescue foster meditate pray commute visit
    keep do make build fix restore repair go take tend stand care identify come hail suffer
    struggle favor favour value cherish crave smoke vape lift exercise box golf bowl code
    program blog stream tutor mentor serve manage rent share juggle dream spend wake homeschool
    babysit skip steer stick choose opt gravitate lean limit
    """
)

# Past forms that state a background fact ("I grew up in", "I retired last year").
VERBS_PAST: frozenset[str] = words(
    """
    grew used retired graduated studied worked lived moved served started quit married
    divorced won met built founded spent traveled travelled visited got adopted bought raised
    taught played owned competed ran learned learnt volunteered immigrated emigrated relocated
    dropped finished completed joined became switched converted earned majored minored loved
    hated enjoyed liked broke injured survived beat overcame suffered recovered lost gave
    stopped tried
    """
)

# Participles after "I have" / "I've" that keep the clause a fact about the speaker.
PARTICIPLES: frozenset[str] = words(
    """
    been lived worked had owned played studied taught traveled travelled visited loved enjoyed
    hated liked grown read written won collected volunteered practiced practised trained run
    raised got gotten started competed coached taken learned learnt struggled suffered battled
    dealt survived lost gained quit stopped given become married adopted always never tried
    """
)

# "I have ..." objects that are talk, not possessions.
HAVE_TALK: tuple[str, ...] = (
    "to ",
    "got to ",
    "no idea",
    "a question",
    "a quick question",
    "another question",
    "questions",
    "a feeling",
    "a good feeling",
    "a lot of questions",
    "a good time",
    "a great time",
    "fun",
    "no clue",
    "a suggestion",
    "an idea",
    "a request",
)

# First words of an "I'm ..." complement that make it small talk or a passing state
# ("I'm good", "I'm glad", "I'm here", "I'm looking for advice", "I'm not sure").
COPULA_BLOCK: frozenset[str] = words(
    """
    good fine great well ok okay alright glad happy sad sorry sure certain unsure here there
    back doing going gonna looking thinking wondering trying hoping planning considering
    curious excited thrilled pleased delighted grateful thankful impressed surprised amazed
    jealous honored honoured flattered confused lost ready done bored tired hungry sleepy
    kidding joking listening serious right wrong about feeling having talking asking saying
    telling coming leaving heading off busy free same with like up down game open all
    interesting intrigued glad relieved sorry aware afraid scared terrified wondering
    hesitant worried nervous stressed overwhelmed exhausted stuck guessing assuming hearing
    getting meaning
    """
)
# Fears are standing facts when they have an object: "I'm afraid of heights".
FEAR_WORDS: frozenset[str] = frozenset({"afraid", "scared", "terrified"})
# "I'm getting married" is news about the user; "I'm getting ready" is not.
GETTING_OK: frozenset[str] = frozenset({"married", "divorced", "engaged"})

# Words that, anywhere in a clause, make it about the assistant, a request, talk about the
# future or the possible, or somebody else's words. Matched as whole words, lower case.
CLAUSE_BLOCK: frozenset[str] = words(
    """
    you your yours you're youre you've you'd you'll yourself u ur please would could should
    might may will i'll ill i'd wont won't shall gonna maybe perhaps probably hopefully
    someday said says told tells asked recommend recommendations suggest suggestions advice
    tips wondering thanks thank
    """
)
CLAUSE_BLOCK_PHRASES: tuple[str, ...] = (
    "help me",
    "let me",
    "tell me",
    "show me",
    "give me",
    "going to",
    "one day",
    "want to know",
    "looking for",
    "need help",
    "need some",
    "need a ",
    "need to",
    "have to",
    "had to",
    "got to",
    "user 1",
    "user 2",
    "user1",
    "user2",
    "the idea",
    "coming up",
)

# Words whose presence anywhere in a sentence makes it hypothetical or conditional; the whole
# sentence is skipped because its main clause ("..., I'm buying a boat") reads like a fact.
HYPOTHETICAL: frozenset[str] = frozenset(
    {"if", "unless", "wish", "wished", "suppose", "supposing", "imagine", "hypothetically"}
)
# Subordinators that, opening a clause, make the next clause of the sentence depend on them
# ("When I retire, I'm moving to Florida").
SUBORDINATORS: frozenset[str] = frozenset(
    {"when", "whenever", "once", "until", "whether", "though", "although", "while"}
)

# "My <noun> is ..." where the noun is an attribute of the speaker: the sentence is about the
# speaker ("My favorite color is blue", "My job is boring").
OWN_ATTRIBUTES: frozenset[str] = words(
    """
    favorite favourite fav job name hobby hobbies passion dream goal age birthday major degree
    career work profession religion background diet heritage hometown specialty specialities
    specialty family home house apartment car first native go-to biggest guilty
    """
)

# The category an own-attribute noun gives its sentence ("My job is ..." -> occupation).
ATTRIBUTE_CATEGORIES: dict[str, str] = {
    "favorite": "preference",
    "favourite": "preference",
    "fav": "preference",
    "go-to": "preference",
    "guilty": "preference",
    "job": "occupation",
    "career": "occupation",
    "work": "occupation",
    "profession": "occupation",
    "specialty": "occupation",
    "name": "identity",
    "age": "identity",
    "birthday": "identity",
    "religion": "identity",
    "heritage": "identity",
    "background": "identity",
    "native": "identity",
    "first": "identity",
    "hobby": "hobby",
    "hobbies": "hobby",
    "passion": "hobby",
    "home": "location",
    "house": "location",
    "apartment": "location",
    "hometown": "location",
    "major": "education",
    "degree": "education",
    "diet": "diet",
    "family": "family",
    "car": "possession",
}

# "My <relative or pet> ..." is about the relative or the pet; all it says about the speaker
# is that they have one, and only that is kept ("my sister is a nurse" -> "has a sister").
RELATIVES: frozenset[str] = words(
    """
    wife husband spouse son sons daughter daughters kid kids child children baby babies
    brother brothers sister sisters siblings twin twins grandkids grandchildren granddaughter
    grandson grandsons granddaughters fiance fiancee fiancé fiancée boyfriend girlfriend
    stepson stepdaughter
    """
)
PETS: frozenset[str] = words(
    """
    dog dogs cat cats puppy puppies kitten kittens horse horses fish bird birds parrot hamster
    rabbit rabbits bunny turtle snake lizard pet pets pup
    """
)
# Verbs after "my <relative>" that mean the relative is no longer there.
GONE: frozenset[str] = frozenset(
    {"was", "were", "died", "passed", "left", "used", "had", "ran", "got", "went"}
)

ECHO_POSITIVE: frozenset[str] = frozenset(
    {
        "me too",
        "me as well",
        "same here",
        "same",
        "so do i",
        "so am i",
        "so have i",
        "i do too",
        "i do as well",
        "i am too",
        "i'm the same",
        "i also do",
        "i do also",
        "me also",
        "i have too",
        "i have as well",
    }
)
ECHO_NEGATIVE: frozenset[str] = frozenset(
    {"me neither", "me either", "neither do i", "nor do i", "i don't either", "neither am i"}
)

# Words that end an object and refer back to something said before ("I love it", "I'm a fan of
# both of them"): the clause can't be read on its own, so it yields nothing.
ANAPHORA: frozenset[str] = frozenset(
    {"it", "that", "this", "them", "those", "these", "there", "so", "him", "her", "both", "they"}
)
# Quantifiers whose noun was said earlier ("I have a few", "I've got three").
BARE_QUANTIFIERS: frozenset[str] = words(
    "a few some any more one ones many lots several two three four five six seven"
)
# Someone else's possessions anywhere in the object ("I love their fragrance"): who "they" are
# was said earlier. The speaker's own "my" is not in this list.
OTHERS_POSSESSIVES: frozenset[str] = frozenset({"their", "theirs", "its", "his", "her", "him"})
TRAILING_FILLERS: frozenset[str] = words(
    """
    too also well as lot lots much either anyway though haha lol now then a so very sometimes
    really before again yet ever once twice lately recently anymore today tonight far
    """
)

# Third-person forms for the subject and its auxiliaries; the main verb is conjugated by rule.
IRREGULAR_THIRD: dict[str, str] = {"have": "has", "do": "does", "go": "goes", "be": "is"}
# Pronouns of the speaker after the subject: "my" -> "their", "I" -> "they".
SPEAKER_PRONOUNS: dict[str, str] = {
    "my": "their",
    "mine": "theirs",
    "me": "them",
    "myself": "themselves",
    "i": "they",
    "i'm": "they're",
    "im": "they're",
    "i've": "they've",
}
