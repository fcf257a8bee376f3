"""The Markdown report and the PNG chart of a run."""

from __future__ import annotations

from typing import Any

from service.evaluation.report import REFERENCES, chart_png, markdown

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
