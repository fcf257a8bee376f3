"""What the sync and the async client share: the description of one call, the retry policy,
the request headers, and the answer parsers."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel

from tailor_client._operations import route
from tailor_client.errors import parse_retry_after

__version__ = "0.1.0"

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

USER_AGENT = f"tailor-client-python/{__version__}"

# Answers worth another try: too many requests, and a gateway, a database, a model or an LLM
# that was down, unusable or slow (the service wrote nothing in each case).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Failures where no answer came; with an Idempotency-Key on every POST, sending again is safe.
RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


class _NotGiven:
    """The default of an argument whose ``None`` means something (e.g. clearing a category)."""

    _instance: _NotGiven | None = None

    def __new__(cls) -> _NotGiven:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __bool__(self) -> bool:
        return False


NOT_GIVEN = _NotGiven()


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request to make and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, str | int] | None = None
    json: Any = None
    files: Mapping[str, tuple[str, bytes, str]] | None = None
    idempotency_key: str | None = None
    stream: bool = False
    accept: str = "application/json"


def call(
    name: str,
    parse: Callable[[httpx.Response], T],
    *,
    path_params: Mapping[str, str] | None = None,
    params: Mapping[str, Any] | None = None,
    json: Any = None,
    files: Mapping[str, tuple[str, bytes, str]] | None = None,
    idempotency_key: str | None = None,
    stream: bool = False,
    accept: str = "application/json",
) -> Call[T]:
    """The call of operation ``name`` (see ``_operations``); ``None`` query values are left
    out."""
    method, path = route(name, **(path_params or {}))
    query = {k: v for k, v in (params or {}).items() if v is not None} or None
    return Call(
        method=method,
        path=path,
        parse=parse,
        params=query,
        json=json,
        files=files,
        idempotency_key=idempotency_key,
        stream=stream,
        accept=accept,
    )


def body(**fields: Any) -> dict[str, Any]:
    """A JSON body of the given fields, leaving out those that are ``None`` or not given (the
    service then applies its defaults)."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if value is None or value is NOT_GIVEN:
            continue
        out[name] = _jsonable(value)
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def model(cls: type[M]) -> Callable[[httpx.Response], M]:
    """A parser of a JSON answer into ``cls``."""

    def parse(response: httpx.Response) -> M:
        return cls.model_validate_json(response.content)

    return parse


def no_content(response: httpx.Response) -> None:
    return None


def text(response: httpx.Response) -> str:
    return response.text


def content(response: httpx.Response) -> bytes:
    return response.content


def keep(response: httpx.Response) -> httpx.Response:
    return response


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying a request again.

    A request is tried at most ``1 + max_retries`` times: again after a 429, 502, 503 or 504
    answer and after a connection error or timeout. The wait is the answer's ``Retry-After``
    (seconds or an HTTP date) plus up to 10% jitter, or else exponential backoff with jitter:
    between half and all of ``min(backoff_max, backoff_base * 2**attempt)``. An answer asking
    for a wait longer than ``max_retry_after`` is not retried but raised (its exception carries
    ``retry_after``)."""

    max_retries: int = 2
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    max_retry_after: float = 60.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def backoff(self, attempt: int) -> float:
        ceiling = min(self.backoff_max, self.backoff_base * (2**attempt))
        return self.rng.uniform(ceiling / 2, ceiling)

    def after_response(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying after ``response`` (the ``attempt``-th retry, from
        0), or ``None`` when it is final."""
        if response.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
            return None
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        if retry_after is None:
            return self.backoff(attempt)
        if retry_after > self.max_retry_after:
            return None
        return retry_after + self.rng.uniform(0, 0.1 * retry_after)

    def after_error(self, error: Exception, attempt: int) -> float | None:
        """Seconds to wait before retrying after a transport ``error``, or ``None``."""
        if not isinstance(error, RETRY_EXCEPTIONS) or attempt >= self.max_retries:
            return None
        return self.backoff(attempt)


def headers_for(c: Call[Any]) -> dict[str, str]:
    """The request's own headers: a fresh Idempotency-Key for a POST (unless the caller gave
    one); the request object, and so the key, is reused for each retry."""
    headers = {"Accept": c.accept}
    if c.method == "POST":
        headers["Idempotency-Key"] = c.idempotency_key or str(uuid.uuid4())
    return headers


def client_headers(api_key: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT, **(extra or {})}


def timeout_of(timeout: float | httpx.Timeout | None) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=None if timeout is None else min(timeout, 10.0))


def build_request(http: httpx.Client | httpx.AsyncClient, c: Call[Any]) -> httpx.Request:
    return http.build_request(
        c.method,
        c.path,
        params=c.params,
        json=c.json if c.files is None else None,
        files=c.files,
        headers=headers_for(c),
    )


def upload_name(data: bytes, filename: str | None) -> str:
    """The name an uploaded archive is sent with: the one given, else one its first bytes
    suggest (the service tells .zip from .tar.gz by name)."""
    if filename:
        return filename
    if data[:4] == b"PK\x03\x04":
        return "dataset.zip"
    if data[:2] == b"\x1f\x8b":
        return "dataset.tar.gz"
    return "dataset"
