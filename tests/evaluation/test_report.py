"""The Markdown report and the PNG chart of a run."""

from __future__ import annotations

from typing import Any

from service.evaluation.report import (
    REFERENCES,
    chart_png,
    label_heights,
    markdown,
    ordered_keys,
)

RESULTS: dict[str, Any] = {
    "accuracy": 0.75,
    "n": 40,
    "ci95": [0.6, 0.87],
    "judge": "llm",
    "seed": 0,
    "position_consistency": 0.8,
    "tokens": 1234,
    "unparsed": 2,
    "wall_time_s": 1.5,
    "by_split_tier": {
        "specific/easy": {"accuracy": 0.8, "n": 20, "ci95": [0.6, 0.95]},
        "specific/hard": {"accuracy": 0.7, "n": 20, "ci95": [0.5, 0.9]},
    },
    "problems": ["data/specific/easy.jsonl:3: not JSON (x)"],
    "problems_total": 1,
}


def test_markdown_has_the_table_references_and_problems() -> None:
    text = markdown(
        {"run_id": "r1", "params": {"dataset": "pf", "judge": "llm"}, "results": RESULTS},
        chart_url="chart.png",
    )
    assert "| specific/easy | 20 | 80.0% | 60.0-95.0% |" in text
    assert "Position consistency: 80.0%" in text
    assert "Tokens: 1234" in text
    assert "77.0%" in text and "73.1%" in text and "50.0%-54.0%" in text
    assert "easy.jsonl:3" in text
    assert "![accuracy by tier](chart.png)" in text
    assert len(REFERENCES) == 3


def test_chart_is_a_png() -> None:
    png = chart_png(RESULTS)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 5000


def test_tiers_are_in_their_natural_order() -> None:
    # As the runner stores them: sorted as strings, so hard before medium.
    keys = [
        "general/easy",
        "general/hard",
        "general/medium",
        "specific/easy",
        "specific/extreme",
        "specific/hard",
        "specific/beyond",
        "specific/medium",
    ]
    assert ordered_keys(keys) == [
        "general/easy",
        "general/medium",
        "general/hard",
        "specific/easy",
        "specific/medium",
        "specific/hard",
        "specific/beyond",
        "specific/extreme",
    ]
    assert ordered_keys(["hard", "medium", "easy"]) == ["easy", "medium", "hard"]


def test_markdown_lists_tiers_in_their_natural_order() -> None:
    cell = {"accuracy": 0.5, "n": 2, "ci95": [0.0, 1.0]}
    results = {
        "by_split_tier": {k: cell for k in ("specific/easy", "specific/hard", "specific/medium")}
    }
    text = markdown({"run_id": "r", "params": {}, "results": results})
    rows = [
        line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| specific/")
    ]
    assert rows == ["specific/easy", "specific/medium", "specific/hard"]


def test_value_labels_sit_above_the_error_bars() -> None:
    accuracy, above = [0.8, 0.3, 0.95], [0.15, 0.02, 0.05]
    for a, h, y in zip(accuracy, above, label_heights(accuracy, above), strict=True):
        assert y > a + h


def test_chart_with_a_full_interval_is_a_png() -> None:
    cell = {"accuracy": 1.0, "n": 3, "ci95": [1.0, 1.0]}
    png = chart_png({"by_split_tier": {"specific/hard": cell, "specific/easy": cell}})
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
