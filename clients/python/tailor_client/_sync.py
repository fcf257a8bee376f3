"""`TailorClient`: the blocking client."""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, overload

import httpx

from tailor_client import _calls
from tailor_client._calls import (
    TERMINAL_JOB,
    TERMINAL_RUN,
    AttributeStatus,
    Evidence,
    Extractor,
    FileInput,
    Judge,
    ListStatus,
    Message,
    NewAttribute,
    RunStatus,
)
from tailor_client._core import (
    NOT_GIVEN,
    Call,
    RetryPolicy,
    _NotGiven,
    build_request,
    client_headers,
    timeout_of,
)
from tailor_client.errors import ConnectionFailed, WaitTimeout, error_from_response
from tailor_client.models import (
    AttributeBatchOut,
    AttributeList,
    AttributeOut,
    AuditList,
    ErasureOut,
    EvalAccepted,
    EvalRunList,
    EvalRunOut,
    ExtractResponse,
    GenerateResponse,
    JobList,
    JobStatusOut,
    SelectResponse,
    TurnResponse,
    UploadOut,
    UserExport,
    VerifyResponse,
)
from tailor_client.streams import ReplyStream

T = TypeVar("T")


_Item = TypeVar("_Item")
_ItemOut = TypeVar("_ItemOut", covariant=True)


class _Page(Protocol[_ItemOut]):
    @property
    def items(self) -> Sequence[_ItemOut]: ...
    @property
    def next_cursor(self) -> str | None: ...


def _pages(fetch: Callable[[str | None], _Page[_Item]]) -> Iterator[_Item]:
    """Every item of a paged list, one page fetched at a time as the iteration goes on."""
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        yield from page.items
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


class TailorClient:
    """A client of the Tailor API.

    ``base_url`` is the service's address (``http://127.0.0.1:8000``), ``api_key`` a tenant's
    key. ``timeout`` (seconds, or an ``httpx.Timeout``) bounds each try of a request;
    ``max_retries`` is how many times a request is tried again after a 429, 502, 503 or 504
    answer or a connection error (see `RetryPolicy`; ``retry_policy`` replaces it whole). Every
    POST carries an ``Idempotency-Key`` that its retries reuse, so a retried write happens at
    most once. ``transport`` and ``headers`` are passed to httpx (a ``MockTransport`` in tests).

    Errors are raised as `TailorError` subclasses carrying the problem document. Close the
    client (``with TailorClient(...) as client:``) to release its connections."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout | None = 60.0,
        max_retries: int = 2,
        retry_policy: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry_policy = retry_policy or RetryPolicy(max_retries=max_retries)
        self._http = httpx.Client(
            base_url=base_url,
            headers=client_headers(api_key, headers),
            timeout=timeout_of(timeout),
            transport=transport,
        )
        self.attributes = Attributes(self)
        self.users = Users(self)
        self.jobs = Jobs(self)
        self.eval = Eval(self)

    # --- plumbing ---------------------------------------------------------------------------

    def _send(self, c: Call[Any]) -> httpx.Response:
        """Send ``c``, retrying as the policy says; the answer of a success (unread when
        streaming), else the error raised."""
        request = build_request(self._http, c)
        policy = self.retry_policy
        attempt = 0
        while True:
            try:
                response = self._http.send(request, stream=c.stream)
            except httpx.TransportError as exc:
                delay = policy.after_error(exc, attempt)
                if delay is None:
                    raise ConnectionFailed(
                        f"{c.method} {c.path}: {type(exc).__name__}: {exc}"
                    ) from exc
            else:
                if response.is_success:
                    return response
                delay = policy.after_response(response, attempt)
                response.read()
                response.close()
                if delay is None:
                    raise error_from_response(response)
            time.sleep(delay)
            attempt += 1

    def _call(self, c: Call[T]) -> T:
        response = self._send(c)
        return c.parse(response)

    def _stream(self, c: Call[Any]) -> ReplyStream:
        return ReplyStream(self._send(_calls.streamed(c)))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TailorClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- pipeline ---------------------------------------------------------------------------

    def extract(
        self,
        conversation: Sequence[Message],
        *,
        user_id: str | None = None,
        store: bool | None = None,
        extractor: Extractor | None = None,
        idempotency_key: str | None = None,
    ) -> ExtractResponse:
        """POST /v1/extract: the facts the conversation states about the user, each with its
        verdict; with ``user_id`` the supported ones are merged into the user's attributes
        (unless ``store=False``)."""
        return self._call(
            _calls.extract(
                conversation,
                user_id=user_id,
                store=store,
                extractor=extractor,
                idempotency_key=idempotency_key,
            )
        )

    def verify(
        self,
        conversation: Sequence[Message],
        attributes: Sequence[str],
        *,
        idempotency_key: str | None = None,
    ) -> VerifyResponse:
        """POST /v1/verify: whether the conversation supports each attribute (stateless)."""
        return self._call(_calls.verify(conversation, attributes, idempotency_key=idempotency_key))

    def select(
        self,
        prompt: str,
        *,
        user_id: str | None = None,
        attributes: Sequence[str] | None = None,
        idempotency_key: str | None = None,
    ) -> SelectResponse:
        """POST /v1/select: the attributes that matter for ``prompt``, from the user's stored
        ones (``user_id``) or from ``attributes``; give exactly one of the two."""
        return self._call(
            _calls.select(
                prompt, user_id=user_id, attributes=attributes, idempotency_key=idempotency_key
            )
        )

    @overload
    def generate(
        self,
        messages: Sequence[Message],
        *,
        user_id: str | None = ...,
        attributes: Sequence[str] | None = ...,
        include_generic: bool | None = ...,
        max_tokens: int | None = ...,
        temperature: float | None = ...,
        stream: Literal[False] = ...,
        idempotency_key: str | None = ...,
    ) -> GenerateResponse: ...

    @overload
    def generate(
        self,
        messages: Sequence[Message],
        *,
        user_id: str | None = ...,
        attributes: Sequence[str] | None = ...,
        include_generic: bool | None = ...,
        max_tokens: int | None = ...,
        temperature: float | None = ...,
        stream: Literal[True],
        idempotency_key: str | None = ...,
    ) -> ReplyStream: ...

    def generate(
        self,
        messages: Sequence[Message],
        *,
        user_id: str | None = None,
        attributes: Sequence[str] | None = None,
        include_generic: bool | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: bool = False,
        idempotency_key: str | None = None,
    ) -> GenerateResponse | ReplyStream:
        """POST /v1/generate: a reply to ``messages`` that uses the user's relevant attributes
        (``user_id``) or the given ``attributes``. ``stream=True`` returns a `ReplyStream`."""
        c = _calls.generate(
            messages,
            user_id=user_id,
            attributes=attributes,
            include_generic=include_generic,
            max_tokens=max_tokens,
            temperature=temperature,
            stream=stream,
            idempotency_key=idempotency_key,
        )
        return self._stream(c) if stream else self._call(c)

    @overload
    def turn(
        self,
        user_id: str,
        messages: Sequence[Message],
        *,
        extract: bool | None = ...,
        max_tokens: int | None = ...,
        temperature: float | None = ...,
        stream: Literal[False] = ...,
        idempotency_key: str | None = ...,
    ) -> TurnResponse: ...

    @overload
    def turn(
        self,
        user_id: str,
        messages: Sequence[Message],
        *,
        extract: bool | None = ...,
        max_tokens: int | None = ...,
        temperature: float | None = ...,
        stream: Literal[True],
        idempotency_key: str | None = ...,
    ) -> ReplyStream: ...

    def turn(
        self,
        user_id: str,
        messages: Sequence[Message],
        *,
        extract: bool | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: bool = False,
        idempotency_key: str | None = None,
    ) -> TurnResponse | ReplyStream:
        """POST /v1/turns: one chat turn. The reply uses the user's relevant attributes, and
        extraction of the new turn is queued as a job (``job_id``; see `Jobs.wait`) unless
        ``extract=False``. ``stream=True`` returns a `ReplyStream` whose ``job_id`` is known
        from its first event."""
        c = _calls.turn(
            user_id,
            messages,
            extract=extract,
            max_tokens=max_tokens,
            temperature=temperature,
            stream=stream,
            idempotency_key=idempotency_key,
        )
        return self._stream(c) if stream else self._call(c)


class Attributes:
    """/v1/users/{user_id}/attributes"""

    def __init__(self, client: TailorClient) -> None:
        self._client = client

    def list(
        self, user_id: str, *, status: ListStatus | None = None, page_size: int | None = None
    ) -> Iterator[AttributeOut]:
        """Every attribute of the user with ``status`` (default ``active``; ``any`` for all),
        fetching one page of ``page_size`` (1-200) at a time as the iteration goes on."""
        yield from _pages(
            lambda cursor: self.list_page(user_id, status=status, limit=page_size, cursor=cursor)
        )

    def list_page(
        self,
        user_id: str,
        *,
        status: ListStatus | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AttributeList:
        """One page; pass its ``next_cursor`` as ``cursor`` for the next (``None`` at the end)."""
        return self._client._call(
            _calls.attributes_page(user_id, status=status, limit=limit, cursor=cursor)
        )

    def create(
        self,
        user_id: str,
        text: str,
        *,
        category: str | None = None,
        evidence: Sequence[Evidence] | None = None,
        idempotency_key: str | None = None,
    ) -> AttributeOut:
        """Store an attribute (a short third-person statement about the user)."""
        return self._client._call(
            _calls.attribute_create(
                user_id,
                text=text,
                category=category,
                evidence=evidence,
                idempotency_key=idempotency_key,
            )
        )

    def create_batch(
        self,
        user_id: str,
        items: Sequence[NewAttribute],
        *,
        idempotency_key: str | None = None,
    ) -> AttributeBatchOut:
        """Up to 100 attributes in one transaction, one result per item (``created``,
        ``merged`` into an active attribute it restates, or ``rejected`` with its
        ``problem``)."""
        return self._client._call(
            _calls.attribute_create_batch(user_id, items, idempotency_key=idempotency_key)
        )

    def get(self, user_id: str, attribute_id: str) -> AttributeOut:
        return self._client._call(_calls.attribute_get(user_id, attribute_id))

    def update(
        self,
        user_id: str,
        attribute_id: str,
        *,
        text: str | _NotGiven = NOT_GIVEN,
        category: str | _NotGiven | None = NOT_GIVEN,
        status: AttributeStatus | _NotGiven = NOT_GIVEN,
    ) -> AttributeOut:
        """PATCH: change the text, the category (``None`` clears it) or the status; the change
        is written to the attribute's audit log."""
        return self._client._call(
            _calls.attribute_update(
                user_id, attribute_id, text=text, category=category, status=status
            )
        )

    def delete(self, user_id: str, attribute_id: str) -> None:
        """Soft delete: the status becomes ``deleted``; the history keeps it."""
        self._client._call(_calls.attribute_delete(user_id, attribute_id))

    def history(self, user_id: str, attribute_id: str) -> AuditList:
        """The attribute's append-only audit log."""
        return self._client._call(_calls.attribute_history(user_id, attribute_id))

    def all(self, user_id: str, *, status: ListStatus | None = None) -> builtins.list[AttributeOut]:
        """`list` gathered into a list."""
        return builtins.list(self.list(user_id, status=status, page_size=200))


class Users:
    """/v1/users/{user_id}"""

    def __init__(self, client: TailorClient) -> None:
        self._client = client

    def export(self, user_id: str) -> UserExport:
        """Everything held about the user."""
        return self._client._call(_calls.user_export(user_id))

    def erase(self, user_id: str) -> ErasureOut:
        """Delete everything held about the user; the counts per table."""
        return self._client._call(_calls.user_erase(user_id))


class Jobs:
    """/v1/jobs"""

    def __init__(self, client: TailorClient) -> None:
        self._client = client

    def list(
        self, user_id: str, *, status: RunStatus | None = None, page_size: int | None = None
    ) -> Iterator[JobStatusOut]:
        """Every background job of the user (newest first), or those with ``status``,
        fetched a page at a time."""
        yield from _pages(
            lambda cursor: self.list_page(user_id, status=status, limit=page_size, cursor=cursor)
        )

    def list_page(
        self,
        user_id: str,
        *,
        status: RunStatus | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> JobList:
        """One page of the user's jobs; pass its ``next_cursor`` as ``cursor`` for the next."""
        return self._client._call(
            _calls.jobs_page(user_id, status=status, limit=limit, cursor=cursor)
        )

    def get(self, job_id: str) -> JobStatusOut:
        return self._client._call(_calls.job_get(job_id))

    def wait(
        self, job_id: str, *, timeout: float = 60.0, poll_interval: float = 0.25
    ) -> JobStatusOut:
        """Poll until the job ``succeeded`` or ``failed`` and return it (check ``status``);
        `WaitTimeout` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.status in TERMINAL_JOB:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"job {job_id} still {job.status} after {timeout} s")
            time.sleep(min(poll_interval, left))


class Eval:
    """/v1/eval: PersonaFeedback evaluation runs."""

    def __init__(self, client: TailorClient) -> None:
        self._client = client

    def list(
        self, *, status: RunStatus | None = None, page_size: int | None = None
    ) -> Iterator[EvalRunOut]:
        """Every evaluation run of the tenant (newest first), or those with ``status``,
        fetched a page at a time."""
        yield from _pages(
            lambda cursor: self.list_page(status=status, limit=page_size, cursor=cursor)
        )

    def list_page(
        self,
        *,
        status: RunStatus | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> EvalRunList:
        """One page of runs; pass its ``next_cursor`` as ``cursor`` for the next."""
        return self._client._call(_calls.eval_page(status=status, limit=limit, cursor=cursor))

    def start(
        self,
        *,
        dataset: str | None = None,
        upload_id: str | None = None,
        judge: Judge | None = None,
        splits: Sequence[Literal["general", "specific"]] | None = None,
        tiers: Sequence[Literal["easy", "medium", "hard"]] | None = None,
        limit: int | None = None,
        seed: int | None = None,
        idempotency_key: str | None = None,
    ) -> EvalAccepted:
        """Start a run over a dataset (a folder the service knows) or an upload (`upload`);
        give exactly one of the two."""
        return self._client._call(
            _calls.eval_start(
                dataset=dataset,
                upload_id=upload_id,
                judge=judge,
                splits=splits,
                tiers=tiers,
                limit=limit,
                seed=seed,
                idempotency_key=idempotency_key,
            )
        )

    def get(self, run_id: str) -> EvalRunOut:
        return self._client._call(_calls.eval_get(run_id))

    def wait(
        self, run_id: str, *, timeout: float = 600.0, poll_interval: float = 0.5
    ) -> EvalRunOut:
        """Poll until the run ``succeeded`` or ``failed`` and return it; `WaitTimeout` after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if run.status in TERMINAL_RUN:
                return run
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"evaluation run {run_id} still {run.status} after {timeout} s")
            time.sleep(min(poll_interval, left))

    def report(self, run_id: str) -> str:
        """The Markdown report of a run that succeeded (`Conflict` before)."""
        return self._client._call(_calls.eval_report(run_id))

    def chart(self, run_id: str) -> bytes:
        """The report's chart, PNG bytes."""
        return self._client._call(_calls.eval_chart(run_id))

    def upload(
        self,
        file: FileInput,
        *,
        filename: str | None = None,
        idempotency_key: str | None = None,
    ) -> UploadOut:
        """Upload a .zip or .tar.gz archive in the PersonaFeedback release layout (a path,
        bytes or a binary file); start a run on it with ``start(upload_id=...)``."""
        return self._client._call(
            _calls.eval_upload(file, filename=filename, idempotency_key=idempotency_key)
        )
