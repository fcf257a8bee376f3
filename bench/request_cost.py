"""CPU time of the largest model requests the limits allow, against a real `tailor serve`.

    .venv/bin/python bench/request_cost.py [--repeats 5] [--json OUT]

The server runs on its embedded defaults (a fresh SQLite file, the shipped models). For
POST /v1/verify (20 user messages of ~45 tokens, n attributes) and POST /v1/extract (n such
messages, learned extractor) it finds the largest n the per-request budget of model work
(TAILOR_REQUEST_MAX_MODEL_TOKENS) accepts, then measures the server process's CPU time
(user + system, all threads, from /proc) and wall time per request over --repeats requests.
It also sends the request the reliability probe found (50 attributes x 20 messages, 15.8 KB),
which cost 27.8 s of CPU before the budget existed, and reports its answer and CPU time.
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import cpu_seconds, report, server_pid, start_tailor, wait_ready

MESSAGE = (
    "We moved to a flat near the river last spring and I cycle to work every day since, "
    "about forty minutes each way, rain or shine, past the old market ({})."
)


def verify_body(n: int) -> dict[str, Any]:
    return {
        "conversation": [{"role": "user", "content": MESSAGE.format(i)} for i in range(20)],
        "attributes": [f"The user cycles to work on route {i}." for i in range(n)],
    }


def extract_body(n: int) -> dict[str, Any]:
    return {
        "conversation": [{"role": "user", "content": MESSAGE.format(i)} for i in range(n)],
        "extractor": "learned",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="tailor-bench-"))
    server, base, key = start_tailor(data_dir)
    results: dict[str, Any] = {}
    try:
        with httpx.Client(
            base_url=base,
            headers={"Authorization": f"Bearer {key}"},
            timeout=300,
        ) as client:
            wait_ready(client, server, data_dir)

            pid = server_pid(server.pid)  # the server process, not its supervisor

            def cost(path: str, body: dict[str, Any]) -> tuple[int, float, float]:
                cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
                status = client.post(path, json=body).status_code
                return status, cpu_seconds(pid) - cpu0, time.perf_counter() - wall0

            def largest(path: str, build: Any, top: int) -> dict[str, Any]:
                n, over = 0, top + 1  # accepted at n (0: trivially), refused at over
                while over - n > 1:
                    mid = (n + over) // 2
                    n, over = (mid, over) if cost(path, build(mid))[0] == 200 else (n, mid)
                runs = [cost(path, build(n)) for _ in range(args.repeats)]
                assert all(status == 200 for status, _, _ in runs)
                refused = cost(path, build(n + 1))
                return {
                    "largest_n": n,
                    "body_bytes": len(json.dumps(build(n))),
                    "cpu_s_max": round(max(c for _, c, _ in runs), 3),
                    "cpu_s_mean": round(sum(c for _, c, _ in runs) / len(runs), 3),
                    "wall_s_max": round(max(w for _, _, w in runs), 3),
                    "next_size_status": refused[0],
                    "next_size_cpu_s": round(refused[1], 3),
                }

            results["verify"] = largest("/v1/verify", verify_body, 50)
            results["extract"] = largest("/v1/extract", extract_body, 120)
            status, cpu, wall = cost("/v1/verify", verify_body(50))
            results["probe_request_50x20"] = {
                "status": status,
                "body_bytes": len(json.dumps(verify_body(50))),
                "cpu_s": round(cpu, 3),
                "wall_s": round(wall, 3),
            }
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    report(results, args.json)


if __name__ == "__main__":
    main()
