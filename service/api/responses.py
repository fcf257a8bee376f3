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
    409: _doc("An Idempotency-Key request with the same key is still in progress."),
    413: _doc("Request body too large."),
    422: _doc("Validation failed; `errors` names each offending field."),
}
