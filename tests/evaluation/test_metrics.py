from __future__ import annotations

import numpy as np

from service.evaluation.metrics import best_f1_threshold, binary, recall_at_precision


def test_binary_counts() -> None:
    m = binary([True, True, False, False, True], [True, False, False, True, True])
    assert (m.tp, m.fp, m.fn, m.tn) == (2, 1, 1, 1)
    assert m.precision == 2 / 3
    assert m.recall == 2 / 3
    assert m.accuracy == 3 / 5


def test_best_threshold_separates_perfectly_separable_scores() -> None:
    scores = np.array([0.1, 0.2, 0.35, 0.6, 0.7, 0.9])
    gold = np.array([False, False, False, True, True, True])
    t, m = best_f1_threshold(scores, gold)
    assert 0.35 < t < 0.6
    assert m.f1 == 1.0


def test_recall_at_precision() -> None:
    scores = np.array([0.9, 0.8, 0.7, 0.6])
    gold = np.array([True, False, True, True])
    assert recall_at_precision(scores, gold, 1.0) == 1 / 3
    assert recall_at_precision(scores, gold, 0.75) == 1.0
