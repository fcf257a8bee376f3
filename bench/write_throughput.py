"""Attribute writes per second against a real `tailor serve`, many clients at once: single
writes (POST /v1/users/{id}/attributes) and batch writes (POST .../attributes:batch, each item
counted as a write), on the embedded SQLite file and on PostgreSQL.

    .venv/bin/python bench/write_throughput.py [--backend sqlite,postgres] [--clients 32]
        [--seconds 30] [--batch-size 20] [--users 64] [--models embedder|all|none]
        [--postgres-url URL] [--json OUT]

Each backend gets a fresh server: SQLite in a new data dir; PostgreSQL in a schema of its own
(created by `tailor migrate`, dropped afterwards). By default the server loads only the
embedder (every write embeds its text; no other model takes part in a write) and no LLM;
``--models all`` loads the shipped set, as `make serve` does; ``--models none`` loads no model
at all, so attributes are stored without vectors and the figures are HTTP and the database
alone (the embedder's own rate bounds the others). Every text is distinct, so
nothing merges. Per phase (after a 3 s warm-up): writes/s, requests/s, latency p50/p95 and the
answers by status; any status but 200/201 (or a connection error) is an error.

The clients run in this process (asyncio, one connection each) on the same machine as the
server, so on a small box they take some of its CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from common import (
    REPO,
    cpu_seconds,
    percentiles,
    report,
    server_pid,
    start_tailor,
    wait_ready,
)

POSTGRES_URL = os.environ.get(
    "TAILOR_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
WORDS = ("jazz", "hiking", "tea", "chess", "sailing", "pottery", "running", "opera", "baking")


def text_for(client: int, n: int, k: int = 0) -> str:
    return f"Client {client} fact {n}.{k}: enjoys {WORDS[(n + k) % len(WORDS)]} on day {n % 7}"


async def phase(
    base: str, key: str, mode: str, args: argparse.Namespace, seconds: float, pid: int
) -> dict[str, Any]:
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    writes = 0
    end = time.perf_counter() + seconds
    tag = secrets.token_hex(3)

    async def client(c: int, http: httpx.AsyncClient) -> None:
        nonlocal writes
        n = 0
        while time.perf_counter() < end:
            user = f"user-{(c * 7 + n) % args.users}"
            if mode == "single":
                path = f"/v1/users/{user}/attributes"
                body: dict[str, Any] = {"text": f"{tag} {text_for(c, n)}"}
                items = 1
            else:
                path = f"/v1/users/{user}/attributes:batch"
                body = {
                    "items": [
                        {"text": f"{tag} {text_for(c, n, k)}"} for k in range(args.batch_size)
                    ]
                }
                items = args.batch_size
            started = time.perf_counter()
            try:
                r = await http.post(path, json=body)
                status = str(r.status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            latencies.append(time.perf_counter() - started)
            statuses[status] += 1
            if status in ("200", "201"):
                writes += items
            n += 1

    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120, limits=limits
    ) as http:
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        await asyncio.gather(*[client(c, http) for c in range(args.clients)])
        elapsed = time.perf_counter() - started
        server_cpu = cpu_seconds(pid) - cpu_before
    requests = sum(statuses.values())
    return {
        "writes_per_s": round(writes / elapsed, 1),
        "requests_per_s": round(requests / elapsed, 1),
        "writes": writes,
        "seconds": round(elapsed, 1),
        # The server's CPU per write: what the rate would be on free cores, whatever else ran.
        "server_cpu_s": round(server_cpu, 1),
        "server_cpu_ms_per_write": round(1000 * server_cpu / writes, 2) if writes else None,
        "latency": percentiles(latencies) if latencies else None,
        "statuses": dict(statuses),
        "errors": {s: n for s, n in statuses.items() if s not in ("200", "201")},
    }


async def drop_schema(url: str, schema: str) -> None:
    from sqlalchemy import text

    from service.store.db import create_engine

    engine = create_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    await engine.dispose()


def wait_serving(client: httpx.Client, server: Any, logs: Path) -> None:
    """Until /healthz answers (with only the embedder loaded /readyz stays 503: the verifier
    and relevance models are missing, and writes do not need them)."""
    deadline = time.monotonic() + 300
    while True:
        try:
            if client.get("/healthz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise SystemExit(f"the server did not start; see {logs}")
        time.sleep(0.5)


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"tailor-writes-{backend}-"))
    settings = {"TAILOR_LOAD_LLM": "false"}
    if args.models == "none":
        settings["TAILOR_LOAD_MODELS"] = "false"
    elif args.models == "embedder":
        settings["TAILOR_MODELS_DIR"] = str(data_dir / "no-classifiers")
        settings["TAILOR_EMBEDDER_PATH"] = str(REPO / "models" / "embedder")
    schema = None
    if backend == "postgres":
        schema = f"bench_writes_{os.getpid()}_{secrets.token_hex(3)}"
        settings["TAILOR_DATABASE_URL"] = args.postgres_url
        settings["TAILOR_DATABASE_SCHEMA"] = schema
    server, base, key = start_tailor(data_dir, **settings)
    logs = data_dir / "server.log"
    out: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=base, timeout=30) as c:
            if args.models == "all":
                wait_ready(c, server, logs)
            else:
                wait_serving(c, server, logs)
        pid = server_pid(server.pid)  # the server process, not its supervisor
        asyncio.run(phase(base, key, "single", args, 3.0, pid))  # warm-up: connections, caches
        out["single"] = asyncio.run(phase(base, key, "single", args, args.seconds, pid))
        out["batch"] = asyncio.run(phase(base, key, "batch", args, args.seconds, pid))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        if schema is not None:
            asyncio.run(drop_schema(args.postgres_url, schema))
    locked = logs.read_text(errors="replace").count("database is locked")
    out["server_log_database_is_locked"] = locked
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="sqlite,postgres")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--models", choices=["embedder", "all", "none"], default="embedder")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    results = {b: run_backend(b, args) for b in args.backend.split(",")}
    report(
        results,
        args.json,
        clients=args.clients,
        seconds_per_phase=args.seconds,
        batch_size=args.batch_size,
        users=args.users,
        models=args.models,
    )


if __name__ == "__main__":
    main()
