"""Template-made training cases for the verifier's known failure modes.

These train the verifier; the hand-written cases in datasets/verifier_hard_negatives.jsonl are
kept apart as a test set and never trained on. Each template gives a negative and, where it
makes sense, a positive control built from the same words, so the model learns the difference
rather than a topic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    conversation: list[dict[str, str]]
    attribute: str
    supported: bool
    evidence_index: int | None
    category: str


JOBS = [
    "nurse",
    "teacher",
    "firefighter",
    "software engineer",
    "chef",
    "lawyer",
    "pilot",
    "plumber",
    "dentist",
    "photographer",
    "librarian",
    "mechanic",
    "farmer",
    "accountant",
]
RELATIVES = [
    "sister",
    "brother",
    "mom",
    "dad",
    "best friend",
    "husband",
    "wife",
    "cousin",
    "roommate",
    "son",
    "daughter",
    "neighbor",
]
LANGS = ["French", "Spanish", "German", "Japanese", "Italian", "Korean", "Portuguese"]
PHRASES = [
    "good morning",
    "where is the train station",
    "thank you very much",
    "I am hungry",
    "how much does this cost",
    "happy birthday",
]
PETS = ["dog", "cat", "parrot", "rabbit", "horse", "hamster", "snake"]
FOODS = ["meat", "dairy", "sugar", "gluten", "fish", "fast food", "spicy food"]
HOBBIES = [
    "play guitar",
    "run marathons",
    "knit",
    "surf",
    "paint",
    "play chess",
    "hike",
    "bake bread",
    "ski",
    "play basketball",
]
CITIES = ["Chicago", "Berlin", "Toronto", "Austin", "Madrid", "Seattle", "Osaka", "Denver"]
THINGS = [
    "jazz",
    "horror movies",
    "country music",
    "sushi",
    "camping",
    "video games",
    "football",
    "reality TV",
    "poetry",
    "board games",
]
OPENERS = ["Hi there!", "Hey, how's it going?", "Hello!", "Good evening.", "Hey!"]
REPLIES = [
    "That's great to hear.",
    "Nice!",
    "Oh cool.",
    "Interesting!",
    "I see.",
    "That sounds lovely.",
]


def _conv(*turns: str) -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)
    ]


def _cases(rng: random.Random) -> list[Case]:
    job, job2 = rng.sample(JOBS, 2)
    rel = rng.choice(RELATIVES)
    lang = rng.choice(LANGS)
    pet = rng.choice(PETS)
    food = rng.choice(FOODS)
    hobby = rng.choice(HOBBIES)
    city, city2 = rng.sample(CITIES, 2)
    thing = rng.choice(THINGS)
    hi = rng.choice(OPENERS)
    ok = rng.choice(REPLIES)
    return [
        Case(
            _conv(hi, "Hi! What's new?", f"My {rel} just started working as a {job}.", ok),
            f"I am a {job}.",
            False,
            None,
            "other_person",
        ),
        Case(
            _conv(
                hi,
                "Hi! What's new?",
                f"I just started working as a {job}, and my {rel} is a {job2}.",
                ok,
            ),
            f"I am a {job}.",
            True,
            2,
            "positive_control",
        ),
        Case(
            _conv(
                hi,
                "Hi! What's new?",
                f"I just started working as a {job}, and my {rel} is a {job2}.",
                ok,
            ),
            f"I am a {job2}.",
            False,
            None,
            "other_person",
        ),
        Case(
            _conv(
                f"Can you translate '{rng.choice(PHRASES)}' into {lang}?",
                f"Sure, here it is in {lang}.",
                "Thanks!",
            ),
            f"I am learning {lang}.",
            False,
            None,
            "over_generalization",
        ),
        Case(
            _conv(
                hi,
                "How can I help?",
                f"I've been learning {lang} for a couple of years now, can you quiz me?",
            ),
            f"I am learning {lang}.",
            True,
            2,
            "positive_control",
        ),
        Case(
            _conv(hi, f"I'm a {job}, what do you do?", ok),
            f"I am a {job}.",
            False,
            None,
            "partner_stated",
        ),
        Case(
            _conv(hi, f"I'm a {job}, what do you do?", f"No way, me too! I'm also a {job}."),
            f"I am a {job}.",
            True,
            2,
            "positive_control",
        ),
        Case(
            _conv(hi, f"I have a {pet} at home.", f"Do you? I've always wanted a {pet}."),
            f"I have a {pet}.",
            False,
            None,
            "partner_stated",
        ),
        Case(
            _conv(f"Do you like {thing}?", f"I do! {thing.capitalize()} is great.", ok),
            f"I like {thing}.",
            False,
            None,
            "question",
        ),
        Case(
            _conv(f"I really love {thing}, do you?", "I do too!", ok),
            f"I like {thing}.",
            True,
            0,
            "positive_control",
        ),
        Case(
            _conv(hi, "Any plans?", f"If I had a {pet}, I would take it to the park every day."),
            f"I have a {pet}.",
            False,
            None,
            "hypothetical",
        ),
        Case(
            _conv(hi, "Any plans?", f"I'm taking my {pet} to the park, she loves it there."),
            f"I have a {pet}.",
            True,
            2,
            "positive_control",
        ),
        Case(
            _conv(hi, "Want to play a game?", f"Sure, let's pretend I'm a {job} on my first day."),
            f"I am a {job}.",
            False,
            None,
            "roleplay",
        ),
        Case(
            _conv(f"I don't eat {food} anymore, it made me feel awful.", ok),
            f"I eat {food}.",
            False,
            None,
            "negation",
        ),
        Case(
            _conv(f"I don't eat {food} anymore, it made me feel awful.", ok),
            f"I avoid {food}.",
            True,
            0,
            "positive_control",
        ),
        Case(
            _conv(
                hi,
                "Where are you from?",
                f"I used to live in {city}, but I moved to {city2} last year.",
            ),
            f"I live in {city}.",
            False,
            None,
            "past_vs_present",
        ),
        Case(
            _conv(
                hi,
                "Where are you from?",
                f"I used to live in {city}, but I moved to {city2} last year.",
            ),
            f"I live in {city2}.",
            True,
            2,
            "positive_control",
        ),
        Case(
            _conv(f"My {rel} wants to {hobby}. Any tips for a beginner?", "Start slowly."),
            f"I {hobby}.",
            False,
            None,
            "other_person",
        ),
        Case(
            _conv(hi, "What do you do for fun?", f"I {hobby} most weekends."),
            f"I {hobby}.",
            True,
            2,
            "positive_control",
        ),
        Case(
            _conv(
                "Ha, I'm basically a professional couch potato, I've watched 10,000 hours of "
                "TV this week.",
                "Sounds relaxing!",
            ),
            "I watched 10,000 hours of TV this week.",
            False,
            None,
            "joke",
        ),
        Case(
            _conv(
                f"Can you recommend a good {thing} playlist for my {rel}'s party?",
                "Here are a few ideas.",
            ),
            f"I love {thing}.",
            False,
            None,
            "over_generalization",
        ),
    ]


def generate(n_rounds: int, seed: int = 13) -> list[Case]:
    rng = random.Random(seed)
    return [case for _ in range(n_rounds) for case in _cases(rng)]
