"""Scale-out: two `tailor serve` replicas on one PostgreSQL database, as N pods of the
Deployment would run (each with its own job worker, the migration applied once beforehand as
the `tailor-migrate` Job does, `TAILOR_AUTO_MIGRATE=false`), the LLM a scripted
OpenAI-compatible server.

40 turns (20 per replica, alternating) for 5 users from 4 concurrent callers, each turn
queuing an extraction job; every user restates one fact in every turn, so their jobs, spread
over both replicas' workers, all try to store the same attribute. Asserted: every job
succeeded at its first attempt; the two workers together ran exactly 40 (their
`tailor_jobs_total` counters), none was retried; per user exactly one job added the fact and
every other one found it stored (the user row lock serializes the merges across processes),
so each user holds that one attribute; and both replicas list the same attributes.

Figures (printed with `pytest -s`), three runs on the 2-core development box (AMD EPYC, other
sessions running), 2026-11-30: the 40 turns took 6.2-10.1 s (turn p50 581-903 ms, p95
916-1732 ms: both replicas and their models share the 2 cores); the workers ran 21/19, 20/20
and 26/14 of the 40 jobs; all were done 1.1-1.3 s after the last turn was answered. A replica
is ready 6 s after its start once the int8 graphs are derived (the test takes about 20 s then,
as in a full run); run alone, the first replica derives them first (81 s)."""

from __future__ import annotations

import asyncio
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from service.store.migrate import upgrade
from tests.conftest import POSTGRES_URL, Database, bearer, new_pg_schema
from tests.llm.conftest import FakeLLMServer, completion
from tests.server_process import prepare_data_dir, start_server

pytestmark = pytest.mark.slow

REPLICAS = 2
TURNS_PER_REPLICA = 20
CALLERS = 4
# One fact per user, restated in each of their turns, and the statement the job stores.
FACTS = {
    "ana": ("I work as a nurse at night.", "The user works as a nurse at night."),
    "ben": ("I have a dog named Rex.", "The user has a dog named Rex."),
    "cai": ("I play the violin.", "The user plays the violin."),
    "dee": ("I am allergic to peanuts.", "The user is allergic to peanuts."),
    "eli": ("I speak Japanese.", "The user speaks Japanese."),
}
QUESTIONS = (
    "Can you suggest a quick breakfast?",
    "Any ideas for the weekend?",
    "What is a good book to read?",
    "Any tips for a short trip?",
)


@pytest.fixture
def shared_database(postgres_available: bool) -> Iterator[Database]:
    """A fresh PostgreSQL schema, migrated once before any replica starts."""
    if not postgres_available:
        pytest.skip(f"no PostgreSQL answers at {POSTGRES_URL}")
    schema = new_pg_schema()
    db = Database("postgres", POSTGRES_URL, schema)
    upgrade(db.url, schema=schema)
    try:
        yield db
    finally:
        asyncio.run(_drop(db))


async def _drop(db: Database) -> None:
    engine = create_engine(db.url)
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{db.schema}" CASCADE'))
    await engine.dispose()


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.fallback = completion("Here is an idea that fits.")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class Replica:
    base: str
    ready_s: float  # from its start to /readyz answering 200


@pytest.fixture
def replicas(
    shared_database: Database, llm: FakeLLMServer, tmp_path: Path, shared_data_dir: Path
) -> Iterator[list[Replica]]:
    # One derived-graph cache for both (and for the other tests that load the models).
    (shared_data_dir / "onnx-cache").mkdir(exist_ok=True)
    env = {
        "TAILOR_DATABASE_URL": shared_database.url,
        "TAILOR_DATABASE_SCHEMA": str(shared_database.schema),
        "TAILOR_AUTO_MIGRATE": "false",
        "TAILOR_LLM_BASE_URL": llm.base_url,
        "TAILOR_LLM_MAX_RETRIES": "0",
        "TAILOR_EXTRACTOR": "rules",
        "TAILOR_JOBS_POLL_INTERVAL_S": "0.2",
        "TAILOR_ONNX_INTRA_OP_THREADS": "1",
    }
    procs: list[subprocess.Popen[bytes]] = []
    started: list[Replica] = []
    try:
        for n in range(REPLICAS):
            data_dir = tmp_path / f"replica-{n}"
            prepare_data_dir(data_dir, shared_data_dir)
            begun = time.perf_counter()
            proc, base = start_server(data_dir, tmp_path / f"replica-{n}.log", **env)
            procs.append(proc)
            started.append(Replica(base, time.perf_counter() - begun))
        yield started
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


async def _tenant(db: Database) -> str:
    engine = create_engine(db.url, schema=db.schema)
    async with transaction(session_factory(engine)) as s:
        issued = await tenants.create_tenant(s, "scale-out")
    await engine.dispose()
    return issued.key


def _counter(metrics: str, outcome: str) -> float:
    pattern = rf'^tailor_jobs_total{{kind="extract",outcome="{outcome}"}} (\S+)$'
    found = re.search(pattern, metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_two_replicas_share_one_database_and_run_every_job_once(
    shared_database: Database, replicas: list[Replica]
) -> None:
    auth = bearer(await _tenant(shared_database))
    users = list(FACTS)
    turns = [
        (i % REPLICAS, users[i % len(users)], QUESTIONS[i % len(QUESTIONS)])
        for i in range(REPLICAS * TURNS_PER_REPLICA)
    ]
    clients = [httpx.AsyncClient(base_url=r.base, headers=auth, timeout=60) for r in replicas]
    latencies: list[float] = []
    job_user: dict[str, str] = {}
    gate = asyncio.Semaphore(CALLERS)

    async def turn(replica: int, user: str, question: str) -> None:
        message = f"{FACTS[user][0]} {question}"
        async with gate:
            started = time.perf_counter()
            r = await clients[replica].post(
                "/v1/turns",
                json={"user_id": user, "messages": [{"role": "user", "content": message}]},
            )
            latencies.append(time.perf_counter() - started)
        assert r.status_code == 200, r.text
        job_user[r.json()["job_id"]] = user

    try:
        started = time.perf_counter()
        await asyncio.gather(*(turn(*t) for t in turns))
        answered = time.perf_counter()
        assert len(job_user) == len(turns)  # one distinct job per turn

        # Until every job is done; each is read from the replica that did not queue it.
        jobs: dict[str, dict[str, Any]] = {}
        deadline = answered + 60
        while len(jobs) < len(job_user):
            assert time.perf_counter() < deadline, f"{len(jobs)} of {len(job_user)} jobs done"
            for n, job_id in enumerate(sorted(set(job_user) - set(jobs))):
                r = await clients[n % REPLICAS].get(f"/v1/jobs/{job_id}")
                assert r.status_code == 200, r.text
                if r.json()["status"] in ("succeeded", "failed"):
                    jobs[job_id] = r.json()
            await asyncio.sleep(0.1)
        drained = time.perf_counter()

        assert all(j["status"] == "succeeded" and j["attempts"] == 1 for j in jobs.values()), [
            j for j in jobs.values() if j["status"] != "succeeded" or j["attempts"] != 1
        ]
        ran = []
        for client in clients:
            metrics = (await client.get("/metrics")).text
            ran.append(_counter(metrics, "succeeded"))
            assert _counter(metrics, "retried") == 0 and _counter(metrics, "failed") == 0
        # Exactly once across both workers: the counters add up to the jobs, no more.
        assert sum(ran) == len(jobs)

        for user, (_, stored) in FACTS.items():
            actions = sorted(
                c["action"]
                for job_id, j in jobs.items()
                if job_user[job_id] == user
                for c in j["result"]["candidates"]
                if c["text"] == stored
            )
            # The first job stored the fact; every later one (whichever replica ran it) found
            # it stored and added its evidence.
            per_user = sum(1 for u in job_user.values() if u == user)
            assert actions == ["added"] + ["updated"] * (per_user - 1), (user, actions)
            seen = []
            for client in clients:
                r = await client.get(f"/v1/users/{user}/attributes")
                assert r.status_code == 200, r.text
                seen.append([(a["id"], a["text"]) for a in r.json()["items"]])
            assert seen[0] == seen[1], seen  # both replicas see the same rows
            assert [t for _, t in seen[0]] == [stored], (user, seen[0])
    finally:
        for client in clients:
            await client.aclose()

    ordered = sorted(latencies)
    print(
        f"\nscale-out: {len(turns)} turns ({TURNS_PER_REPLICA} per replica, {CALLERS} callers) "
        f"in {answered - started:.1f} s, turn p50 {1000 * statistics.median(ordered):.0f} ms "
        f"p95 {1000 * ordered[int(0.95 * (len(ordered) - 1))]:.0f} ms; {len(jobs)} jobs, run "
        f"per replica {[int(x) for x in ran]}, all done {drained - answered:.1f} s after the "
        f"last turn was answered; replicas ready after {[round(r.ready_s, 1) for r in replicas]} s"
    )
