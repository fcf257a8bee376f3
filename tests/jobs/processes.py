"""Real service processes with the test job kind of ``tests/jobs/server.py``: started on a test
database, killed, waited for."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import httpx

from service.config import REPO_ROOT
from tests.conftest import Database


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_worker_process(
    db: Database,
    data_dir: Path,
    marks: Path,
    *,
    hang: bool,
    log: Path,
    lease_s: float = 2.0,
    heartbeat_s: float = 0.5,
    concurrency: int = 1,
) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m tests.jobs.server``: the app with its job worker and the ``mark`` kind;
    with ``hang`` every ``mark`` job's prepare hangs for good (after touching its marker)."""
    port = free_port()
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    child_env |= {
        "PYTHONPATH": str(REPO_ROOT),
        "TAILOR_DATA_DIR": str(data_dir),
        "TAILOR_DATABASE_URL": db.url,
        "TAILOR_LOAD_MODELS": "false",
        "TAILOR_LOAD_LLM": "false",
        "TAILOR_JOBS_CONCURRENCY": str(concurrency),
        "TAILOR_JOBS_POLL_INTERVAL_S": "0.1",
        "TAILOR_JOBS_LEASE_S": str(lease_s),
        "TAILOR_JOBS_HEARTBEAT_S": str(heartbeat_s),
        "JOBS_TEST_DIR": str(marks),
        "JOBS_TEST_HANG": "1" if hang else "0",
    }
    if db.schema:
        child_env["TAILOR_DATABASE_SCHEMA"] = db.schema
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.jobs.server", str(port)],
            cwd=REPO_ROOT,
            env=child_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return proc, f"http://127.0.0.1:{port}"


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def wait_ready(proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"server exited: {tail(log)}")
            with suppress(httpx.HTTPError):
                if (await client.get(f"{base}/readyz", timeout=1)).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    proc.kill()
    raise AssertionError(f"server did not become ready: {tail(log)}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
