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
