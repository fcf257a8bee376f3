"""The loader reads the release layout, both spellings of the specific folder, nested personas,
and reports malformed rows with file and line without stopping."""

from __future__ import annotations

import json
from pathlib import Path

from service.evaluation.personafeedback import load


def _write(root: Path) -> None:
    (root / "persona").mkdir(parents=True)
    personas = [
        {
            "Name": "A",
            "Demographics": {"Age": 30},
            "Personality": {},
            "Preference": ["tea"],
            "Bias": {"x": {"y": 1}},
        },
        {"Name": "", "Demographics": {}, "Personality": {}, "Preference": ["coffee"], "Bias": {}},
    ]
    (root / "persona" / "all_personas.jsonl").write_text(
        "\n".join(json.dumps(p) for p in personas) + "\n"
    )
    row = {"user_id": "1", "question": "Drink?", "chosen": "Tea", "reject": "Coffee"}
    (root / "data" / "spedific").mkdir(parents=True)
    (root / "data" / "spedific" / "easy.jsonl").write_text(
        json.dumps(row) + "\n" + "{not json\n" + json.dumps(row | {"user_id": "9"}) + "\n"
    )
    (root / "data" / "general").mkdir(parents=True)
    (root / "data" / "general" / "hard.jsonl").write_text(
        json.dumps(row | {"user_id": "2"}) + "\n" + json.dumps({"user_id": "2"}) + "\n"
    )


def test_release_layout(tmp_path: Path) -> None:
    _write(tmp_path)
    data = load(tmp_path)
    assert [(c.split, c.tier, c.user_id) for c in data.cases] == [
        ("general", "hard", "2"),
        ("specific", "easy", "1"),
    ]
    assert data.cases[1].persona["Bias"] == {"x": {"y": 1}}
    assert data.problems == [
        "data/general/hard.jsonl:2: missing question, chosen, reject",
        "data/spedific/easy.jsonl:2: not JSON (Expecting property name enclosed in double quotes)",
        "data/spedific/easy.jsonl:3: no persona for user_id 9",
    ]


def test_filters(tmp_path: Path) -> None:
    _write(tmp_path)
    assert [c.key for c in load(tmp_path, splits=["specific"]).cases] == ["specific/easy"]
    assert load(tmp_path, tiers=["medium"]).cases == []


TINY = Path(__file__).resolve().parents[1] / "fixtures" / "personafeedback_tiny"


def test_tiny_fixture_reads_both_spellings_and_reports_the_bad_row() -> None:
    data = load(TINY)
    keys = sorted({c.key for c in data.cases})
    assert keys == [
        "general/easy",
        "general/medium",
        "specific/easy",
        "specific/hard",
        "specific/medium",
    ]
    assert len(data.cases) == 8
    # The malformed row is reported with its file and line; the row after it still loads.
    assert len(data.problems) == 1
    assert data.problems[0].startswith("data/spedific/hard.jsonl:2: not JSON")
    hard = [c for c in data.cases if c.key == "specific/hard"]
    assert [c.source for c in hard] == ["data/spedific/hard.jsonl:1", "data/spedific/hard.jsonl:3"]
    ana = next(c for c in data.cases if c.user_id == "1")
    assert ana.persona["Demographics"]["Location"] == {"City": "Porto", "Country": "Portugal"}
