"""The service as `tailor serve` runs it, plus a test job kind, for the kill-and-restart test:
``python -m tests.jobs.server PORT`` with the usual TAILOR_ settings.

Kind ``mark`` writes ``payload["text"]`` as an attribute of the job's user. Each prepare first
touches ``$JOBS_TEST_DIR/started-<job id>-<attempt>``; with ``JOBS_TEST_HANG=1`` it then hangs
for good, so the test can kill the process in the middle of a job."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import uvicorn
from sqlalchemy.ext.asyncio import AsyncSession

from service.app import create_app
from service.config import Settings
from service.jobs import ClaimedJob
from tests.jobs.handlers import write_marker


class HangingMarker:
    def __init__(self, marks: Path, hang: bool) -> None:
        self.marks = marks
        self.hang = hang

    async def prepare(self, job: ClaimedJob) -> Any:
        (self.marks / f"started-{job.id}-{job.attempt}").touch()
        if self.hang:
            await asyncio.Event().wait()
        return str(job.payload["text"])

    async def apply(self, session: AsyncSession, job: ClaimedJob, prepared: Any) -> dict[str, Any]:
        return await write_marker(session, job, str(prepared))


def main() -> None:
    port = int(sys.argv[1])
    handler = HangingMarker(
        Path(os.environ["JOBS_TEST_DIR"]), os.environ.get("JOBS_TEST_HANG") == "1"
    )
    app = create_app(Settings(), job_handlers=lambda _state: {"mark": handler})
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
