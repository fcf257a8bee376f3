"""Application factory and lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from service import __version__
from service.api import (
    attributes,
    console,
    db_errors,
    errors,
    extract,
    generate,
    health,
    idempotent,
    jobs,
    pipeline_errors,
    turns,
    users,
)
from service.api import eval as eval_api
from service.api import select as select_api
from service.api.middleware import BodyLimitMiddleware, IdempotencyMiddleware, MetricsMiddleware
from service.config import Settings, get_settings
from service.evaluation.judges import Judge, build_judge
from service.evaluation.worker import EvalWorker
from service.inference import ModelRegistry
from service.jobs import JobHandler, JobWorker
from service.jobs.extraction import ExtractionJob
from service.llm.base import LLMError
from service.llm.embedded import EmbeddedLLMClient
from service.llm.factory import build_llm
from service.pipeline.turn_extraction import EXTRACT_KIND
from service.schemas.common import Problem
from service.state import AppState
from service.store.db import engine_from_settings, session_factory

DESCRIPTION = """\
Tailor learns stable facts about a user from their conversations, keeps only those the
conversation supports, selects the few that matter for the next prompt, and writes replies
that use them. Every request needs `Authorization: Bearer <API key>`; the key fixes the tenant.
Errors are `application/problem+json` (RFC 9457) with an `errors` list naming each bad field.
"""


JobHandlerFactory = Callable[[AppState], Mapping[str, JobHandler]]


def create_app(
    settings: Settings | None = None, *, job_handlers: JobHandlerFactory | None = None
) -> FastAPI:
    """``job_handlers`` adds handlers built from the started state (tests, embedders)."""
    settings = settings or get_settings()
    # Root at WARNING: libraries (ONNX Runtime's quantizer logs every tensor at INFO) stay
    # quiet; the service's own loggers follow the configured level.
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("tailor").setLevel(settings.log_level.upper())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = engine_from_settings(settings)
        state = AppState(settings=settings, engine=engine, sessions=session_factory(engine))
        app.state.tailor = state
        if settings.load_models:
            # Seconds of blocking work (the first start also derives the int8 CPU graphs).
            state.models = await asyncio.to_thread(ModelRegistry.load, settings)
            await state.models.start()
            state.readiness["models"] = state.models.readiness
        state.llm = await asyncio.to_thread(build_llm, settings)
        if isinstance(state.llm, EmbeddedLLMClient):
            # Its own process loads the model (a fraction of a second, more on a cold cache).
            # A failure is not fatal: LLM features answer 503 and the child is retried.
            try:
                await state.llm.start()
            except LLMError as exc:
                logging.getLogger("tailor.llm").error("embedded LLM not started: %s", exc.detail)

        def judge_for(name: str, seed: int) -> Judge:
            # Read at run time: the models and the LLM client are whatever the process holds.
            # The model judges go through the batchers, between the batches of live requests.
            models = state.models
            reward = models.batchers.get("reward") if models is not None else None
            embedder = models.embedder if models is not None else None
            return build_judge(
                name,
                seed=seed,
                reward_score=reward.submit_batch if reward is not None else None,
                encode=embedder.aencode_batch if embedder is not None else None,
                llm=state.llm,
                llm_concurrency=settings.eval_llm_concurrency,
            )

        if settings.eval_worker:
            state.eval_worker = EvalWorker(state.sessions, settings, judge_for)
            await state.eval_worker.start()
        state.job_handlers[EXTRACT_KIND] = ExtractionJob(state)
        if job_handlers is not None:
            state.job_handlers.update(job_handlers(state))
        if settings.jobs_worker:
            state.jobs = JobWorker(state.sessions, state.job_handlers, settings=settings)
            await state.jobs.start()
            state.readiness["jobs"] = state.jobs.readiness
        try:
            yield
        finally:
            # The workers first: their running work still needs the database and the models.
            if state.jobs is not None:
                await state.jobs.aclose()
            if state.eval_worker is not None:
                await state.eval_worker.aclose()
            if state.llm is not None:
                await state.llm.aclose()
            if state.models is not None:
                await state.models.aclose()
            await engine.dispose()

    app = FastAPI(
        title="Tailor",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    errors.install(app)
    pipeline_errors.install(app)
    db_errors.install(app)
    idempotent.install(app)

    app.include_router(health.router)
    app.include_router(attributes.router)
    app.include_router(users.router)
    app.include_router(extract.router)
    app.include_router(select_api.router)
    app.include_router(generate.router)
    app.include_router(turns.router)
    app.include_router(jobs.router)
    app.include_router(jobs.user_router)
    app.include_router(eval_api.router)
    app.include_router(console.router)

    # Added last = outermost: metrics see every request, including 413s.
    app.add_middleware(IdempotencyMiddleware, state_holder=app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        overrides={eval_api.UPLOAD_PATH: settings.eval_upload_max_bytes},
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
        )
    app.add_middleware(MetricsMiddleware)

    original_openapi = app.openapi

    def openapi() -> dict[str, object]:
        if app.openapi_schema is None:
            schema = original_openapi()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.setdefault("Problem", Problem.model_json_schema())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
