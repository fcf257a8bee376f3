"""`tailor eval verification|relevance --json` on the shipped models: the last stdout line is
one JSON object with the keys other tools rely on (DESIGN.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.config import REPO_ROOT

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _eval(args: list[str], data_dir: Path) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    env["TAILOR_DATA_DIR"] = str(data_dir)
    out = subprocess.run(
        [sys.executable, "-m", "service.cli", "eval", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


@pytest.mark.skipif(not (REPO_ROOT / "models" / "verifier").is_dir(), reason="no verifier")
def test_eval_verification_keys(shared_data_dir: Path) -> None:
    result = _eval(
        ["verification", "--data", str(REPO_ROOT / "datasets" / "verifier_hard_negatives.jsonl")],
        shared_data_dir,
    )
    for key in ("precision", "recall", "f1", "accuracy", "n"):
        assert key in result
    assert result["n"] == 199
    assert 0.0 <= float(result["f1"]) <= 1.0  # type: ignore[arg-type]


@pytest.mark.skipif(not (REPO_ROOT / "models" / "relevance").is_dir(), reason="no relevance")
def test_eval_relevance_keys(shared_data_dir: Path) -> None:
    result = _eval(
        ["relevance", "--data", str(FIXTURES / "relevance_sample.jsonl")], shared_data_dir
    )
    for key in ("precision", "recall", "f1", "selection_rate", "n"):
        assert key in result
    assert result["n"] == 6
    baselines = result["baselines"]
    assert isinstance(baselines, dict)
    assert set(baselines) == {"bm25", "embedding"}
    assert all("f1" in b for b in baselines.values())


def test_eval_extraction_keys(shared_data_dir: Path) -> None:
    result = _eval(
        ["extraction", "--data", str(FIXTURES / "extraction_sample.jsonl")], shared_data_dir
    )
    for key in ("precision", "recall", "f1", "partner_leak_rate", "n"):
        assert key in result
    assert result["n"] == 5
