"""The verifier reads stored third-person statements in the first person it was trained on."""

from __future__ import annotations

import pytest

from service.pipeline.verify import first_person


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
        ("I have a dog.", "I have a dog."),
    ],
)
def test_first_person(stored: str, read: str) -> None:
    assert first_person(stored) == read
