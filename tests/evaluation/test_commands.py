"""`tailor eval verification|relevance --json` on the shipped models: the last stdout line is
one JSON object with the keys other tools rely on (DESIGN.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def test_eval_extraction_with_the_verifier_keeps_a_subset(shared_data_dir: Path) -> None:
    data = str(FIXTURES / "extraction_sample.jsonl")
    raw = _eval(["extraction", "--data", data, "--limit", "3"], shared_data_dir)
    verified = _eval(["extraction", "--data", data, "--limit", "3", "--verify"], shared_data_dir)
    assert raw["n"] == verified["n"] == 3
    assert verified["verified"] is True and raw["verified"] is False
    assert verified["predictions"] <= raw["predictions"]


TINY = FIXTURES / "personafeedback_tiny"


def test_eval_personafeedback_random_keys_and_repeatability(tmp_path: Path) -> None:
    args = ["personafeedback", "--data", str(TINY), "--judge", "random", "--seed", "5"]
    first = _eval(args, tmp_path)
    assert first["n"] == 8 and first["judge"] == "random"
    by = first["by_split_tier"]
    assert isinstance(by, dict)
    assert set(by) == {
        "general/easy",
        "general/medium",
        "specific/easy",
        "specific/hard",
        "specific/medium",
    }
    for cell in by.values():
        assert set(cell) >= {"accuracy", "n", "ci95"}
    assert first["problems_total"] == 1
    second = _eval(args, tmp_path)
    first.pop("wall_time_s")
    second.pop("wall_time_s")
    assert first == second


@pytest.mark.skipif(not (REPO_ROOT / "models" / "reward").is_dir(), reason="no reward model")
def test_eval_personafeedback_reward(shared_data_dir: Path) -> None:
    args = ["personafeedback", "--data", str(TINY), "--judge", "reward", "--tiers", "easy,hard"]
    result = _eval(args, shared_data_dir)
    assert result["n"] == 6 and result["judge"] == "reward"
    assert set(result["by_split_tier"]) == {"general/easy", "specific/easy", "specific/hard"}  # type: ignore[arg-type]
    # The command's accuracy is the share of cases where the served graph scores the chosen
    # reply over the rejected one. (Not a quality bound: on these six cases the model's margins
    # are as small as 0.002, and int8 kernels differ between CPUs and dynamic quantisation
    # scales activations per batch, so a case may flip with the batch it is scored in: one
    # case of slack. The model's quality is measured on the held-out topics in its card.)
    from service.evaluation import personafeedback
    from service.evaluation.persona import reward_query
    from service.inference.pair_classifier import PairClassifier

    cases = personafeedback.load(TINY, tiers=("easy", "hard")).cases
    reward = PairClassifier.load(
        REPO_ROOT / "models" / "reward", cache_dir=shared_data_dir / "onnx-cache"
    )
    chosen = reward.score([(reward_query(c.persona, c.question), c.chosen) for c in cases])
    rejected = reward.score([(reward_query(c.persona, c.question), c.reject) for c in cases])
    direct = float(np.mean(chosen > rejected))
    assert abs(result["accuracy"] - direct) <= 1 / len(cases) + 1e-4, (result, direct)
    assert _eval(args, shared_data_dir)["accuracy"] == result["accuracy"]


def test_eval_personafeedback_llm_without_backend_fails_clearly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    env["TAILOR_DATA_DIR"] = str(tmp_path)
    env["TAILOR_LOAD_LLM"] = "false"  # no server configured and no embedded model
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "eval",
            "personafeedback",
            "--data",
            str(TINY),
            "--judge",
            "llm",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2
    assert "TAILOR_LLM_BASE_URL" in out.stderr


def test_eval_personafeedback_llm_judge_on_the_embedded_model(tmp_path: Path) -> None:
    args = ["personafeedback", "--data", str(TINY), "--judge", "llm", "--limit", "1"]
    result = _eval(args, tmp_path)
    assert result["judge"] == "llm" and result["n"] >= 4
    assert 0.0 <= result["position_consistency"] <= 1.0
    assert isinstance(result["prompt_tokens"], int) and result["prompt_tokens"] > 0
