from __future__ import annotations

import numpy as np

from service.evaluation.verification import evaluate, pooled_scores

CONV = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "I am a nurse."},
    {"role": "user", "content": "I have two dogs."},
]


def fake_score(pairs: list[tuple[str, str]]) -> np.ndarray:
    """1.0 when the attribute's last word appears in the window's user line."""
    out = []
    for attribute, window in pairs:
        user_line = window.split("user: ", 1)[1]
        out.append(1.0 if attribute.split()[-1].strip(".") in user_line else 0.0)
    return np.array(out, dtype=np.float32)


def test_pooling_takes_best_window_and_names_its_message() -> None:
    rows = [
        {"conversation": CONV, "attribute": "I own dogs.", "supported": True},
        {"conversation": CONV, "attribute": "I am a nurse.", "supported": False},
    ]
    scores, where = pooled_scores(fake_score, rows)
    assert scores.tolist() == [1.0, 0.0]
    assert where == [2, 0]


def test_evaluate_reports_per_category() -> None:
    rows = [
        {"conversation": CONV, "attribute": "I own dogs.", "supported": True, "category": "p"},
        {"conversation": CONV, "attribute": "I am a nurse.", "supported": False, "category": "n"},
    ]
    result = evaluate(fake_score, rows, 0.5)
    assert result["f1"] == 1.0
    assert result["by_category"] == {"n": {"accuracy": 1.0, "n": 1}, "p": {"accuracy": 1.0, "n": 1}}


def test_stored_statements_are_scored_in_the_first_person_like_the_service() -> None:
    seen: list[tuple[str, str]] = []

    def record(pairs: list[tuple[str, str]]) -> np.ndarray:
        seen.extend(pairs)
        return np.zeros(len(pairs), dtype=np.float32)

    rows = [
        {"conversation": CONV, "attribute": "The user has two dogs.", "supported": True},
        {"conversation": CONV, "attribute": "I am a nurse.", "supported": False},
    ]
    pooled_scores(record, rows)
    assert {a for a, _ in seen} == {"I have two dogs.", "I am a nurse."}
