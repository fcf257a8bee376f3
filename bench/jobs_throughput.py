"""Job queue overhead: how fast workers drain jobs whose handler does nothing, so the figure is
the machinery alone (claim, apply transaction, bookkeeping), not any job's own work.

    .venv/bin/python bench/jobs_throughput.py sqlite|postgres [--workers 1] [--concurrency 2]
        [--jobs 500] [--postgres-url URL]

SQLite: a fresh file. PostgreSQL: a throwaway schema, dropped afterwards. Each worker has its
own engine, as separate replicas would.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import tempfile
import time
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.config import Settings, available_cpus
from service.jobs import ClaimedJob, JobWorker
from service.store import tenants
from service.store.db import create_engine, session_factory, transaction
from service.store.jobs import SUCCEEDED, JobRepository
from service.store.migrate import upgrade
from service.store.models import Job


class Noop:
    async def prepare(self, job: ClaimedJob) -> Any:
        return None

    async def apply(self, session: AsyncSession, job: ClaimedJob, prepared: Any) -> dict[str, Any]:
        return {}


async def drain(url: str, schema: str | None, args: argparse.Namespace) -> float:
    engine = create_engine(url, schema=schema)
    sessions = session_factory(engine)
    async with transaction(sessions) as s:
        tenant_id = (await tenants.create_tenant(s, "bench")).tenant_id
        repo = JobRepository(s)
        for i in range(args.jobs):
            await repo.enqueue(tenant_id=tenant_id, user_id=None, kind="noop", payload={"i": i})
    settings = Settings(
        database_url=url,
        database_schema=schema,
        load_models=False,
        jobs_concurrency=args.concurrency,
        jobs_poll_interval_s=0.05,
    )
    engines = [create_engine(url, schema=schema) for _ in range(args.workers)]
    workers = [JobWorker(session_factory(e), {"noop": Noop()}, settings=settings) for e in engines]
    started = time.perf_counter()
    for w in workers:
        await w.start()
    while True:
        async with transaction(sessions) as s:
            left = await s.scalar(
                select(func.count()).select_from(Job).where(Job.status != SUCCEEDED)
            )
        if not left:
            break
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - started
    for w in workers:
        await w.aclose()
    for e in [*engines, engine]:
        await e.dispose()
    return elapsed


async def drop_schema(url: str, schema: str) -> None:
    engine = create_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backend", choices=["sqlite", "postgres"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument(
        "--postgres-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test"
    )
    args = parser.parse_args()
    schema = None
    if args.backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/bench.db"
        upgrade(url)
    else:
        url = args.postgres_url
        schema = f"bench_jobs_{secrets.token_hex(4)}"
        upgrade(url, schema=schema)
    try:
        elapsed = asyncio.run(drain(url, schema, args))
    finally:
        if schema:
            asyncio.run(drop_schema(url, schema))
    print(
        f"{args.backend}: {args.workers} worker(s) x concurrency {args.concurrency}, "
        f"{available_cpus()} CPUs: {args.jobs} no-op jobs in {elapsed:.2f} s "
        f"= {args.jobs / elapsed:.0f} jobs/s"
    )


if __name__ == "__main__":
    main()
