from __future__ import annotations

import numpy as np

from service.evaluation import relevance

ROWS = [
    {
        "prompt": "Book a table at an Italian restaurant tonight",
        "attributes": [
            "Restaurants - Cuisine Preference: Italian, Thai",
            "Music - Genre: jazz",
            "Restaurants - Price Range: moderate",
            "Books - Genre: history",
        ],
        "relevant": [0, 2],
    },
    {
        "prompt": "Play some music for my workout",
        "attributes": ["Music - Genre: rock", "Fitness - Goal: endurance", "Books - Genre: poetry"],
        "relevant": [0],
    },
]


def test_select_respects_threshold_and_cap() -> None:
    scores = np.array([0.9, 0.8, 0.7, 0.1])
    assert relevance.select(scores, 0.5, cap=2).tolist() == [True, True, False, False]
    assert relevance.select(scores, 0.75, cap=5).tolist() == [True, True, False, False]


def test_metrics_of_a_perfect_scorer() -> None:
    scores = [relevance.gold_mask(r).astype(np.float32) for r in ROWS]
    m = relevance.metrics(scores, ROWS, 0.5, cap=6)
    assert m["f1"] == 1.0
    assert m["selection_rate"] == m["gold_rate"] == 3 / 7 or abs(m["selection_rate"] - 3 / 7) < 1e-3


def test_bm25_prefers_word_overlap() -> None:
    scores = relevance.bm25_scores(ROWS)
    assert int(np.argmax(scores[0])) == 0  # "Italian" and "restaurant(s)" overlap
    assert scores[0][3] == 0.0


def test_tuned_threshold_is_one_of_the_scores_range() -> None:
    scores = relevance.bm25_scores(ROWS)
    t = relevance.tune_threshold(scores, ROWS, cap=6)
    flat = np.concatenate(scores)
    assert flat.min() <= t <= flat.max()


def test_pair_scores_splits_back_per_row() -> None:
    def fake(pairs: list[tuple[str, str]]) -> np.ndarray:
        return np.array([len(b) for _, b in pairs], dtype=np.float32)

    out = relevance.pair_scores(ROWS, fake)
    assert [len(s) for s in out] == [4, 3]
    assert out[1][0] == len("Music - Genre: rock")
