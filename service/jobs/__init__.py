"""Durable background jobs: persisted with the request that creates them, run by a worker in
this or any other replica, retried with backoff, visible at ``GET /v1/jobs/{id}``."""

from service.jobs.worker import (
    ClaimedJob,
    JobHandler,
    JobWorker,
    PermanentJobError,
    backoff_delay,
    notify_on_commit,
)

__all__ = [
    "ClaimedJob",
    "JobHandler",
    "JobWorker",
    "PermanentJobError",
    "backoff_delay",
    "notify_on_commit",
]
