"""Problem documents for what the pipeline can raise (the routers stay free of try/except)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.api.errors import problem_response
from service.inference import ModelNotLoaded
from service.llm.base import LLMError, llm_problem
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
