"""Problem documents for the domain errors raised below the API (pipeline, inference, LLM,
evaluation uploads): the one place where they become HTTP statuses, so that the layers below
carry no HTTP fields and the routers stay free of try/except."""

from __future__ import annotations

import math

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.api.errors import ProblemError, problem_response
from service.evaluation.uploads import UploadRejected, UploadTooLarge, UploadUnsupported
from service.inference import ModelNotLoaded, Overloaded
from service.llm.base import LLMBadResponse, LLMError, LLMTimeout, LLMUnavailable
from service.pipeline.budget import OverBudget
from service.pipeline.extract import EmbedderMissing
from service.pipeline.extractors import NoLLMForExtraction


async def _over_budget(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OverBudget)
    field = f"body.{exc.field}"
    return problem_response(
        422,
        str(exc),
        slug="over-budget",
        instance=request.url.path,
        errors=[{"field": field, "message": str(exc), "type": "over_budget"}],
    )


async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    return problem_response(503, str(exc), slug="models-unavailable", instance=request.url.path)


async def _no_llm(request: Request, exc: Exception) -> JSONResponse:
    return problem_response(503, str(exc), slug="llm-unavailable", instance=request.url.path)


def llm_problem(exc: LLMError) -> ProblemError:
    """The problem for a failed LLM call (also sent as a stream's `error` event)."""
    status = 502  # LLMBadResponse and any other failure: the upstream answer was unusable
    if isinstance(exc, LLMUnavailable):
        status = 503
    elif isinstance(exc, LLMTimeout):
        status = 504
    assert status == 502 or not isinstance(exc, LLMBadResponse)
    headers: dict[str, str] = {}
    if isinstance(exc, LLMUnavailable) and exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    return ProblemError(status, exc.detail, slug=exc.slug, headers=headers)


async def _overloaded(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Overloaded)
    return problem_response(
        429,
        f"The {exc.model} model has more work queued than it can take; "
        f"retry after {exc.retry_after} seconds.",
        slug="overloaded",
        instance=request.url.path,
        headers={"Retry-After": str(exc.retry_after)},
    )


async def _upload_rejected(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, UploadRejected)
    status = 422
    if isinstance(exc, UploadTooLarge):
        status = 413
    elif isinstance(exc, UploadUnsupported):
        status = 415
    return problem_response(
        status, exc.detail, slug=exc.slug, instance=request.url.path, errors=exc.errors
    )


async def _llm_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LLMError)
    problem = llm_problem(exc)
    return problem_response(
        problem.status,
        problem.detail,
        slug=problem.slug,
        instance=request.url.path,
        headers=problem.headers,
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(OverBudget, _over_budget)
    app.add_exception_handler(EmbedderMissing, _unavailable)
    app.add_exception_handler(ModelNotLoaded, _unavailable)
    app.add_exception_handler(NoLLMForExtraction, _no_llm)
    app.add_exception_handler(LLMError, _llm_error)
    app.add_exception_handler(Overloaded, _overloaded)
    app.add_exception_handler(UploadRejected, _upload_rejected)
