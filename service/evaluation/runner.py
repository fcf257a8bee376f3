"""Run a judge over a PersonaFeedback dataset and summarise it: the code behind both
`tailor eval personafeedback` and POST /v1/eval, so the two give the same figures.

Results (keys fixed in DESIGN.md, more added): accuracy, n, by_split_tier{"specific/easy":
{accuracy, n, ci95, ...}}, ci95, position_consistency, unparsed, tokens, wall_time_s, judge,
problems. Everything except wall_time_s is a function of the cases, the judge and the seed.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service import metrics
from service.evaluation import personafeedback
from service.evaluation.judges import Judge, Verdict
from service.evaluation.personafeedback import Case

BOOTSTRAP_RESAMPLES = 1000
CHUNK_SIZE = 64
MAX_REPORTED_PROBLEMS = 50

Progress = Callable[[int, int], Awaitable[None]]


@dataclass(frozen=True)
class Selection:
    """Which cases of a dataset a run scores. ``limit`` caps each split/tier separately (the
    first ``limit`` rows of each file), so a short run still covers every tier."""

    splits: tuple[str, ...] | None = None
    tiers: tuple[str, ...] | None = None
    limit: int | None = None


def select_cases(root: Path, selection: Selection) -> personafeedback.Dataset:
    data = personafeedback.load(root, selection.splits, selection.tiers)
    if selection.limit is not None:
        taken: dict[str, int] = {}
        kept = []
        for case in data.cases:
            if taken.get(case.key, 0) < selection.limit:
                taken[case.key] = taken.get(case.key, 0) + 1
                kept.append(case)
        data.cases = kept
    return data


def bootstrap_ci(
    correct: np.ndarray, seed: int, resamples: int = BOOTSTRAP_RESAMPLES
) -> list[float]:
    """95% percentile bootstrap interval of the mean of 0/1 outcomes; seeded, so repeatable."""
    n = len(correct)
    if n == 0:
        return [0.0, 0.0]
    rng = np.random.default_rng(seed)
    means = correct[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return [round(float(low), 4), round(float(high), 4)]


def _cell_seed(seed: int, key: str) -> int:
    # Each cell gets its own stream, so adding a split does not shift another's interval.
    return seed * 1_000_003 + zlib.crc32(key.encode())


def summarise(
    cases: Sequence[Case], verdicts: Sequence[Verdict], seed: int, judge: str
) -> dict[str, Any]:
    def block(idx: list[int], key: str) -> dict[str, Any]:
        correct = np.array([verdicts[i].correct for i in idx], dtype=np.float64)
        out: dict[str, Any] = {
            "accuracy": round(float(correct.mean()), 4) if idx else 0.0,
            "n": len(idx),
            "ci95": bootstrap_ci(correct, _cell_seed(seed, key)),
        }
        consistent = [verdicts[i].consistent is True for i in idx]
        out["position_consistency"] = (
            round(sum(consistent) / len(idx), 4) if judge == "llm" and idx else None
        )
        return out

    overall = block(list(range(len(cases))), "all")
    by = {
        key: block([i for i, c in enumerate(cases) if c.key == key], key)
        for key in sorted({c.key for c in cases})
    }
    prompt = sum(v.prompt_tokens for v in verdicts)
    completion = sum(v.completion_tokens for v in verdicts)
    return overall | {
        "by_split_tier": by,
        "judge": judge,
        "seed": seed,
        "unparsed": sum(v.unparsed for v in verdicts) if judge == "llm" else None,
        "tokens": prompt + completion if judge == "llm" else None,
        "prompt_tokens": prompt if judge == "llm" else None,
        "completion_tokens": completion if judge == "llm" else None,
    }


async def run(
    cases: Sequence[Case],
    judge: Judge,
    *,
    seed: int = 0,
    problems: Sequence[str] = (),
    groups: Mapping[str, set[str]] | None = None,
    progress: Progress | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> dict[str, Any]:
    """Score ``cases`` with ``judge`` in fixed chunks (in order) and summarise.

    ``groups`` names subsets of users (e.g. the reward model's held-out topics) to summarise
    separately under ``by_group``. ``progress(done, total)`` is awaited after each chunk.
    """
    started = time.perf_counter()
    verdicts: list[Verdict] = []
    if progress is not None:
        await progress(0, len(cases))
    for start in range(0, len(cases), chunk_size):
        chunk = cases[start : start + chunk_size]
        got = await judge.judge(chunk)
        if len(got) != len(chunk):
            raise RuntimeError(f"judge {judge.name} returned {len(got)} verdicts for {len(chunk)}")
        verdicts.extend(got)
        metrics.EVAL_CASES_SCORED.labels(judge.name).inc(len(chunk))
        if progress is not None:
            await progress(len(verdicts), len(cases))
    result = summarise(cases, verdicts, seed, judge.name)
    if groups:
        result["by_group"] = {}
        for name, users in sorted(groups.items()):
            idx = [i for i, c in enumerate(cases) if c.user_id in users]
            sub = summarise([cases[i] for i in idx], [verdicts[i] for i in idx], seed, judge.name)
            result["by_group"][name] = {
                k: sub[k] for k in ("accuracy", "n", "ci95", "by_split_tier")
            }
    result["problems"] = list(problems[:MAX_REPORTED_PROBLEMS])
    result["problems_total"] = len(problems)
    result["wall_time_s"] = round(time.perf_counter() - started, 3)
    return result
