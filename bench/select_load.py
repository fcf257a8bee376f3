"""`POST /v1/select` under concurrent callers, with the server's CPU time per request.

    .venv/bin/python bench/select_load.py [--callers 8] [--requests 400] [--users 30]
        [--threads N] [--json OUT]

A real `tailor serve` on its embedded defaults (SQLite, shipped models) in a fresh data
directory; ``--users`` users each get 90 distinct facts of the written relevance corpus's test
split (batch writes), then ``--callers`` client threads share ``--requests`` selects with the
test split's prompts, round-robin over the users. Reported: requests per second, latency
p50/p95, and the CPU time (user + system, all threads) the server process and the bench's
clients spent per request, read from /proc and the bench's own process. ``--threads`` sets
TAILOR_ONNX_INTRA_OP_THREADS for the server (default: the service's own default).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import (
    REPO,
    concurrent_selects,
    cpu_seconds,
    percentiles,
    report,
    server_pid,
    start_tailor,
    wait_ready,
)

FACTS_PER_USER = 90


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    rows = [
        json.loads(line)
        for line in (REPO / "datasets/everyday/relevance/test.jsonl").read_text().splitlines()
    ]
    facts = sorted({a for r in rows for a in r["attributes"]})
    prompts = [r["prompt"] for r in rows]
    work = Path(tempfile.mkdtemp(prefix="tailor-select-load-"))
    extra = {} if args.threads is None else {"TAILOR_ONNX_INTRA_OP_THREADS": str(args.threads)}
    proc, base, key = start_tailor(work, **extra)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            wait_ready(client, proc, work)
            for u in range(args.users):
                items = [
                    {"text": facts[(u * FACTS_PER_USER + k) % len(facts)]}
                    for k in range(FACTS_PER_USER)
                ]
                for at in range(0, FACTS_PER_USER, 30):
                    client.post(
                        f"/v1/users/u{u}/attributes:batch", json={"items": items[at : at + 30]}
                    ).raise_for_status()
            for p in prompts[:10]:  # warm-up
                client.post("/v1/select", json={"prompt": p, "user_id": "u0"}).raise_for_status()

        queries = [(f"u{i % args.users}", prompts[i % len(prompts)]) for i in range(args.requests)]
        server = server_pid(proc.pid)
        server_before, client_before = cpu_seconds(server), time.process_time()
        done, elapsed = concurrent_selects(base, key, queries, args.callers)
        server_cpu = cpu_seconds(server) - server_before
        client_cpu = time.process_time() - client_before
        results: dict[str, Any] = {
            "callers": args.callers,
            "requests_per_s": round(len(done) / elapsed, 1),
            **percentiles(done),
            "server_cpu_ms_per_request": round(server_cpu * 1000 / len(done), 1),
            "client_cpu_ms_per_request": round(client_cpu * 1000 / len(done), 1),
        }
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    report(
        results,
        args.json,
        users=args.users,
        facts_per_user=FACTS_PER_USER,
        onnx_intra_op_threads=args.threads or "service default",
    )


if __name__ == "__main__":
    main()
