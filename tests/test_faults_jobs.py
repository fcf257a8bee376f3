"""A worker process SIGKILLed in the middle of a job, on SQLite and PostgreSQL: while it lives
its heartbeats keep the job its own (another live worker does not take it), and once it is dead
another worker process takes the job over within about a lease and applies it exactly once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from service.store.jobs import JobRepository
from service.store.models import Job
from service.store.users import get_or_create_user
from tests.conftest import Database
from tests.jobs.handlers import count_markers
from tests.jobs.processes import start_worker_process, stop, wait_ready

LEASE_S = 3.0
HEARTBEAT_S = 0.5

pytestmark = pytest.mark.slow


@dataclass
class Queue:
    db: Database
    tenant_id: str
    user_id: str
    sessions: async_sessionmaker[AsyncSession]

    async def enqueue(self, text: str) -> str:
        async with transaction(self.sessions) as s:
            job = await JobRepository(s).enqueue(
                tenant_id=self.tenant_id, user_id=self.user_id, kind="mark", payload={"text": text}
            )
            return job.id

    async def job(self, job_id: str) -> Job:
        async with transaction(self.sessions) as s:
            job = await JobRepository(s).get(self.tenant_id, job_id)
            assert job is not None
            return job

    async def markers(self, text: str) -> int:
        async with transaction(self.sessions) as s:
            return await count_markers(s, text)


@pytest.fixture
async def queue(clean_db: Database) -> AsyncIterator[Queue]:
    engine = create_engine(clean_db.url, schema=clean_db.schema)
    sessions = session_factory(engine)
    async with transaction(sessions) as s:
        tenant_id = (await tenants.create_tenant(s, "t")).tenant_id
        user_id = (await get_or_create_user(s, tenant_id, "u-1")).id
    yield Queue(clean_db, tenant_id, user_id, sessions)
    await engine.dispose()


async def _until(predicate: object, within: float, step: float = 0.05) -> float:
    """Seconds until ``predicate`` held; AssertionError after ``within``."""
    assert callable(predicate)
    started = time.monotonic()
    while time.monotonic() - started < within:
        if await predicate():
            return time.monotonic() - started
        await asyncio.sleep(step)
    raise AssertionError(f"condition not met within {within} s")


async def test_a_killed_workers_job_is_finished_by_another_within_seconds(
    queue: Queue, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    log = tmp_path / "workers.log"

    def start(name: str, *, hang: bool) -> tuple[subprocess.Popen[bytes], str]:
        return start_worker_process(
            queue.db,
            tmp_path / name,
            marks,
            hang=hang,
            log=log,
            lease_s=LEASE_S,
            heartbeat_s=HEARTBEAT_S,
        )

    a, a_base = start("a", hang=True)  # every job it takes hangs in prepare
    b: subprocess.Popen[bytes] | None = None
    try:
        await wait_ready(a, a_base, log)
        job_id = await queue.enqueue("finished once")

        async def a_started() -> bool:
            return (marks / f"started-{job_id}-1").exists()

        await _until(a_started, within=30)
        b, b_base = start("b", hang=False)
        await wait_ready(b, b_base, log)

        # Two leases with A alive and hung, B polling: A's heartbeats keep the job A's.
        await asyncio.sleep(2 * LEASE_S)
        job = await queue.job(job_id)
        assert (job.status, job.attempts, job.locked_by is not None) == ("running", 1, True)
        assert not (marks / f"started-{job_id}-2").exists()

        a.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        a.wait(timeout=10)

        async def succeeded() -> bool:
            return (await queue.job(job_id)).status == "succeeded"

        await _until(succeeded, within=LEASE_S + 15)
        recovery_s = time.monotonic() - killed_at
    finally:
        stop(a)
        if b is not None:
            stop(b)
    print(f"recovery after SIGKILL ({queue.db.backend}): {recovery_s:.2f} s")
    # Taken over once the lease (last renewed at most a heartbeat before the kill) ran out and
    # the next sweep (every heartbeat) saw it: lease + heartbeat, plus polling slack.
    assert recovery_s < LEASE_S + HEARTBEAT_S + 1.5, recovery_s
    job = await queue.job(job_id)
    assert (job.status, job.attempts, job.error, job.locked_by) == ("succeeded", 2, None, None)
    assert job.result is not None and job.result["text"] == "finished once"
    assert await queue.markers("finished once") == 1
    assert sorted(p.name for p in marks.iterdir()) == [
        f"started-{job_id}-1",
        f"started-{job_id}-2",
    ]
