"""Resident memory of a real `tailor serve` process, idle and after /v1/select calls.

    .venv/bin/python bench/serve_memory.py [--selects 50] [--data-dir DIR] [--repo DIR]
        [--json OUT]

The server runs on the shipped models with a fresh SQLite file; TAILOR_LLM_BASE_URL points at an
address where nothing answers, so no embedded LLM child is started (its memory is another
process's anyway) and nothing here calls an LLM. ``--data-dir`` keeps the derived CPU graphs
between runs (default: a temporary one, so the first start derives them). VmRSS and VmHWM come
from /proc/<pid>/status: once /readyz answers 200 (every model loaded and probed), and after a
user of 60 attributes (the everyday test profiles' facts) was created and ``--selects`` prompts
selected for, of the server process (the supervisor's child: `tailor serve` supervises it by
default) and, once ready, of the supervisor (``supervisor``). Also lists the heavy libraries the
server process maps, which should be none.
``--repo`` serves another checkout of the service with this interpreter (e.g. a ``git worktree``
of an older commit, to measure "before"; the interpreter must have that commit's packages).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import free_port, server_pid

from service.config import REPO_ROOT, available_cpus

HEAVY = ("torch", "transformers", "sentence_transformers", "matplotlib", "sklearn", "scipy/")


def status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[f"{key}_MiB"] = round(int(value.split()[0]) / 1024)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--selects", type=int, default=50)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--repo", type=Path, default=REPO_ROOT)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="serve-memory-"))
    data_dir = args.data_dir or scratch
    env = dict(
        os.environ,
        TAILOR_DATA_DIR=str(data_dir),
        TAILOR_DATABASE_URL=f"sqlite+aiosqlite:///{scratch / 'tailor.db'}",
        TAILOR_LLM_BASE_URL="http://127.0.0.1:9/v1",
        TAILOR_LOG_LEVEL="warning",
        PYTHONPATH=str(args.repo.resolve()),
    )
    tailor = [sys.executable, "-m", "service.cli"]
    where = subprocess.run(
        [sys.executable, "-c", "import service; print(service.__file__)"],
        env=env,
        cwd=args.repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run([*tailor, "migrate"], env=env, cwd=args.repo, check=True, capture_output=True)
    key = subprocess.run(
        [*tailor, "admin", "create-tenant", "memory"],
        env=env,
        cwd=args.repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[-1]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    log = (scratch / "server.log").open("wb")
    proc = subprocess.Popen(
        [*tailor, "serve", "--port", str(port)],
        env=env,
        cwd=args.repo,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit((scratch / "server.log").read_text())
            try:
                if httpx.get(f"{base}/readyz", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        time.sleep(2)
        server = server_pid(proc.pid)
        idle = status(server)
        supervisor = status(proc.pid) if server != proc.pid else None
        maps = Path(f"/proc/{server}/maps").read_text().splitlines()
        # The packages of the heavy libraries mapped (site-packages/<package>/...).
        heavy = sorted(
            {
                m.split("site-packages/", 1)[1].split("/", 1)[0]
                for m in maps
                if "site-packages/" in m and any(h in m for h in HEAVY)
            }
        )
        rows = [
            json.loads(line)
            for line in (REPO_ROOT / "datasets/everyday/relevance/test.jsonl").open()
        ]
        facts = list(dict.fromkeys(a for r in rows for a in r["attributes"]))[:60]
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            for fact in facts:
                client.post("/v1/users/u/attributes", json={"text": fact}).raise_for_status()
            for i in range(args.selects):
                body = {"user_id": "u", "prompt": rows[i % len(rows)]["prompt"]}
                client.post("/v1/select", json=body).raise_for_status()
        after = status(server)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    report = {
        "service": where,
        "ready_s": round(ready_s, 1),
        "idle": idle,
        f"after_{args.selects}_selects": after,
        "supervisor": supervisor,
        "heavy_packages_mapped": heavy,
        "cpus": available_cpus(),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
