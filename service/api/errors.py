"""RFC 9457 problem+json for every error the API returns."""

from __future__ import annotations

import email.message
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request, params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("tailor.api")

TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Validation failed",
    429: "Too many requests",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
}


class ProblemError(Exception):
    """Raise anywhere below a router to answer with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        slug: str | None = None,
        title: str | None = None,
        errors: Sequence[Mapping[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug or TITLES.get(status, "error").lower().replace(" ", "-")
        self.title = title or TITLES.get(status, "Error")
        self.errors = list(errors) if errors else None
        self.headers = dict(headers or {})


def problem_body(
    status: int,
    detail: str | None,
    *,
    slug: str | None = None,
    title: str | None = None,
    instance: str | None = None,
    errors: Sequence[Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    title = title or TITLES.get(status, "Error")
    body: dict[str, Any] = {
        "type": f"urn:tailor:problem:{slug or title.lower().replace(' ', '-')}",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    if errors:
        # Every entry has a `type` (the Problem schema says so): the problem's own slug where
        # the raiser gave none.
        kind = body["type"].rsplit(":", 1)[-1].replace("-", "_")
        body["errors"] = [{**e, "type": e.get("type") or kind} for e in errors]
    return body


def problem_response(
    status: int,
    detail: str | None,
    *,
    slug: str | None = None,
    title: str | None = None,
    instance: str | None = None,
    errors: Sequence[Mapping[str, str]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        problem_body(status, detail, slug=slug, title=title, instance=instance, errors=errors),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=dict(headers or {}),
    )


def problem_bytes(status: int, detail: str, *, slug: str | None = None) -> bytes:
    return json.dumps(problem_body(status, detail, slug=slug)).encode()


def _field(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def validation_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    out = []
    for err in exc.errors():
        kind = str(err.get("type", "value_error"))
        loc = list(err.get("loc", ()))
        message = str(err.get("msg", "invalid"))
        if kind == "extra_forbidden":
            message = f"unknown field '{loc[-1]}'"
        elif kind == "json_invalid":
            # loc is ("body", <character offset>): name the body, keep the offset in the text.
            message = f"{message} at character {loc[-1]}" if len(loc) > 1 else message
            loc = loc[:1]
        out.append({"field": _field(loc), "message": message, "type": kind})
    return out


def _is_json(content_type: str) -> bool:
    """application/json or application/<anything>+json: what FastAPI parses as JSON."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def _unsupported_media_type(request: Request, exc: RequestValidationError) -> JSONResponse | None:
    """415 for a JSON-body route sent a body of another media type (or of none). FastAPI does
    not parse such a body and reports it as a validation error of `body`; the fault is the
    media type, not the fields. Form (multipart upload) routes keep their own rules, and no
    body at all stays a 422 naming the missing body."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or route.body_field is None:
        return None
    if isinstance(route.body_field.field_info, params.Form):
        return None
    content_type = request.headers.get("content-type")
    if content_type is not None and _is_json(content_type):
        return None
    if any(
        tuple(e.get("loc", ())) == ("body",) and e.get("type") == "missing" for e in exc.errors()
    ):
        return None
    given = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
    return problem_response(
        415,
        f"The request body must be application/json; got {given}.",
        slug="unsupported-media-type",
        instance=request.url.path,
        errors=[
            {
                "field": "header.Content-Type",
                "message": "expected application/json",
                "type": "unsupported_media_type",
            }
        ],
    )


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    wrong_media_type = _unsupported_media_type(request, exc)
    if wrong_media_type is not None:
        return wrong_media_type
    errors = validation_errors(exc)
    if any(e["type"] == "json_invalid" for e in errors):
        return problem_response(
            400,
            "The request body is not valid JSON.",
            slug="malformed-json",
            instance=request.url.path,
            errors=errors,
        )
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return problem_response(
        422, detail, slug="validation-error", instance=request.url.path, errors=errors
    )


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(
        exc.status,
        exc.detail,
        slug=exc.slug,
        title=exc.title,
        instance=request.url.path,
        errors=exc.errors,
        headers=exc.headers,
    )


# The methods a 405's Allow header may name (HEAD and OPTIONS only where a route has them).
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route answers at this path. Starlette's 405 names only the methods of
    the first route whose path matched, and this API declares one route per method."""
    allowed = []
    for method in METHODS:
        probe = {**request.scope, "method": method}
        if any(route.matches(probe)[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return problem_response(
        exc.status_code,
        str(exc.detail),
        instance=request.url.path,
        headers=headers,
    )


async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    """The generic 500 (logged with its traceback); nothing was written."""
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(
        500, "An unexpected error occurred; nothing was changed.", instance=request.url.path
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, on_unexpected)


def not_found(what: str) -> ProblemError:
    return ProblemError(404, f"{what} not found", slug="not-found")
