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


def test_prompts_where_nothing_applies_are_counted_quiet_only_when_nothing_is_picked() -> None:
    rows = [*ROWS, {"prompt": "what is 17 times 3", "attributes": ["a", "b"], "relevant": []}]
    quiet = [relevance.gold_mask(r).astype(np.float32) for r in rows]
    m = relevance.metrics(quiet, rows, 0.5, cap=6)
    assert m["nothing_applies"] == 1 and m["nothing_selected_when_nothing_applies"] == 1.0
    noisy = [*quiet[:2], np.array([0.9, 0.1], dtype=np.float32)]
    m = relevance.metrics(noisy, rows, 0.5, cap=6)
    assert m["nothing_selected_when_nothing_applies"] == 0.0


def test_figures_by_kind_when_the_corpus_records_kinds() -> None:
    rows = [
        {**ROWS[0], "kind": "direct"},
        {**ROWS[1], "kind": "indirect"},
        {"prompt": "what is 17 times 3", "attributes": ["a", "b"], "relevant": [], "kind": "none"},
    ]
    # The direct prompt gets both of its facts; the indirect one picks the wrong fact; the
    # arithmetic prompt selects something.
    scores = [
        np.array([0.9, 0.1, 0.8, 0.1], dtype=np.float32),
        np.array([0.1, 0.9, 0.1], dtype=np.float32),
        np.array([0.9, 0.1], dtype=np.float32),
    ]
    by_kind = relevance.metrics(scores, rows, 0.5, cap=6, by_kind=True)["by_kind"]
    assert by_kind["direct"] == {"n": 1, "precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert by_kind["indirect"]["recall"] == 0.0 and by_kind["indirect"]["n"] == 1
    assert by_kind["none"] == {"n": 1, "nothing_selected": 0.0}
    assert "by_kind" not in relevance.metrics(scores, rows, 0.5, cap=6)
    assert "by_kind" not in relevance.metrics(scores[:2], ROWS, 0.5, cap=6, by_kind=True)


def test_calibration_keeps_the_selection_rate_near_the_gold_rate() -> None:
    rng = np.random.default_rng(0)
    rows = []
    scores = []
    for _ in range(200):
        gold = rng.random(10) < 0.15
        rows.append(
            {
                "prompt": "p",
                "attributes": [str(i) for i in range(10)],
                "relevant": list(np.flatnonzero(gold)),
            }
        )
        # Informative but noisy: relevant facts score higher on average.
        scores.append((gold * 0.5 + rng.random(10) * 0.7).astype(np.float32))
    t = relevance.calibrate(scores, rows, cap=6, rate_tolerance=0.15)
    m = relevance.metrics(scores, rows, t, cap=6)
    assert abs(m["selection_rate"] - m["gold_rate"]) <= 0.15 * m["gold_rate"]


def test_calibrate_keeps_prompts_where_nothing_applies_quiet_when_asked() -> None:
    """A distractor that outscores half the relevant facts on a fifth of the prompts where
    nothing applies: the best F1 takes it; a quiet floor of 0.85 buys silence with recall."""
    rows, scores = [], []
    for i in range(100):
        attributes = [f"fact {j}" for j in range(4)]
        if i < 50:
            rows.append({"prompt": f"p{i}", "attributes": attributes, "relevant": [0]})
            scores.append(np.array([0.55 if i % 2 else 0.8, 0.3, 0.3, 0.3], dtype=np.float32))
        else:
            rows.append({"prompt": f"p{i}", "attributes": attributes, "relevant": []})
            scores.append(np.array([0.6 if i % 5 == 0 else 0.3, 0.3, 0.3, 0.3], dtype=np.float32))
    loose = relevance.calibrate(scores, rows, cap=3, rate_tolerance=10.0)
    strict = relevance.calibrate(scores, rows, cap=3, rate_tolerance=10.0, min_quiet=0.85)
    m_loose = relevance.metrics(scores, rows, loose, cap=3)
    m_strict = relevance.metrics(scores, rows, strict, cap=3)
    assert m_loose["nothing_selected_when_nothing_applies"] == 0.8
    assert m_loose["recall"] == 1.0
    assert m_strict["nothing_selected_when_nothing_applies"] == 1.0
    assert m_strict["recall"] == 0.5


PROFILES = [
    {
        "profile_id": f"P{p}",
        "prompt": f"prompt {p}",
        "attributes": [f"fact {p}.{i}" for i in range(5)],
        "relevant": [1, 3],
    }
    for p in range(4)
]


def test_pad_rows_adds_only_other_profiles_facts_and_keeps_the_gold() -> None:
    padded = relevance.pad_rows(PROFILES, 12, seed=1)
    for row, original in zip(padded, PROFILES, strict=True):
        assert len(row["attributes"]) == 12 and len(set(row["attributes"])) == 12
        gold = {row["attributes"][i] for i in row["relevant"]}
        assert gold == {original["attributes"][1], original["attributes"][3]}
        own = set(original["attributes"])
        extra = set(row["attributes"]) - own
        assert own <= set(row["attributes"])
        assert all(not a.startswith(f"fact {row['prompt'][-1]}.") for a in extra)


def test_shortlist_scores_read_only_the_adapters_best() -> None:
    from service.inference.relevance_adapter import AdapterCard, RelevanceAdapter

    dim = 5
    adapter = RelevanceAdapter(
        card=AdapterCard(weight=0.0, shortlist=2, embedder="e", dim=dim),
        prompt_u=np.zeros((1, dim, 1), np.float32),
        prompt_v=np.zeros((1, 1, dim), np.float32),
        fact_u=np.zeros((1, dim, 1), np.float32),
        fact_v=np.zeros((1, 1, dim), np.float32),
        scale=np.ones(1, np.float32),
        bias=np.zeros(1, np.float32),
    )
    row = PROFILES[0]
    vectors = relevance.Vectors(
        prompts=np.eye(dim, dtype=np.float32)[[0]],
        facts=[np.eye(dim, dtype=np.float32)[[4, 0, 1, 0, 2]] + 0.01],
        gold=[relevance.gold_mask(row)],
    )
    seen: list[tuple[str, str]] = []

    def score(pairs: list[tuple[str, str]]) -> np.ndarray:
        seen.extend(pairs)
        return np.full(len(pairs), 0.8, np.float32)

    (scores,) = relevance.shortlist_scores(adapter, [row], vectors, score, 0.0, 2)
    assert [a for _, a in seen] == ["fact 0.1", "fact 0.3"]  # the two nearest the prompt
    np.testing.assert_allclose(scores, [0, 0.8, 0, 0.8, 0], rtol=1e-4)
