"""Exceptions: every failure the client reports is a ``TailorError``.

An HTTP error answer becomes the subclass for its status (``NotFound`` for 404,
``ValidationFailed`` for 422, ``RateLimited`` for 429, ``Unavailable`` for 503, ...), carrying
the service's problem document (RFC 9457, ``application/problem+json``) as ``.problem`` and its
members as ``.type``, ``.title``, ``.detail`` and ``.errors``. The same holds for an ``error``
event in a stream."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

__all__ = [
    "AuthenticationFailed",
    "BadGateway",
    "BadRequest",
    "ClientError",
    "Conflict",
    "ConnectionFailed",
    "GatewayTimeout",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimited",
    "ServerError",
    "StreamInterrupted",
    "TailorError",
    "Unavailable",
    "UnsupportedMediaType",
    "ValidationFailed",
    "WaitTimeout",
    "error_for",
    "error_from_response",
]


class TailorError(Exception):
    """Base of every error the client raises.

    ``status`` is the HTTP status (``None`` when no answer came), ``problem`` the problem
    document as the service sent it (empty when there was none)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        problem: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.problem: dict[str, Any] = dict(problem or {})
        self.headers: dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}

    @property
    def type(self) -> str | None:
        """The problem type, e.g. ``urn:tailor:problem:not-found``."""
        value = self.problem.get("type")
        return value if isinstance(value, str) else None

    @property
    def title(self) -> str | None:
        value = self.problem.get("title")
        return value if isinstance(value, str) else None

    @property
    def detail(self) -> str | None:
        value = self.problem.get("detail")
        return value if isinstance(value, str) else None

    @property
    def instance(self) -> str | None:
        value = self.problem.get("instance")
        return value if isinstance(value, str) else None

    @property
    def errors(self) -> list[dict[str, Any]]:
        """For bad input: ``[{"field", "message", "type"}]``, one per offending field."""
        value = self.problem.get("errors")
        return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []

    @property
    def retry_after(self) -> float | None:
        """The ``Retry-After`` the service sent (seconds), if any."""
        return parse_retry_after(self.headers.get("retry-after"))


class ConnectionFailed(TailorError):
    """No answer: the connection failed or timed out (after the retries)."""


class StreamInterrupted(TailorError):
    """A stream ended before its ``done`` event."""


class WaitTimeout(TailorError, TimeoutError):
    """``jobs.wait`` or ``eval.wait`` gave up before the job or run finished."""


class ClientError(TailorError):
    """A 4xx answer."""


class BadRequest(ClientError):
    """400: a malformed request."""


class AuthenticationFailed(ClientError):
    """401: a missing, invalid or revoked API key."""


class PermissionDenied(ClientError):
    """403."""


class NotFound(ClientError):
    """404: no such resource for this tenant."""


class MethodNotAllowed(ClientError):
    """405."""


class Conflict(ClientError):
    """409: the resource's state does not allow it (e.g. a report before the run succeeded)."""


class PayloadTooLarge(ClientError):
    """413."""


class UnsupportedMediaType(ClientError):
    """415."""


class ValidationFailed(ClientError):
    """422: ``errors`` names each offending field."""


class RateLimited(ClientError):
    """429: too many requests in flight; ``retry_after`` says when to come back."""


class ServerError(TailorError):
    """A 5xx answer."""


class BadGateway(ServerError):
    """502: e.g. the LLM answered something unusable."""


class Unavailable(ServerError):
    """503: the database, a model or the LLM is not available now."""


class GatewayTimeout(ServerError):
    """504: e.g. the LLM took longer than its deadline."""


_BY_STATUS: dict[int, type[TailorError]] = {
    400: BadRequest,
    401: AuthenticationFailed,
    403: PermissionDenied,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    422: ValidationFailed,
    429: RateLimited,
    502: BadGateway,
    503: Unavailable,
    504: GatewayTimeout,
}


def error_for(
    status: int, problem: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> TailorError:
    """The exception for a problem document with ``status``."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else ClientError if status >= 400 else TailorError
    title = problem.get("title")
    detail = problem.get("detail")
    message = f"{status} {title or 'error'}"
    if detail:
        message += f": {detail}"
    return cls(message, status=status, problem=problem, headers=headers)


def error_from_response(response: httpx.Response) -> TailorError:
    """The exception for an error answer whose body has been read."""
    problem: dict[str, Any] = {}
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        problem = body
    else:
        text = response.text.strip()
        problem = {
            "type": "about:blank",
            "title": response.reason_phrase or "error",
            "status": response.status_code,
            "detail": text[:500] or None,
        }
    return error_for(response.status_code, problem, dict(response.headers))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: a number of seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)
