"""OpenAPI documentation of the problem responses every authenticated route can give."""

from __future__ import annotations

from typing import Any

from service.schemas.common import Problem

_problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}


def _doc(description: str) -> dict[str, Any]:
    return {"model": Problem, "description": description, "content": _problem}


PROBLEMS: dict[int | str, dict[str, Any]] = {
    400: _doc("Malformed JSON body."),
    401: _doc("Missing, invalid or revoked API key."),
    404: _doc("No such resource for this tenant."),
    409: _doc("Conflict with the resource's current state."),
    413: _doc("Request body too large."),
    415: _doc("The body is not `application/json` (the route names the type it expects)."),
    422: _doc("Validation failed; `errors` names each offending field."),
    503: _doc(
        "`database-unavailable`: the database cannot be written (read-only, gone, full, "
        "unreachable, or busy past its timeout; `Retry-After` then); nothing was written."
    ),
}

# Routes that run models (429 when a model's queue is full) and, some of them, an LLM.
MODEL_PROBLEMS: dict[int | str, dict[str, Any]] = {
    **PROBLEMS,
    422: _doc(
        "Validation failed; `errors` names each offending field. `over-budget`: the request "
        "needs more model work (tokens scored) than TAILOR_REQUEST_MAX_MODEL_TOKENS allows; "
        "the field named is the one to shorten."
    ),
    429: _doc(
        "A model's queue is full, or the tenant has TAILOR_TENANT_MAX_CONCURRENCY model or LLM "
        "requests in flight; retry after `Retry-After` seconds."
    ),
    503: _doc(
        "Models not loaded, no language model configured or reachable, or the database "
        "unavailable (`database-unavailable`)."
    ),
}
LLM_PROBLEMS: dict[int | str, dict[str, Any]] = {
    **MODEL_PROBLEMS,
    502: _doc("The language model answered with something unusable."),
    504: _doc("The language model did not answer within the deadline."),
}
