"""Concurrent writers on the embedded SQLite file: no `database is locked`.

SQLite takes one writer at a time; the transactions of one process queue on an asyncio lock per
file (``service/store/db.py``, ``_WriteGate``) before they ask SQLite for its lock, so 32
concurrent clients all get their 201, and SQLite's busy_timeout only ever waits for other
processes."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.store import db
from service.store.db import (
    DatabaseUnavailable,
    create_engine,
    read_transaction,
    session_factory,
    transaction,
)
from service.store.migrate import upgrade
from service.store.models import Tenant
from tests.conftest import Api, bearer
from tests.server_process import create_tenant, free_port, server_env

CLIENTS = 32


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'tailor.db'}"
    upgrade(url)
    return url


async def test_32_concurrent_writers_all_succeed(api: Api) -> None:
    """32 clients, 4 writes each, at once, through the app (single and batch writes); on
    SQLite and on PostgreSQL."""
    h = bearer(await api.new_tenant())

    async def client(n: int) -> list[int]:
        codes = []
        for i in range(4):
            if i == 3:
                r = await api.client.post(
                    f"/v1/users/user-{n % 8}/attributes:batch",
                    json={"items": [{"text": f"batch fact {n}-{k}"} for k in range(5)]},
                    headers=h,
                )
            else:
                r = await api.client.post(
                    f"/v1/users/user-{n % 8}/attributes",
                    json={"text": f"fact {n}-{i}"},
                    headers=h | {"Idempotency-Key": f"w-{n}-{i}"},
                )
            codes.append(r.status_code)
        return codes

    results = await asyncio.gather(*[client(n) for n in range(CLIENTS)])
    statuses = Counter(code for codes in results for code in codes)
    assert statuses == {201: CLIENTS * 3, 200: CLIENTS}
    total = 0
    for u in range(8):
        page = await api.client.get(
            f"/v1/users/user-{u}/attributes", params={"limit": 200}, headers=h
        )
        total += len(page.json()["items"])
    assert total == CLIENTS * 3 + CLIENTS * 5


async def test_transactions_queue_in_order_across_engines(sqlite_url: str) -> None:
    """Two engines on one file (as two parts of one process would be): a transaction that
    holds the file keeps the other waiting, without SQLite's busy handler; it proceeds as soon
    as the first commits, even with a busy_timeout far shorter than the wait."""
    first, second = create_engine(sqlite_url), create_engine(sqlite_url)
    order: list[str] = []
    holding = asyncio.Event()

    async def hold() -> None:
        async with transaction(session_factory(first)) as s:
            await s.execute(text("PRAGMA busy_timeout=50"))
            s.add(Tenant(name="first"))
            await s.flush()
            holding.set()
            await asyncio.sleep(0.5)  # ten times the busy_timeout
            order.append("first")

    async def wait() -> None:
        await holding.wait()
        async with transaction(session_factory(second)) as s:
            await s.execute(text("PRAGMA busy_timeout=50"))
            order.append("second")
            s.add(Tenant(name="second"))

    try:
        await asyncio.gather(hold(), wait())
        async with transaction(session_factory(second)) as s:
            names = (await s.scalars(select(Tenant.name).order_by(Tenant.name))).all()
    finally:
        await first.dispose()
        await second.dispose()
    assert order == ["first", "second"]
    assert list(names) == ["first", "second"]


async def refused_while_a_write_is_held(
    sessions: async_sessionmaker[AsyncSession],
) -> DatabaseUnavailable:
    """What a write transaction gets while another of this process holds the queue past
    WRITE_QUEUE_TIMEOUT_S (it must be refused; the test fails otherwise)."""
    release, holding = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with transaction(sessions) as s:
            await s.execute(text("SELECT 1"))
            holding.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await holding.wait()
    try:
        with pytest.raises(DatabaseUnavailable) as refused:
            async with transaction(sessions) as s:
                await s.execute(text("SELECT 1"))
    finally:
        release.set()
        await holder
    return refused.value


async def test_the_queue_gives_up_as_busy(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction held far too long: the next one is refused as busy (503 with
    Retry-After in the API) instead of waiting forever."""
    monkeypatch.setattr(db, "WRITE_QUEUE_TIMEOUT_S", 0.2)
    engine = create_engine(sqlite_url)
    sessions = session_factory(engine)
    refused = await refused_while_a_write_is_held(sessions)
    assert refused.reason == "the database is busy"
    assert refused.retry_after == 1
    async with transaction(sessions) as s:  # and the queue works again
        await s.execute(text("SELECT 1"))
    await engine.dispose()


async def test_reads_neither_queue_behind_writes_nor_hold_them_up(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read transaction (authentication, a selection's attributes) reads its snapshot while
    a write transaction of this process and one of another process hold the write lock, and a
    write goes ahead while a read is open."""
    monkeypatch.setattr(db, "WRITE_QUEUE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 100)
    engine = create_engine(sqlite_url)
    sessions = session_factory(engine)
    async with transaction(sessions) as s:
        s.add(Tenant(name="before"))

    async def names() -> list[str]:
        async with read_transaction(sessions) as s:
            return list((await s.scalars(select(Tenant.name).order_by(Tenant.name))).all())

    writing, release = asyncio.Event(), asyncio.Event()

    async def writer() -> None:
        async with transaction(sessions) as s:
            s.add(Tenant(name="uncommitted"))
            await s.flush()
            writing.set()
            await release.wait()

    held = asyncio.create_task(writer())
    await writing.wait()
    path = sqlite_url.split("///", 1)[1]
    other = sqlite3.connect(path, isolation_level=None)
    try:
        assert await asyncio.wait_for(names(), timeout=0.5) == ["before"]
    finally:
        release.set()
        await held
    other.execute("BEGIN IMMEDIATE")  # another process's writer
    try:
        assert await asyncio.wait_for(names(), timeout=0.5) == ["before", "uncommitted"]
    finally:
        other.execute("ROLLBACK")
        other.close()

    async with read_transaction(sessions) as r:
        await r.execute(text("SELECT 1"))
        async with transaction(sessions) as w:
            w.add(Tenant(name="during a read"))
    assert "during a read" in await names()

    # The read's connection goes back to the pool without its read-only mark: the next write
    # transaction on it queues as before.
    await refused_while_a_write_is_held(sessions)
    await engine.dispose()


async def test_every_way_out_of_a_transaction_frees_the_queue(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commit, rollback on an error, a session closed without either, a failed BEGIN and a
    connection invalidated mid-transaction all let the next transaction in at once."""
    monkeypatch.setattr(db, "WRITE_QUEUE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 100)  # read as each connection opens
    engine = create_engine(sqlite_url)
    sessions = session_factory(engine)

    async def next_one_gets_in() -> None:
        async with transaction(sessions) as s:
            await s.execute(text("SELECT 1"))

    async with transaction(sessions) as s:
        s.add(Tenant(name="committed"))
    await next_one_gets_in()

    with pytest.raises(RuntimeError):
        async with transaction(sessions) as s:
            s.add(Tenant(name="rolled back"))
            await s.flush()
            raise RuntimeError("boom")
    await next_one_gets_in()

    async with sessions() as s:  # autobegun, closed without commit or rollback
        await s.execute(text("SELECT 1"))
    await next_one_gets_in()

    async with sessions() as s:
        await s.execute(text("SELECT 1"))
        conn = await s.connection()
        await conn.invalidate()
    await next_one_gets_in()

    # Another process holds SQLite's lock past busy_timeout: BEGIN IMMEDIATE fails as busy.
    path = sqlite_url.split("///", 1)[1]
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            await next_one_gets_in()
    finally:
        other.execute("ROLLBACK")
        other.close()
    await next_one_gets_in()
    async with transaction(sessions) as s:
        names = (await s.scalars(select(Tenant.name))).all()
    await engine.dispose()
    assert list(names) == ["committed"]


@pytest.mark.slow
def test_32_clients_on_a_real_server(tmp_path: Path) -> None:
    """The reported failure: 32 concurrent clients writing single attributes to one `tailor
    serve` on SQLite, with the embedder loaded (each write embeds its text) and the job
    worker running; every write answers 201."""
    data_dir = tmp_path / "data"
    log = tmp_path / "server.log"
    env = {
        "TAILOR_MODELS_DIR": str(tmp_path / "no-classifiers"),
        "TAILOR_EMBEDDER_PATH": str(Path(__file__).resolve().parents[2] / "models" / "embedder"),
        "TAILOR_LOAD_LLM": "false",
    }
    data_dir.mkdir()
    key = create_tenant(data_dir)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            env=server_env(data_dir, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    # Not /readyz: without the verifier and relevance models this server is never "ready",
    # but it serves attribute writes.
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    statuses: Counter[int] = Counter()
    guard = threading.Lock()
    writes_each = 8

    def client(n: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as c:
            for i in range(writes_each):
                r = c.post(
                    f"/v1/users/user-{n}/attributes",
                    json={"text": f"Fact number {i} about client {n}"},
                    timeout=60,
                )
                with guard:
                    statuses[r.status_code] += 1

    try:
        started = time.monotonic()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    server_log = log.read_text(errors="replace")
    assert statuses == {201: CLIENTS * writes_each}, (statuses, elapsed, server_log[-3000:])
    assert "database is locked" not in server_log
