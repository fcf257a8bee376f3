"""JobWorker on both backends, with test handlers that write one attribute per job."""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from service.config import Settings
from service.jobs import ClaimedJob, JobHandler, JobWorker, backoff_delay, notify_on_commit
from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from service.store.erasure import erase_user
from service.store.jobs import JobRepository
from service.store.models import Job, User, utcnow
from service.store.users import get_or_create_user
from tests.conftest import Database, bearer
from tests.jobs.handlers import MarkerHandler, count_markers
from tests.jobs.processes import start_worker_process, wait_ready


@dataclass
class Env:
    db: Database
    tmp: Path
    tenant_id: str = ""
    user_id: str = ""
    engines: list[AsyncEngine] = field(default_factory=list)

    _shared: async_sessionmaker[AsyncSession] | None = None

    def new_pool(self) -> async_sessionmaker[AsyncSession]:
        """A new engine: each worker is like a replica with its own connection pool."""
        engine = create_engine(self.db.url, schema=self.db.schema, pool_size=3)
        self.engines.append(engine)
        return session_factory(engine)

    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """The test's own pool, for enqueueing and looking."""
        if self._shared is None:
            self._shared = self.new_pool()
        return self._shared

    def settings(self, **overrides: object) -> Settings:
        values: dict[str, object] = {
            "load_models": False,
            "jobs_poll_interval_s": 0.05,
            "jobs_backoff_base_s": 0.01,
            "jobs_backoff_max_s": 0.02,
        }
        lease = overrides.get("jobs_lease_s")
        if isinstance(lease, float | int) and "jobs_heartbeat_s" not in overrides:
            values["jobs_heartbeat_s"] = lease / 3  # three renewals per lease
        return self.db.settings(self.tmp, **(values | overrides))

    def worker(
        self, handlers: Mapping[str, JobHandler], worker_id: str | None = None, **overrides: object
    ) -> JobWorker:
        return JobWorker(
            self.new_pool(), handlers, settings=self.settings(**overrides), worker_id=worker_id
        )

    async def enqueue(
        self, text: str, *, kind: str = "mark", max_attempts: int | None = None
    ) -> str:
        async with transaction(self.sessions()) as s:
            job = await JobRepository(s).enqueue(
                tenant_id=self.tenant_id,
                user_id=self.user_id,
                kind=kind,
                payload={"text": text},
                max_attempts=max_attempts,
            )
            return job.id

    async def job(self, job_id: str) -> Job:
        async with transaction(self.sessions()) as s:
            job = await JobRepository(s).get(self.tenant_id, job_id)
            assert job is not None
            return job

    async def make_due(self, job_id: str) -> None:
        async with transaction(self.sessions()) as s:
            await s.execute(update(Job).where(Job.id == job_id).values(run_after=utcnow()))

    async def markers(self, text: str) -> int:
        async with transaction(self.sessions()) as s:
            return await count_markers(s, text)


@pytest.fixture
async def env(clean_db: Database, tmp_path: Path) -> AsyncIterator[Env]:
    e = Env(clean_db, tmp_path)
    async with transaction(e.sessions()) as s:
        e.tenant_id = (await tenants.create_tenant(s, "t")).tenant_id
        e.user_id = (await get_or_create_user(s, e.tenant_id, "u-1")).id
    yield e
    for engine in e.engines:
        await engine.dispose()


async def _until(predicate: object, within: float = 30.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_backoff_grows_within_bounds_and_is_capped() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(300.0, 2.0 * 2 ** (attempt - 1))
        for _ in range(50):
            assert ceiling / 2 <= backoff_delay(attempt, 2.0, 300.0, rng) <= ceiling
    # 2 * 2**7 = 256 is the last ceiling below the cap: up to there the delays never shrink.
    delays = [backoff_delay(a, 2.0, 300.0, rng) for a in range(1, 9)]
    assert delays == sorted(delays)
    assert backoff_delay(10_000, 2.0, 300.0, rng) <= 300.0  # no overflow on huge attempts


async def test_job_runs_once_and_commits_its_effects(env: Env) -> None:
    handler = MarkerHandler()
    worker = env.worker({"mark": handler})
    job_id = await env.enqueue("likes tea")
    assert await worker.run_once()
    assert not await worker.run_once()
    job = await env.job(job_id)
    assert (job.status, job.attempts, job.error, job.locked_by) == ("succeeded", 1, None, None)
    assert job.result is not None and job.result["text"] == "likes tea"
    assert await env.markers("likes tea") == 1
    assert handler.prepared == [(job_id, 1)]


async def test_failing_prepare_retries_with_growing_delay_then_fails(env: Env) -> None:
    handler = MarkerHandler(fail_prepare=100)
    worker = env.worker({"mark": handler}, jobs_backoff_base_s=1.0, jobs_backoff_max_s=300.0)
    job_id = await env.enqueue("never", max_attempts=4)
    delays = []
    for attempt in range(1, 4):
        assert await worker.run_once()
        job = await env.job(job_id)
        assert (job.status, job.attempts) == ("queued", attempt)
        assert job.error == f"RuntimeError: model unavailable (attempt {attempt})"
        delay = (job.run_after - job.updated_at).total_seconds()
        ceiling = 2.0 ** (attempt - 1)
        assert ceiling / 2 - 0.25 <= delay <= ceiling, (attempt, delay)
        delays.append(delay)
        assert not await worker.run_once()  # not due yet
        await env.make_due(job_id)
    assert delays == sorted(delays)
    assert await worker.run_once()
    job = await env.job(job_id)
    assert (job.status, job.attempts, job.locked_by) == ("failed", 4, None)
    assert job.error == "RuntimeError: model unavailable (attempt 4)"
    assert await env.markers("never") == 0
    assert not await worker.run_once()


async def test_permanent_error_fails_at_once(env: Env) -> None:
    worker = env.worker({"mark": MarkerHandler(permanent=True)})
    job_id = await env.enqueue("bad")
    assert await worker.run_once()
    job = await env.job(job_id)
    assert (job.status, job.attempts) == ("failed", 1)
    assert job.error == f"bad payload for {job_id}"


async def test_unknown_kind_fails_permanently(env: Env) -> None:
    worker = env.worker({"mark": MarkerHandler()})
    job_id = await env.enqueue("x", kind="nobody-handles-this")
    assert await worker.run_once()
    job = await env.job(job_id)
    assert (job.status, job.attempts) == ("failed", 1)
    assert job.error == "unknown job kind 'nobody-handles-this': no handler is registered for it"


async def test_failed_apply_rolls_back_its_writes_and_retries(env: Env) -> None:
    handler = MarkerHandler(fail_apply=1)
    worker = env.worker({"mark": handler})
    job_id = await env.enqueue("once")
    assert await worker.run_once()
    job = await env.job(job_id)
    assert (job.status, job.error) == ("queued", "RuntimeError: constraint trouble after writing")
    assert await env.markers("once") == 0  # written, then rolled back with the job's outcome
    await env.make_due(job_id)
    assert await worker.run_once()
    assert (await env.job(job_id)).status == "succeeded"
    assert await env.markers("once") == 1


async def test_crashed_worker_job_is_taken_back_after_the_lease(env: Env) -> None:
    """Worker A dies mid-job (its task is cancelled: no outcome, no release, no heartbeat);
    worker B takes the job back once the lease has run out and completes it once."""
    gate = asyncio.Event()
    crashed = MarkerHandler(gate=gate)
    a = env.worker({"mark": crashed}, worker_id="A", jobs_lease_s=1.0)
    job_id = await env.enqueue("survives")
    run_a = asyncio.create_task(a.run_once())
    await asyncio.wait_for(crashed.started.wait(), 10)
    run_a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run_a
    job = await env.job(job_id)
    assert (job.status, job.locked_by, job.attempts) == ("running", "A", 1)

    handler = MarkerHandler()
    b = env.worker({"mark": handler}, worker_id="B", jobs_lease_s=1.0)
    assert not await b.run_once()  # A's lock is still fresh
    await asyncio.sleep(1.2)
    assert await b.run_once()
    job = await env.job(job_id)
    assert (job.status, job.attempts, job.error) == ("succeeded", 2, None)
    assert await env.markers("survives") == 1
    assert handler.prepared == [(job_id, 2)]


async def test_worker_that_lost_its_lease_discards_its_late_result(env: Env) -> None:
    """A hung worker (no heartbeat within B's lease) finishes after B took the job over: its
    prepare ran too, but its apply is refused, so the effects exist once."""
    gate = asyncio.Event()
    slow = MarkerHandler(gate=gate)
    a = env.worker({"mark": slow}, worker_id="A", jobs_lease_s=600)  # renews every 200 s
    b_handler = MarkerHandler()
    b = env.worker({"mark": b_handler}, worker_id="B", jobs_lease_s=0.3)
    job_id = await env.enqueue("once only")
    run_a = asyncio.create_task(a.run_once())
    await asyncio.wait_for(slow.started.wait(), 10)
    await asyncio.sleep(0.5)
    assert await b.run_once()
    gate.set()
    assert await run_a
    job = await env.job(job_id)
    assert (job.status, job.attempts, job.locked_by) == ("succeeded", 2, None)
    assert job.result is not None
    assert await env.markers("once only") == 1
    assert slow.prepared == [(job_id, 1)] and b_handler.prepared == [(job_id, 2)]


async def test_a_renewal_that_finds_the_job_taken_stops_the_worker(env: Env) -> None:
    """A's heartbeats stalled long enough for B to take the job over and finish it; A's next
    renewal sees the job is no longer its own, cancels its prepare (which would otherwise
    never end here) and writes nothing: no second marker, no outcome over B's."""
    gate = asyncio.Event()  # never set: A's prepare only ends by being cancelled
    stalled = MarkerHandler(gate=gate)
    a = env.worker({"mark": stalled}, worker_id="A", jobs_lease_s=30.0, jobs_heartbeat_s=0.1)
    b_handler = MarkerHandler()
    b = env.worker({"mark": b_handler}, worker_id="B", jobs_lease_s=1.0)
    job_id = await env.enqueue("taken over")
    run_a = asyncio.create_task(a.run_once())
    await asyncio.wait_for(stalled.started.wait(), 10)
    async with transaction(env.sessions()) as s:  # as if A's renewals had stopped 10 s ago
        old = utcnow() - timedelta(seconds=10)
        await s.execute(update(Job).where(Job.id == job_id).values(locked_at=old))
    assert await b.run_once()  # B's sweep takes it over, B claims and applies attempt 2
    assert await asyncio.wait_for(run_a, 5)  # A stops at its next renewal
    job = await env.job(job_id)
    assert (job.status, job.attempts, job.locked_by, job.error) == ("succeeded", 2, None, None)
    assert job.result is not None and job.result["text"] == "taken over"
    assert await env.markers("taken over") == 1
    assert stalled.prepared == [(job_id, 1)] and b_handler.prepared == [(job_id, 2)]


async def test_a_worker_whose_lease_was_stolen_does_not_apply_its_result(env: Env) -> None:
    """The lease is stolen between A's prepare and A's apply: the apply's transaction first
    checks that A still owns the job (worker id and attempt) and, finding it does not, never
    calls the handler's apply."""
    applied: list[str] = []

    class Spy(MarkerHandler):
        async def apply(
            self, session: AsyncSession, job: ClaimedJob, prepared: object
        ) -> dict[str, Any]:
            applied.append(f"{job.id}:{job.attempt}")
            return await super().apply(session, job, prepared)

    gate = asyncio.Event()
    a_handler = Spy(gate=gate)
    a = env.worker({"mark": a_handler}, worker_id="A", jobs_lease_s=600.0)  # renews every 200 s
    job_id = await env.enqueue("stolen")
    run_a = asyncio.create_task(a.run_once())
    await asyncio.wait_for(a_handler.started.wait(), 10)
    async with transaction(env.sessions()) as s:
        # Another worker's sweep and claim: attempt 2 is C's now, still running.
        old = utcnow() - timedelta(seconds=1200)
        await s.execute(update(Job).where(Job.id == job_id).values(locked_at=old))
        assert [t.id for t in await JobRepository(s).requeue_stale(timedelta(seconds=600))] == [
            job_id
        ]
        claimed = await JobRepository(s).claim("C")
        assert claimed is not None and claimed.attempts == 2
    gate.set()
    assert await run_a
    assert applied == []
    job = await env.job(job_id)
    assert (job.status, job.attempts, job.locked_by, job.result) == ("running", 2, "C", None)
    assert await env.markers("stolen") == 0


async def test_job_errors_are_summaries_without_sql_or_parameters(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """A database error in apply (a duplicate primary key: its message carries the INSERT and
    its parameters, the tenant id among them) is stored as its class only; the full error is
    in the log. Other errors keep their class and the first line of their message."""

    class Duplicate(MarkerHandler):
        async def apply(
            self, session: AsyncSession, job: ClaimedJob, prepared: object
        ) -> dict[str, Any]:
            session.add(User(id=job.user_id, tenant_id=job.tenant_id, external_id="again"))
            await session.flush()
            return {}

    class Chatty(MarkerHandler):
        async def prepare(self, job: ClaimedJob) -> object:
            raise RuntimeError("first line\nsecond line with internals " + "x" * 500)

    worker = env.worker({"dup": Duplicate(), "chatty": Chatty()})
    dup = await env.enqueue("d", kind="dup", max_attempts=1)
    chatty = await env.enqueue("c", kind="chatty", max_attempts=1)
    with caplog.at_level(logging.WARNING, logger="tailor.jobs"):
        assert await worker.run_once() and await worker.run_once()
    dup_job, chatty_job = await env.job(dup), await env.job(chatty)
    assert (dup_job.status, dup_job.error) == ("failed", "database error: IntegrityError")
    assert (chatty_job.status, chatty_job.error) == ("failed", "RuntimeError: first line")
    assert "INSERT INTO users" in caplog.text and env.tenant_id in caplog.text
    assert await env.markers("d") == 0


def test_heartbeat_must_be_shorter_than_the_lease() -> None:
    assert Settings(jobs_lease_s=3, jobs_heartbeat_s=1).jobs_heartbeat_s == 1
    for heartbeat in (3, 4):
        with pytest.raises(ValidationError, match="must be shorter than TAILOR_JOBS_LEASE_S"):
            Settings(jobs_lease_s=3, jobs_heartbeat_s=heartbeat)


async def test_erasing_the_user_mid_job_leaves_nothing_behind(env: Env) -> None:
    """Erasure deletes the job row while prepare runs; the apply then finds neither the job
    (its ownership check) nor the user, so nothing about the erased user is written after."""
    gate = asyncio.Event()
    handler = MarkerHandler(gate=gate)
    worker = env.worker({"mark": handler})
    job_id = await env.enqueue("about an erased user")
    run = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(handler.started.wait(), 10)
    async with transaction(env.sessions()) as s:
        user = await get_or_create_user(s, env.tenant_id, "u-1")
        counts = await erase_user(s, env.tenant_id, user)
    assert counts["jobs"] == 1
    gate.set()
    assert await run
    assert await env.markers("about an erased user") == 0
    async with transaction(env.sessions()) as s:
        assert await JobRepository(s).get(env.tenant_id, job_id) is None


async def test_heartbeat_keeps_a_long_job_from_being_taken(env: Env) -> None:
    handler = MarkerHandler(delay_s=2.5)  # two and a half leases
    a = env.worker({"mark": handler}, worker_id="A", jobs_lease_s=1.0)  # renews every 0.33 s
    b = env.worker({"mark": MarkerHandler()}, worker_id="B", jobs_lease_s=1.0)
    job_id = await env.enqueue("long")
    run_a = asyncio.create_task(a.run_once())
    await asyncio.wait_for(handler.started.wait(), 10)
    for _ in range(7):
        await asyncio.sleep(0.3)
        assert not await b.run_once()
    assert await run_a
    job = await env.job(job_id)
    assert (job.status, job.attempts) == ("succeeded", 1)
    assert await env.markers("long") == 1


async def test_concurrent_workers_never_run_a_job_twice(env: Env) -> None:
    n_jobs = 40
    n_workers = 4 if env.db.backend == "postgres" else 3
    handlers = [MarkerHandler(delay_s=0.01) for _ in range(n_workers)]
    workers = [env.worker({"mark": h}, worker_id=f"w{i}") for i, h in enumerate(handlers)]
    for w in workers:
        await w.start()
    try:
        ids = [await env.enqueue(f"fact {i}") for i in range(n_jobs)]
        for w in workers:
            w.notify()

        async def all_done() -> bool:
            statuses = {(await env.job(j)).status for j in ids}
            return statuses == {"succeeded"}

        await _until(all_done, within=60)
    finally:
        for w in workers:
            await w.aclose()
    counts: Counter[str] = sum((h.prepare_counts() for h in handlers), Counter())
    assert sum(1 for h in handlers if h.prepared) >= 2, "one worker ran everything"
    assert sorted(counts) == sorted(ids)
    assert set(counts.values()) == {1}, "a job was prepared twice"
    for i in range(n_jobs):
        assert await env.markers(f"fact {i}") == 1
    attempts = {(await env.job(j)).attempts for j in ids}
    assert attempts == {1}


async def test_loop_survives_handler_errors(env: Env) -> None:
    handler = MarkerHandler(fail_prepare=1)
    worker = env.worker({"mark": handler})
    await worker.start()
    try:
        first = await env.enqueue("retried")
        second = await env.enqueue("plain")

        async def done() -> bool:
            return {(await env.job(first)).status, (await env.job(second)).status} == {"succeeded"}

        await _until(done)
        assert await worker.readiness() is None
    finally:
        await worker.aclose()
    assert (await env.job(first)).attempts == 2
    assert await env.markers("retried") == 1


async def test_loop_survives_a_database_outage(env: Env) -> None:
    real = env.new_pool()
    calls = 0

    def flaky() -> AsyncSession:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise OSError("database unreachable")
        return real()

    worker = JobWorker(flaky, {"mark": MarkerHandler()}, settings=env.settings())  # type: ignore[arg-type]
    await worker.start()
    try:
        job_id = await env.enqueue("after the outage")

        async def done() -> bool:
            return (await env.job(job_id)).status == "succeeded"

        await _until(done)
        assert await worker.readiness() is None
    finally:
        await worker.aclose()
    assert calls > 3


async def test_aclose_gives_an_unfinished_job_back(env: Env) -> None:
    gate = asyncio.Event()
    handler = MarkerHandler(gate=gate)
    worker = JobWorker(
        env.new_pool(), {"mark": handler}, settings=env.settings(), shutdown_grace_s=0.2
    )
    await worker.start()
    job_id = await env.enqueue("later")
    worker.notify()
    await asyncio.wait_for(handler.started.wait(), 10)
    await worker.aclose()
    job = await env.job(job_id)
    assert (job.status, job.attempts, job.locked_by) == ("queued", 0, None)
    other = env.worker({"mark": MarkerHandler()})
    assert await other.run_once()
    assert (await env.job(job_id)).status == "succeeded"
    assert await env.markers("later") == 1


async def test_notify_on_commit_wakes_the_worker(env: Env) -> None:
    handler = MarkerHandler()
    worker = env.worker({"mark": handler}, jobs_poll_interval_s=30.0)
    await worker.start()
    try:
        await asyncio.sleep(0.2)  # the first poll found nothing; the next tick is 30 s away
        sessions = env.sessions()
        async with sessions() as s, s.begin():
            job = await JobRepository(s).enqueue(
                tenant_id=env.tenant_id, user_id=env.user_id, kind="mark", payload={"text": "n"}
            )
            notify_on_commit(s, worker)
        started = time.monotonic()

        async def done() -> bool:
            return (await env.job(job.id)).status == "succeeded"

        await _until(done, within=10)
        assert time.monotonic() - started < 5
    finally:
        await worker.aclose()


async def test_queue_depth_gauge_follows_the_queue(env: Env) -> None:
    worker = env.worker({"depth-kind": MarkerHandler()})
    for i in range(3):
        await env.enqueue(f"d{i}", kind="depth-kind")
    assert await worker.run_once()
    value = REGISTRY.get_sample_value("tailor_jobs_queue_depth", {"kind": "depth-kind"})
    assert value == 2
    assert await worker.run_once() and await worker.run_once()
    assert not await worker.run_once()
    value = REGISTRY.get_sample_value("tailor_jobs_queue_depth", {"kind": "depth-kind"})
    assert value == 0


async def test_outcome_metrics_count_each_attempt(env: Env) -> None:
    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"kind": "metric-kind"} | labels) or 0.0

    before = (
        sample("tailor_jobs_total", outcome="succeeded"),
        sample("tailor_jobs_total", outcome="retried"),
        sample("tailor_job_failures_total"),
        sample("tailor_job_duration_seconds_count"),
    )
    worker = env.worker({"metric-kind": MarkerHandler(fail_prepare=1)})
    job_id = await env.enqueue("m", kind="metric-kind")
    assert await worker.run_once()
    await env.make_due(job_id)
    assert await worker.run_once()
    after = (
        sample("tailor_jobs_total", outcome="succeeded"),
        sample("tailor_jobs_total", outcome="retried"),
        sample("tailor_job_failures_total"),
        sample("tailor_job_duration_seconds_count"),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 2]


async def test_stale_job_metrics_and_final_failure(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = await env.enqueue("stuck", max_attempts=1)
    async with transaction(env.sessions()) as s:
        await JobRepository(s).claim("host-7:4242:abc")
        old = utcnow() - timedelta(seconds=10)
        await s.execute(update(Job).where(Job.id == job_id).values(locked_at=old))
    worker = env.worker({"mark": MarkerHandler()}, jobs_lease_s=1.0)
    with caplog.at_level(logging.WARNING, logger="tailor.jobs"):
        assert not await worker.run_once()
    job = await env.job(job_id)
    assert job.status == "failed"
    assert job.error == (
        "the worker running attempt 1 stopped renewing its lease (dead or hung); no attempts left"
    )
    # The tenant sees no host or process; the log names the worker.
    assert "host-7:4242:abc" in caplog.text


# --- a real process, killed mid-job and started again ----------------------------------------


def _start_server(
    env: Env, marks: Path, *, hang: bool, log: Path
) -> tuple[subprocess.Popen[bytes], str]:
    # One job hangs, the other stays queued (concurrency 1); the lease runs out 2 s after a
    # kill, renewed every 0.5 s while the process lives.
    return start_worker_process(
        env.db, env.tmp / "data", marks, hang=hang, log=log, lease_s=2.0, heartbeat_s=0.5
    )


@pytest.mark.slow
async def test_killed_service_processes_its_jobs_exactly_once_after_restart(env: Env) -> None:
    """SIGKILL the service while one job is running (hung in prepare) and another is queued;
    a new process finishes both, each effect written exactly once."""
    async with transaction(env.sessions()) as s:
        key = (await tenants.issue_key(s, env.tenant_id)).key
    marks = env.tmp / "marks"
    marks.mkdir()
    log = env.tmp / "server.log"
    first = await env.enqueue("running when killed")
    second = await env.enqueue("queued when killed")

    proc, base = _start_server(env, marks, hang=True, log=log)
    try:
        await wait_ready(proc, base, log)

        async def hung() -> bool:
            return (marks / f"started-{first}-1").exists()

        await _until(hung)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = await env.job(first), await env.job(second)
    assert [(j.status, j.attempts) for j in before] == [("running", 1), ("queued", 0)]

    proc, base = _start_server(env, marks, hang=False, log=log)
    try:
        await wait_ready(proc, base, log)
        async with httpx.AsyncClient(base_url=base, headers=bearer(key)) as client:

            async def both_done() -> bool:
                bodies = [(await client.get(f"/v1/jobs/{j}")).json() for j in (first, second)]
                return all(b["status"] == "succeeded" for b in bodies)

            await _until(both_done)  # the lease (2 s) runs out, then the sweep takes it back
            bodies = [(await client.get(f"/v1/jobs/{j}")).json() for j in (first, second)]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert [b["attempts"] for b in bodies] == [2, 1]
    assert bodies[0]["user_id"] == "u-1"
    assert await env.markers("running when killed") == 1
    assert await env.markers("queued when killed") == 1
    assert sorted(p.name for p in marks.iterdir()) == sorted(
        [f"started-{first}-1", f"started-{first}-2", f"started-{second}-1"]
    )
