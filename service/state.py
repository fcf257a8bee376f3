"""What the lifespan opens once and every request shares."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from service.config import Settings
from service.evaluation.worker import EvalWorker
from service.inference import ModelRegistry
from service.jobs import JobHandler, JobWorker
from service.llm.base import LLMClient

# A readiness check returns None when ready or a short reason when not.
ReadinessCheck = Callable[[], Awaitable[str | None]]


@dataclass
class AppState:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    readiness: dict[str, ReadinessCheck] = field(default_factory=dict)
    models: ModelRegistry | None = None
    llm: LLMClient | None = None
    # The background runner of POST /v1/eval (service/evaluation/worker.py).
    eval_worker: EvalWorker | None = None
    # Handlers by job kind, registered in the lifespan before the worker starts.
    job_handlers: dict[str, JobHandler] = field(default_factory=dict)
    jobs: JobWorker | None = None
    # Model and LLM requests in flight per tenant (TAILOR_TENANT_MAX_CONCURRENCY).
    tenant_inflight: Counter[str] = field(default_factory=Counter)
