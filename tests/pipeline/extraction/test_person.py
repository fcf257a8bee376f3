"""The person module: a user's clause as a statement about the user (every other word kept), a
stored statement read in the first person as the verifier reads it, and the neutral form that
extraction evaluation compares."""

from __future__ import annotations

import pytest

from service.pipeline.extraction.person import first_person, neutral, third_person

CASES = [
    ("I can't stand horror movies", "The user can't stand horror movies."),
    ("I always pick a window seat", "The user always picks a window seat."),
    ("opera puts me to sleep", "Opera puts the user to sleep."),
    (
        "At 67 I'm finally doing my first solo trip",
        "At 67 the user is finally doing their first solo trip.",
    ),
    ("Next year I marry my fiancée", "Next year the user marries their fiancée."),
    ("my sister is a nurse", "The user's sister is a nurse."),
    ("we have two cats", "The user has two cats."),
    ("we're moving to Berlin in June", "The user is moving to Berlin in June."),
    ("been vegan since 2015", "The user has been vegan since 2015."),
    ("allergic to shellfish", "The user is allergic to shellfish."),
    ("Knitting is my passion", "Knitting is the user's passion."),
    ("I'm a nurse on nights", "The user is a nurse on nights."),
    ("im 34 and live in leeds", "The user is 34 and lives in leeds."),
    ("I work from home on fridays", "The user works from home on fridays."),
    ("I've got a 2012 Corolla", "The user has a 2012 Corolla."),
    ("I usually run before work", "The user usually runs before work."),
    ("I sometimes work weekends", "The user sometimes works weekends."),
    ("I quit smoking in 2019", "The user quit smoking in 2019."),
    ("I used to live in Lyon", "The user used to live in Lyon."),
    ("i dont eat pork", "The user doesn't eat pork."),
    ("love jazz", "The user loves jazz."),
    ("grew up in Ohio", "The user grew up in Ohio."),
    ("Me and my wife love hiking", "The user and their wife love hiking."),
    ("I really enjoy cooking for my kids", "The user really enjoys cooking for their kids."),
    ("and I teach year 6", "The user teaches year 6."),
    ("as a teacher on a budget", "The user is a teacher on a budget."),
    ("two boys, 5 and 8", "The user: two boys, 5 and 8."),
    # "-ly" adverbs before the verb leave it alone; "-ly" verbs still agree.
    ("I finally decided to learn korean", "The user finally decided to learn korean."),
    ("I eventually quit", "The user eventually quit."),
    ("I nearly always cycle", "The user nearly always cycles."),
    ("I fly to Paris monthly", "The user flies to Paris monthly."),
    ("I rely on my car", "The user relies on their car."),
    ("I only eat fish", "The user only eats fish."),
    # Texting forms of the subject and its verb.
    ("i m a nurse", "The user is a nurse."),
    ("we r getting married in may", "The user is getting married in may."),
    ("we've got two dogs", "The user has two dogs."),
    ("i r vegan", "The user is vegan."),
    # The clause starts at the user in "My fiancé and I are getting married".
    ("I are getting married in September", "The user is getting married in September."),
    # No subject: the verb opens the clause, possibly after adverbs.
    ("already have my full G", "The user already has their full G."),
    (
        "have never read a note of music in my life",
        "The user has never read a note of music in their life.",
    ),
    ("love my job", "The user loves their job."),
    ("never eat pork", "The user never eats pork."),
    ("earn 60k", "The user earns 60k."),
    # ...but a verb-like word followed by "is" is a noun.
    ("work is killing me", "Work is killing the user."),
    # A chat filler closes off an answer to something else.
    ("not much lol im the oldest of 4", "The user is the oldest of 4."),
]


@pytest.mark.parametrize(("clause", "expected"), CASES)
def test_third_person(clause: str, expected: str) -> None:
    assert third_person(clause) == expected


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        ("The user is a nurse.", "I am a nurse."),
        ("The user has two cats.", "I have two cats."),
        ("The user's sister is a nurse.", "My sister is a nurse."),
        ("The user usually prefers tea.", "I usually prefer tea."),
        # Adverbs that do not end in -ly used to be conjugated themselves ("I alway picks").
        ("The user always picks a window seat.", "I always pick a window seat."),
        ("The user sometimes works weekends.", "I sometimes work weekends."),
        ("The user never drinks coffee.", "I never drink coffee."),
        ("The user no longer eats meat.", "I no longer eat meat."),
        ("The user can't stand horror movies.", "I can't stand horror movies."),
        ("The user loves their dog.", "I love my dog."),
        # A verb that ends the statement keeps its period and still changes person.
        ("The user smokes.", "I smoke."),
        ("The user rarely runs.", "I rarely run."),
        ("The user rents, and their landlord is slow.", "I rent, and my landlord is slow."),
        ("The user finally got a dog.", "I finally got a dog."),
        ("I have a dog.", "I have a dog."),
    ],
)
def test_first_person(stored: str, read: str) -> None:
    assert first_person(stored) == read


@pytest.mark.parametrize(
    ("text", "person", "expected"),
    [
        ("I am a teacher.", "first", "a teacher"),
        ("The user is a teacher.", "third", "a teacher"),
        ("I'm a teacher.", "first", "a teacher"),
        ("I have two dogs.", "first", "have two dogs"),
        ("I've got two dogs.", "first", "have two dogs"),
        ("The user has two dogs.", "third", "have two dogs"),
        ("My favorite color is blue.", "first", "favorite color is blue"),
        ("The user's favorite color is blue.", "third", "favorite color is blue"),
        ("I do not drink alcohol.", "first", "do not drink alcohol"),
        ("The user doesn't drink alcohol.", "third", "do not drink alcohol"),
        ("The user likes to ride their motorbike.", "third", "likes to ride motorbike"),
        (
            "I love cooking but i also enjoy fishing.",
            "first",
            "love cooking but also enjoy fishing",
        ),
        ("I am.", "first", "i am."),  # nothing but markers: kept as it was, lower-cased
    ],
)
def test_neutral_form(text: str, person: str, expected: str) -> None:
    assert neutral(text, person) == expected  # type: ignore[arg-type]
