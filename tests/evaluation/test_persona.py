from __future__ import annotations

from service.evaluation.persona import MAX_CHARS, persona_text, reward_query


def test_nested_persona_record_preference_first() -> None:
    persona = {
        "Name": "Ana",
        "Demographics": {"Age": 34, "Location": {"City": "Lisbon", "Country": "Portugal"}},
        "Personality": {"Traits": ["curious", "direct"]},
        "Preference": ["Prefers concise answers", "Vegetarian"],
        "Bias": {},
    }
    text = persona_text(persona)
    assert text.startswith("Prefers concise answers; Vegetarian")
    assert "City: Lisbon" in text
    assert "Traits: curious; direct" in text
    assert "Bias" not in text  # empty values are left out


def test_long_persona_is_truncated_and_query_has_question() -> None:
    persona = {"Preference": ["x" * 5000]}
    assert len(persona_text(persona)) == MAX_CHARS
    assert reward_query({"Preference": ["likes tea"]}, " What to drink? ").endswith(
        "Question: What to drink?"
    )
