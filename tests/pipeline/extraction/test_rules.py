"""RuleExtractor: what it must extract, and what it must leave alone."""

from __future__ import annotations

import pytest

from service.pipeline.extraction.rules import RuleExtractor
from service.pipeline.extraction.types import CATEGORIES, quote_is_grounded

Conversation = list[dict[str, str]]


def user(text: str) -> Conversation:
    return [{"role": "user", "content": text}]


def after_partner(partner: str, reply: str) -> Conversation:
    return [{"role": "assistant", "content": partner}, {"role": "user", "content": reply}]


# (user message, [(text, quote)]): first-person facts, rewritten in third person, each quoted.
FACTS: list[tuple[str, list[tuple[str, str]]]] = [
    ("I have two dogs.", [("The user has two dogs.", "I have two dogs")]),
    ("I've got three cats!", [("The user has three cats.", "I've got three cats")]),
    (
        "I'm a nurse at the local hospital.",
        [("The user is a nurse at the local hospital.", "I'm a nurse at the local hospital")],
    ),
    ("I work as a plumber.", [("The user works as a plumber.", "I work as a plumber")]),
    ("I live in Ohio.", [("The user lives in Ohio.", "I live in Ohio")]),
    (
        "I love to bake cookies and knit.",
        [("The user loves to bake cookies and knit.", "I love to bake cookies and knit")],
    ),
    ("I'm allergic to peanuts.", [("The user is allergic to peanuts.", "I'm allergic to peanuts")]),
    ("I don't eat meat.", [("The user doesn't eat meat.", "I don't eat meat")]),
    ("I never drink coffee.", [("The user never drinks coffee.", "I never drink coffee")]),
    (
        "My favorite color is blue.",
        [("The user's favorite color is blue.", "My favorite color is blue")],
    ),
    ("My name's Sam.", [("The user's name is Sam.", "My name's Sam")]),
    ("I'm 24 years old.", [("The user is 24 years old.", "I'm 24 years old")]),
    ("I have a sister.", [("The user has a sister.", "I have a sister")]),
    ("I used to be a teacher.", [("The user used to be a teacher.", "I used to be a teacher")]),
    ("I'm afraid of heights.", [("The user is afraid of heights.", "I'm afraid of heights")]),
    # Markers before the clause are not part of the quote; a question after it is dropped.
    ("Oh, I'm a teacher, what do you do?", [("The user is a teacher.", "I'm a teacher")]),
    # Two clauses, two facts; "my" becomes "their", a coordinated verb is conjugated.
    (
        "I'm not a good swimmer, but I love country concerts.",
        [
            ("The user is not a good swimmer.", "I'm not a good swimmer"),
            ("The user loves country concerts.", "I love country concerts"),
        ],
    ),
    (
        "I have a pet cow and drive a big truck.",
        [
            (
                "The user has a pet cow and drives a big truck.",
                "I have a pet cow and drive a big truck",
            )
        ],
    ),
    (
        "By the way, I usually prefer structure and avoid drama in my downtime.",
        [
            (
                "The user usually prefers structure and avoids drama in their downtime.",
                "I usually prefer structure and avoid drama in my downtime",
            )
        ],
    ),
    # A subject dropped after a dash is the first clause's.
    (
        "I prefer in-person classes - can't stand online lectures.",
        [
            ("The user prefers in-person classes.", "I prefer in-person classes"),
            ("The user can't stand online lectures.", "can't stand online lectures"),
        ],
    ),
    # Curly apostrophes, lower-case "i", shouting and emoticons.
    ("I\u2019m a vegetarian :)", [("The user is a vegetarian.", "I\u2019m a vegetarian")]),
    ("i am a nurse", [("The user is a nurse.", "i am a nurse")]),
    ("I LOVE pizza!!!", [("The user LOVES pizza.", "I LOVE pizza")]),
    # The speaker later in the clause is "they", in lower case.
    (
        "I read German authors, as I'm from Germany.",
        [
            (
                "The user reads German authors, as they're from Germany.",
                "I read German authors, as I'm from Germany",
            )
        ],
    ),
    # "of mine" is the user's own, not a noun said earlier.
    (
        "I'm in a band with some friends of mine.",
        [
            (
                "The user is in a band with some friends of theirs.",
                "I'm in a band with some friends of mine",
            )
        ],
    ),
    # "My wife and I ...": the part about the user is kept.
    ("My wife and I love hiking.", [("The user loves hiking.", "I love hiking")]),
    # Near-identical statements are kept once.
    ("I love hiking. I really love hiking!", [("The user loves hiking.", "I love hiking")]),
]

# Messages that state nothing about the user (or nothing stable).
NOTHING: list[tuple[str, str]] = [
    ("question", "Do you like dogs?"),
    ("question about self", "Should I learn French?"),
    ("question with embedded fact", "Do you think, since I'm new here, I should join a club?"),
    ("conditional", "If I had money, I would buy a boat."),
    ("conditional main clause", "If I win, I'm buying a boat."),
    ("wish", "I wish I could travel more."),
    ("future", "When I retire, I'm moving to Florida."),
    ("will", "I'll have to try it sometime."),
    ("would", "I'd love to visit Japan."),
    ("request", "Can you help me find a recipe?"),
    ("request", "Could you recommend a good book?"),
    ("request", "Please suggest a trail near me."),
    ("request", "Help me plan a trip to Japan."),
    ("request", "I need help with my resume."),
    ("request", "I'm looking for some advice on managing my time."),
    ("other person", "My neighbor is a nurse."),
    ("other person", "She is a nurse."),
    ("other person", "My mom loves gardening."),
    ("other person", "My friend's dog is huge."),
    ("reported speech", 'My mom always says "I love you".'),
    ("reported speech", "My boss told me I work too hard."),
    ("gone", "My dog died last year."),
    ("small talk", "I'm good, thanks!"),
    ("small talk", "I'm fine, thanks."),
    ("small talk", "I'm here."),
    ("small talk", "I see."),
    ("small talk", "I think so."),
    ("small talk", "I guess."),
    ("small talk", "I am not sure what to do."),
    ("small talk", "I'm glad to hear that."),
    ("small talk", "Thank you! I am very happy."),
    ("small talk", "I have a question about taxes."),
    ("small talk", "I have no idea."),
    ("leans on context", "I love it!"),
    ("leans on context", "I like those things too!"),
    ("leans on context", "I'm a big fan of both of them."),
    ("leans on context", "I have a few."),
    ("leans on context", "I love their music."),
    ("leans on context", "I don't use mine very much either."),
    ("contracted would", "I like to keep my notes, and it'd be nice to sync them."),
    ("want", "I want to be a lawyer."),
    ("placeholder", "Hello, I'm [user 1 name]."),
    ("placeholder", "I'm (name)."),
    ("about the assistant", "I'm glad you're happy too."),
    ("echo with no partner", "Me too!"),
]


@pytest.fixture(scope="module")
def extractor() -> RuleExtractor:
    return RuleExtractor()


@pytest.mark.parametrize(("message", "expected"), FACTS, ids=[m for m, _ in FACTS])
async def test_first_person_facts(
    extractor: RuleExtractor, message: str, expected: list[tuple[str, str]]
) -> None:
    conversation = user(message)
    candidates = await extractor.extract(conversation)
    assert [(c.text, c.quote) for c in candidates] == expected
    for c in candidates:
        assert c.message_index == 0
        assert c.source == extractor.name == "rules"
        assert c.category in CATEGORIES
        assert quote_is_grounded(conversation, c.message_index, c.quote)


@pytest.mark.parametrize(("kind", "message"), NOTHING, ids=[m for _, m in NOTHING])
async def test_nothing_about_the_user(extractor: RuleExtractor, kind: str, message: str) -> None:
    assert await extractor.extract(user(message)) == [], kind


async def test_relative_yields_only_that_the_user_has_one(extractor: RuleExtractor) -> None:
    # "My sister is a nurse" is about the sister: nothing says the user is a nurse, but the
    # possessive does say that the user has a sister.
    candidates = await extractor.extract(user("My sister is a nurse."))
    assert [c.text for c in candidates] == ["The user has a sister."]
    assert candidates[0].category == "family"
    assert candidates[0].quote == "My sister is a nurse"
    assert not any("nurse" in c.text for c in candidates)
    pets = await extractor.extract(user("My two little dogs are my world."))
    assert [(c.text, c.category) for c in pets] == [("The user has two little dogs.", "pets")]


@pytest.mark.parametrize(
    ("partner", "reply", "expected"),
    [
        ("I love hiking.", "Me too!", "The user loves hiking."),
        ("I'm a student. What do you do?", "So do I!", "The user is a student."),
        ("I have two cats. What about you?", "Yeah, same here!", "The user has two cats."),
        ("I don't like coffee.", "Me neither.", "The user doesn't like coffee."),
    ],
)
async def test_agreement_echo_takes_the_partner_statement(
    extractor: RuleExtractor, partner: str, reply: str, expected: str
) -> None:
    conversation = after_partner(partner, reply)
    candidates = await extractor.extract(conversation)
    assert [c.text for c in candidates] == [expected]
    # The quote is the user's own words; only the meaning comes from the partner.
    assert candidates[0].message_index == 1
    assert quote_is_grounded(conversation, 1, candidates[0].quote)
    assert candidates[0].quote in reply


@pytest.mark.parametrize(
    ("partner", "reply"),
    [
        ("That's cool.", "Me too!"),  # not a first-person statement
        ("Do you like hiking?", "Me too!"),  # a question
        ("I love hiking and I have two cats.", "Me too!"),  # ambiguous: two statements
        ("I love hiking.", "Me neither."),  # a negative echo of a positive statement
        ("You should try hiking.", "Me too!"),
    ],
)
async def test_unresolvable_echo_yields_nothing(
    extractor: RuleExtractor, partner: str, reply: str
) -> None:
    assert await extractor.extract(after_partner(partner, reply)) == []


async def test_partner_only_facts_are_never_the_users(extractor: RuleExtractor) -> None:
    conversation = [
        {"role": "user", "content": "Hi! What do you do for a living?"},
        {"role": "assistant", "content": "I'm a nurse. I have three kids and I live in Paris."},
        {"role": "user", "content": "That's great! What do you like to do for fun?"},
        {"role": "assistant", "content": "I love to paint."},
        {"role": "user", "content": "Wow, that sounds relaxing."},
    ]
    assert await extractor.extract(conversation) == []


async def test_mixed_conversation_and_determinism(extractor: RuleExtractor) -> None:
    conversation = [
        {"role": "user", "content": "Hi, how are you? I'm doing well."},
        {"role": "assistant", "content": "Great! I love hiking in the mountains."},
        {"role": "user", "content": "Me too! I also have two dogs that come along."},
        {"role": "assistant", "content": "I have a cat."},
        {"role": "user", "content": "Can you suggest dog-friendly trails near Denver?"},
    ]
    first = await extractor.extract(conversation)
    assert [(c.text, c.message_index) for c in first] == [
        ("The user loves hiking in the mountains.", 2),
        ("The user also has two dogs that come along.", 2),
    ]
    assert await extractor.extract(conversation) == first
    for c in first:
        assert quote_is_grounded(conversation, c.message_index, c.quote)


async def test_every_quote_is_grounded_across_all_cases(extractor: RuleExtractor) -> None:
    messages = [m for m, _ in FACTS] + [m for _, m in NOTHING]
    conversation: Conversation = []
    for m in messages:
        conversation += [
            {"role": "assistant", "content": "I love hiking."},
            {"role": "user", "content": m},
        ]
    candidates = await extractor.extract(conversation)
    assert candidates
    for c in candidates:
        assert quote_is_grounded(conversation, c.message_index, c.quote), c
