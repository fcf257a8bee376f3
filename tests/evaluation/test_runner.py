"""The runner: fixed chunks, seeded bootstrap intervals, the DESIGN.md keys, and the same
numbers for the same inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from service.evaluation.judges import RandomJudge
from service.evaluation.runner import Selection, bootstrap_ci, run, select_cases

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "personafeedback_tiny"


def test_bootstrap_ci_is_seeded_and_brackets_the_mean() -> None:
    outcomes = np.array([1.0] * 70 + [0.0] * 30)
    low, high = bootstrap_ci(outcomes, seed=3)
    assert low < 0.7 < high
    assert low > 0.55 and high < 0.85
    assert bootstrap_ci(outcomes, seed=3) == [low, high]
    assert bootstrap_ci(np.array([]), seed=0) == [0.0, 0.0]
    assert bootstrap_ci(np.ones(5), seed=0) == [1.0, 1.0]


def test_limit_caps_each_split_tier() -> None:
    data = select_cases(TINY, Selection(limit=1))
    keys = [c.key for c in data.cases]
    assert sorted(keys) == sorted(set(keys))  # one per cell
    assert len(keys) == 5
    only = select_cases(TINY, Selection(splits=("specific",), tiers=("hard",)))
    assert {c.key for c in only.cases} == {"specific/hard"}


async def test_run_keys_progress_and_repeatability() -> None:
    data = select_cases(TINY, Selection())
    seen: list[tuple[int, int]] = []

    async def progress(done: int, total: int) -> None:
        seen.append((done, total))

    first = await run(
        data.cases, RandomJudge(1), seed=1, problems=data.problems, progress=progress, chunk_size=3
    )
    assert seen == [(0, 8), (3, 8), (6, 8), (8, 8)]
    assert first["n"] == 8
    assert set(first["by_split_tier"]) == {
        "general/easy",
        "general/medium",
        "specific/easy",
        "specific/hard",
        "specific/medium",
    }
    for cell in first["by_split_tier"].values():
        assert set(cell) >= {"accuracy", "n", "ci95"}
        assert cell["ci95"][0] <= cell["accuracy"] <= cell["ci95"][1]
    correct = [v.correct for v in await RandomJudge(1).judge(data.cases)]
    assert first["accuracy"] == round(sum(correct) / 8, 4)
    assert first["problems_total"] == 1 and "hard.jsonl:2" in first["problems"][0]
    assert first["judge"] == "random" and first["tokens"] is None

    second = await run(data.cases, RandomJudge(1), seed=1, problems=data.problems)
    for doc in (first, second):
        doc.pop("wall_time_s")
    assert first == second


async def test_groups_summarise_subsets_of_users() -> None:
    data = select_cases(TINY, Selection())
    result = await run(data.cases, RandomJudge(0), groups={"ana": {"1"}, "others": {"2", "3"}})
    assert result["by_group"]["ana"]["n"] == 3
    assert result["by_group"]["others"]["n"] == 5
