"""Idempotency-Key across a SIGKILL of a real server process, on SQLite and PostgreSQL: an
acknowledged write is never lost, and a retry never writes a second time."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from tests.conftest import Database, bearer
from tests.server_process import free_port, wait_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@dataclass
class Server:
    db: Database
    tmp: Path
    proc: subprocess.Popen[bytes] | None = None
    base: str = ""

    def start(self) -> None:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
        env |= {
            "PYTHONPATH": str(REPO_ROOT),
            "TAILOR_DATA_DIR": str(self.tmp / "data"),
            "TAILOR_DATABASE_URL": self.db.url,
            "TAILOR_LOAD_MODELS": "false",
            "TAILOR_LOAD_LLM": "false",
            "TAILOR_JOBS_WORKER": "false",
        }
        if self.db.schema:
            env["TAILOR_DATABASE_SCHEMA"] = self.db.schema
        log = self.tmp / "server.log"
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.server", str(port)],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.base = f"http://127.0.0.1:{port}"
        wait_ready(self.proc, self.base, log, limit_s=60)

    def kill(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=30)


@pytest.fixture
async def server(clean_db: Database, tmp_path: Path) -> AsyncIterator[Server]:
    srv = Server(clean_db, tmp_path)
    try:
        yield srv
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.kill()


async def _tenant(db: Database) -> dict[str, str]:
    engine = create_engine(db.url, schema=db.schema)
    async with transaction(session_factory(engine)) as s:
        issued = await tenants.create_tenant(s, "faults")
    await engine.dispose()
    return bearer(issued.key)


async def _stored(client: httpx.AsyncClient, h: dict[str, str]) -> list[dict[str, str]]:
    r = await client.get("/v1/users/u/attributes", params={"limit": 200}, headers=h)
    assert r.status_code == 200
    return list(r.json()["items"])


async def test_killed_between_commit_and_response_the_retry_replays(server: Server) -> None:
    h = await _tenant(server.db)
    server.start()
    key = h | {"Idempotency-Key": "dies-once"}
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        with pytest.raises(httpx.HTTPError):
            await client.post(
                "/v1/users/u/attributes",
                json={"text": "The user keeps bees."},
                headers=key | {"X-Fault": "die-before-response"},
            )
    assert server.kill() == -signal.SIGKILL
    server.start()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        retry = await client.post(
            "/v1/users/u/attributes", json={"text": "The user keeps bees."}, headers=key
        )
        assert retry.status_code == 201
        assert retry.headers["idempotent-replayed"] == "true"
        stored = await _stored(client, h)
    assert [a["id"] for a in stored] == [retry.json()["id"]]


async def test_write_burst_killed_midway_loses_nothing_and_doubles_nothing(
    server: Server,
) -> None:
    """40 writes from 8 callers, SIGKILL once 10 have been answered, restart, retry every
    write with its key: each text is stored exactly once, every answer names that row, and
    the writes answered before the kill are replayed rather than done again."""
    h = await _tenant(server.db)
    server.start()
    texts = [f"The user owns {n} houseplants." for n in range(40)]
    answered: dict[int, str] = {}
    enough = asyncio.Event()
    gate = asyncio.Semaphore(8)

    async def write(client: httpx.AsyncClient, n: int) -> None:
        async with gate:
            r = await client.post(
                "/v1/users/u/attributes",
                json={"text": texts[n]},
                headers=h | {"Idempotency-Key": f"burst-{n}"},
            )
        if r.status_code == 201:
            answered[n] = r.json()["id"]
        if len(answered) >= 10:
            enough.set()

    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        tasks = [asyncio.create_task(write(client, n)) for n in range(len(texts))]
        await asyncio.wait_for(enough.wait(), timeout=60)
        server.kill()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert 10 <= len(answered) < len(texts)

    server.start()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        retried = {}
        for n, text in enumerate(texts):
            r = await client.post(
                "/v1/users/u/attributes",
                json={"text": text},
                headers=h | {"Idempotency-Key": f"burst-{n}"},
            )
            assert r.status_code == 201, r.text
            retried[n] = r
        stored = await _stored(client, h)
    by_text = {a["text"]: a["id"] for a in stored}
    assert len(stored) == len(texts) == len(by_text)
    for n, r in retried.items():
        assert r.json()["id"] == by_text[texts[n]]
        if n in answered:
            assert r.headers.get("idempotent-replayed") == "true"
            assert answered[n] == r.json()["id"]
