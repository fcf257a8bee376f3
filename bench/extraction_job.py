"""The per-turn extraction job's model work, one turn at a time, as the job runs it.

    .venv/bin/python bench/extraction_job.py [--models models] [--turns 300]
        [--extractor learned] [--json OUT]

Turns: every user message of the written extraction test chats (datasets/extraction/test.jsonl)
as the job sees it (``turn_window``: that message and the assistant message before it). For
each turn the bench times ``service.pipeline.extract.judge``: the extractor (for "learned": the
segmenter, the extractor model through its micro-batcher, the rewrite), the grounding check,
the verifier on every candidate, and the embeddings of the supported ones, which is everything
the job's prepare step does before its database transaction. Reported: p50/p95/max and the
candidates per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from pathlib import Path
from typing import Literal, cast

import numpy as np
from common import emit

from service.config import REPO_ROOT, Settings, available_cpus
from service.evaluation.extraction import load_rows
from service.inference import ModelRegistry
from service.pipeline.budget import request_budget
from service.pipeline.extract import Judged, judge
from service.pipeline.extractors import choose
from service.pipeline.turn_extraction import turn_window


async def main() -> tuple[dict, str | None]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=str(REPO_ROOT / "models"))
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--extractor", default="learned", choices=["learned", "rules"])
    parser.add_argument("--json")
    args = parser.parse_args()
    settings = Settings(models_dir=Path(args.models))
    registry = await asyncio.to_thread(ModelRegistry.load, settings)
    await registry.start()
    rows = load_rows(REPO_ROOT / "datasets" / "extraction" / "test.jsonl")
    turns = [
        turn_window(row["conversation"][: i + 1])[0]
        for row in rows
        for i, m in enumerate(row["conversation"])
        if m["role"] == "user"
    ][: args.turns]
    name = cast(Literal["learned", "rules"], args.extractor)

    async def one_job(window: list[dict[str, str]]) -> list[Judged]:
        # As the job does: a fresh budget, and the extractor that charges it.
        budget = request_budget(settings.batch_queue_size, settings.job_max_model_tokens)
        extractor = choose(name, settings, None, registry, budget)
        return await judge(window, extractor, registry, budget=budget)

    try:
        await one_job(turns[0])  # warm-up
        times, candidates = [], []
        for window in turns:
            t0 = time.perf_counter()
            judged = await one_job(window)
            times.append((time.perf_counter() - t0) * 1000)
            candidates.append(len(judged))
    finally:
        await registry.aclose()
    report = {
        "extractor": args.extractor,
        "turns": len(turns),
        "job_model_work_p50_ms": round(float(np.percentile(times, 50)), 2),
        "job_model_work_p95_ms": round(float(np.percentile(times, 95)), 2),
        "job_model_work_max_ms": round(float(np.max(times)), 2),
        "candidates_per_turn": round(float(np.mean(candidates)), 2),
        "user_words_per_turn": round(
            float(np.mean([len(t[-1]["content"].split()) for t in turns])), 1
        ),
        "machine": f"{platform.machine()} {platform.processor() or ''} {available_cpus()} CPUs "
        f"({os.cpu_count()} visible)",
        "models": args.models,
    }
    return report, args.json


def run() -> None:
    report, out = asyncio.run(main())
    emit(report, out)


if __name__ == "__main__":
    run()
