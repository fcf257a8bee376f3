"""The in-process runner behind POST /v1/eval: one run at a time, persisted in eval_runs.

A run's row moves queued → running → succeeded | failed. While it runs, a heartbeat writes its
progress every few seconds (never holding a transaction open while scoring). A run is never
lost silently:
- on a clean shutdown the run in progress goes back to `queued`;
- at start-up every `queued` run, and every `running` run whose heartbeat is older than
  ``eval_stale_after_s`` (its process died), is resumed from the start (the judges are
  deterministic, so the figures are the same) with ``progress.restarts`` counting restarts;
- but a run whose process died mid-run more than ``eval_max_crash_resumes`` times
  (``progress.crashes``) is marked `failed` instead: it may be what killed the process, and
  resuming it during start-up would crash-loop the server;
- a judge whose LLM fails (the embedded model's process died, a server down) fails the run
  with the reason, and the server goes on serving;
- a run whose data is gone is marked `failed` with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service import metrics
from service.config import Settings
from service.evaluation import runner, uploads
from service.evaluation.judges import Judge, JudgeUnavailable
from service.llm.base import LLMError
from service.store import evalruns
from service.store.db import transaction

log = logging.getLogger("tailor.evaluation")

JudgeProvider = Callable[[str, int], Judge]
HEARTBEAT_S = 2.0


class DataGone(LookupError):
    """The run's dataset or upload is no longer on disk."""


def resolve_data(settings: Settings, tenant_id: str, params: dict[str, Any]) -> Path:
    """The dataset root a run's params name; DataGone when it is missing.

    Names were validated when the run was created; they are checked again here because the
    directory may have changed since (and a stored row must never widen what is readable).
    """
    if params.get("upload_id"):
        root = uploads.upload_root(settings.eval_uploads_dir, tenant_id, str(params["upload_id"]))
        if root is None:
            raise DataGone(f"upload {params['upload_id']} is gone")
        return root
    root = dataset_dir(settings, str(params.get("dataset", "")))
    if root is None or not root.is_dir():
        raise DataGone(f"dataset {params.get('dataset')!r} is not in the evaluation data directory")
    return root


def dataset_dir(settings: Settings, name: str) -> Path | None:
    """``eval_data_root / name`` when that stays a direct subfolder of it, else None."""
    base = settings.eval_data_root.resolve()
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        return None
    candidate = (base / name).resolve()
    # resolve() follows symlinks: a link inside the folder pointing elsewhere is refused too.
    if candidate.parent != base:
        return None
    return candidate


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _age_s(progress: dict[str, Any] | None) -> float:
    stamp = (progress or {}).get("heartbeat_at")
    if not isinstance(stamp, str):
        return float("inf")
    try:
        return (datetime.now(UTC) - datetime.fromisoformat(stamp)).total_seconds()
    except ValueError:
        return float("inf")


class EvalWorker:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        judges: JudgeProvider,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self._sessions = sessions
        self._settings = settings
        self._judges = judges
        self._heartbeat_s = heartbeat_s
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._current: tuple[str, str] | None = None
        self._progress: dict[str, Any] = {}
        self.idle = asyncio.Event()
        self.idle.set()

    async def start(self) -> None:
        await self.recover()
        self._task = asyncio.create_task(self._loop(), name="tailor-eval-worker")

    def submit(self, tenant_id: str, run_id: str) -> None:
        self.idle.clear()
        self._queue.put_nowait((tenant_id, run_id))

    async def recover(self) -> None:
        """Take over the runs a dead (or stopped) process left unfinished."""
        async with transaction(self._sessions) as session:
            rows = await evalruns.unfinished(session)
            for row in rows:
                if row.status == "running":
                    if _age_s(row.progress) < self._settings.eval_stale_after_s:
                        # Another live process is running it (its heartbeat is fresh).
                        continue
                    progress = dict(row.progress or {})
                    crashes = int(progress.get("crashes", 0)) + 1
                    progress["crashes"] = crashes
                    if crashes > self._settings.eval_max_crash_resumes:
                        # It may be what killed the process: resuming it again could put the
                        # server in a crash loop.
                        reason = (
                            f"the server stopped {crashes} times while this run was in "
                            "progress (a crash or a kill); it is not resumed again. Start a "
                            "new run once the cause is fixed."
                        )
                        metrics.EVAL_RUNS_FAILED.inc()
                        await evalruns.finish(
                            session,
                            row.tenant_id,
                            row.id,
                            status="failed",
                            progress=progress,
                            error=reason,
                        )
                        log.error("eval run %s: failed at start-up: %s", row.id, reason)
                        continue
                    progress["restarts"] = int(progress.get("restarts", 0)) + 1
                    progress["note"] = "resumed after its process stopped"
                    await evalruns.requeue(session, row.tenant_id, row.id, progress)
                    log.warning("eval run %s: resuming after its process stopped", row.id)
                self.submit(row.tenant_id, row.id)

    async def aclose(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        if self._current is not None:
            # Shut down mid-run: back to queued, so the next start resumes it.
            tenant_id, run_id = self._current
            progress = dict(self._progress)
            progress["restarts"] = int(progress.get("restarts", 0)) + 1
            progress["note"] = "interrupted by a shutdown; resumes at the next start"
            async with transaction(self._sessions) as session:
                await evalruns.requeue(session, tenant_id, run_id, progress)
            self._current = None

    async def _loop(self) -> None:
        while True:
            try:
                tenant_id, run_id = await asyncio.wait_for(
                    self._queue.get(), self._settings.eval_poll_s
                )
            except TimeoutError:
                # Nothing submitted here: runs queued by replicas without a worker, and runs
                # whose process died, are in the database. (Claiming is atomic: mark_running.)
                try:
                    await self.recover()
                except Exception:  # the database may be away for a while; look again later
                    log.exception("eval worker: could not look for queued runs")
                continue
            try:
                await self._execute(tenant_id, run_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in one run must not stop the worker
                log.exception("eval run %s crashed", run_id)
                await self._fail(tenant_id, run_id, "internal error while running (see logs)")
            finally:
                if self._queue.empty():
                    self.idle.set()

    async def _fail(self, tenant_id: str, run_id: str, reason: str) -> None:
        metrics.EVAL_RUNS_FAILED.inc()
        self._current = None
        async with transaction(self._sessions) as session:
            await evalruns.finish(
                session,
                tenant_id,
                run_id,
                status="failed",
                progress=self._progress or None,
                error=reason,
            )

    async def _heartbeat(self, tenant_id: str, run_id: str) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            self._progress["heartbeat_at"] = _now()
            try:
                async with transaction(self._sessions) as session:
                    await evalruns.set_progress(session, tenant_id, run_id, dict(self._progress))
            except SQLAlchemyError as exc:
                # A busy database delays a heartbeat; it must not stop the run.
                log.warning("eval run %s: progress not saved (%s)", run_id, exc)

    async def _execute(self, tenant_id: str, run_id: str) -> None:
        async with transaction(self._sessions) as session:
            row = await evalruns.get(session, tenant_id, run_id)
            if row is None or row.status != "queued":
                return  # deleted, or already taken by another process
            params = dict(row.params)
            previous = row.progress or {}
            self._progress = {
                "done": 0,
                "total": None,
                "restarts": int(previous.get("restarts", 0)),
                "crashes": int(previous.get("crashes", 0)),
                "heartbeat_at": _now(),
            }
            if not await evalruns.mark_running(session, tenant_id, run_id, dict(self._progress)):
                return
        self._current = (tenant_id, run_id)
        metrics.EVAL_RUNS_STARTED.inc()
        try:
            root = resolve_data(self._settings, tenant_id, params)
            selection = runner.Selection(
                tuple(params["splits"]) if params.get("splits") else None,
                tuple(params["tiers"]) if params.get("tiers") else None,
                params.get("limit"),
            )
            seed = int(params.get("seed", 0))
            data = await asyncio.to_thread(runner.select_cases, root, selection)
            judge = self._judges(str(params["judge"]), seed)
        except (DataGone, JudgeUnavailable, OSError) as exc:
            await self._fail(tenant_id, run_id, str(exc))
            return

        async def progress(done: int, total: int) -> None:
            self._progress.update(done=done, total=total)

        beat = asyncio.create_task(self._heartbeat(tenant_id, run_id))
        try:
            results = await runner.run(
                data.cases, judge, seed=seed, problems=data.problems, progress=progress
            )
        except LLMError as exc:
            await self._fail(tenant_id, run_id, f"the LLM judge failed: {exc.detail}")
            return
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        # The CLI's two descriptive keys, so results carry exactly the CLI's keys.
        source = params.get("dataset") or f"upload:{params.get('upload_id')}"
        results = {"benchmark": "personafeedback", "data": source} | results
        self._progress["heartbeat_at"] = _now()
        async with transaction(self._sessions) as session:
            await evalruns.finish(
                session,
                tenant_id,
                run_id,
                status="succeeded",
                progress=dict(self._progress),
                results=results,
            )
        self._current = None
        metrics.EVAL_RUNS_FINISHED.inc()
        log.info(
            "eval run %s: accuracy %.4f on %d cases", run_id, results["accuracy"], results["n"]
        )
