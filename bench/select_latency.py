"""The selector's model work for a user with 90 stored attributes, one caller at a time.

    .venv/bin/python bench/select_latency.py [--models models] [--prompts 200]
        [--prefilter 8,16,32] [--json OUT]

Users: the written test profiles (datasets/everyday/relevance/test.jsonl), each padded to 90
attributes with facts of other test profiles (never relevant to the prompt), stored vectors
precomputed as the service stores them at write time. For each prompt the bench embeds the
prompt (timed apart: the embedder is the lean-serving issue's) and then times
``service.pipeline.select.rank``: the cosine prefilter, the relevance cross-encoder on the
shortlist through its micro-batcher, the threshold and the cap; "model work" in the issue's
words. Only timings: the padding facts are other people's, and some of them would be relevant
to the prompt were they this user's, so P/R/F1 against the writers' labels would mislead here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import time
from pathlib import Path

import numpy as np
from common import emit

from service.config import REPO_ROOT, Settings, available_cpus
from service.evaluation.relevance import load_rows
from service.inference import ModelRegistry
from service.pipeline.select import Item, rank

ATTRIBUTES = 90


def users(rows: list[dict], seed: int = 13) -> list[tuple[dict, list[str]]]:
    rng = random.Random(seed)
    pool: dict[str, list[str]] = {}
    for r in rows:
        pool.setdefault(r["profile_id"], r["attributes"])
    out = []
    for r in rows:
        others = [a for pid, facts in pool.items() if pid != r["profile_id"] for a in facts]
        own = set(r["attributes"])
        padding = [a for a in rng.sample(others, len(others)) if a not in own]
        out.append((r, r["attributes"] + padding[: ATTRIBUTES - len(r["attributes"])]))
    return out


async def main() -> tuple[dict, str | None]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=str(REPO_ROOT / "models"))
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--prefilter", default="8,16,32")
    parser.add_argument("--json")
    args = parser.parse_args()
    settings = Settings(models_dir=Path(args.models))
    registry = await asyncio.to_thread(ModelRegistry.load, settings)
    await registry.start()
    assert registry.embedder is not None
    rows = load_rows(REPO_ROOT / "datasets" / "everyday" / "relevance" / "test.jsonl")
    cases = users(rows)[: args.prompts]
    texts = sorted({a for _, attrs in cases for a in attrs})
    vectors = dict(zip(texts, registry.embedder.encode(texts), strict=True))
    results = {}
    try:
        for k in (int(x) for x in args.prefilter.split(",")):
            embed_ms, work_ms = [], []
            for row, attrs in cases:
                items = [Item(a, str(i), vectors[a]) for i, a in enumerate(attrs)]
                matrix = np.stack([vectors[a] for a in attrs])
                t0 = time.perf_counter()
                prompt_vector = (await registry.embedder.aencode([row["prompt"]]))[0]
                t1 = time.perf_counter()
                scored = await rank(
                    registry, row["prompt"], prompt_vector, matrix, items, prefilter_k=k
                )
                t2 = time.perf_counter()
                assert len(scored) == len(attrs)
                embed_ms.append((t1 - t0) * 1000)
                work_ms.append((t2 - t1) * 1000)
            results[f"prefilter_{k}"] = {
                "model_work_p50_ms": round(float(np.percentile(work_ms, 50)), 2),
                "model_work_p95_ms": round(float(np.percentile(work_ms, 95)), 2),
                "prompt_embedding_p50_ms": round(float(np.percentile(embed_ms, 50)), 2),
                "prompt_embedding_p95_ms": round(float(np.percentile(embed_ms, 95)), 2),
                "prompts": len(cases),
            }
    finally:
        await registry.aclose()
    report = {
        "attributes_per_user": ATTRIBUTES,
        "machine": f"{platform.machine()} {platform.processor() or ''} {available_cpus()} CPUs "
        f"({os.cpu_count()} visible)",
        "models": args.models,
        "results": results,
    }
    return report, args.json


def run() -> None:
    report, out = asyncio.run(main())
    emit(report, out)


if __name__ == "__main__":
    run()
