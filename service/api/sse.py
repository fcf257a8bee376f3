"""Server-sent events for a reply streamed from the language model: `POST /v1/generate` and
`POST /v1/turns` with `"stream": true`.

The stream is `attributes` (what the reply uses; its data is the route's), then `delta`
events `{"text"}`, then `done` `{"reply", ...}`, or, for a failure after the first byte was
sent, an `error` event carrying a problem document. The first delta is awaited before the
response starts, so a model that is down or too slow still gets its proper 503/504 problem
response instead of a 200 stream that fails at once."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any

from fastapi.responses import StreamingResponse

from service import metrics
from service.api.errors import ProblemError, problem_body
from service.api.pipeline_errors import llm_problem
from service.llm.base import LLMError
from service.store.db import unavailable

log = logging.getLogger("tailor.api")

Finish = Callable[[str], Awaitable[Mapping[str, object]]]
"""Runs with the whole reply once the model finished, before `done` is sent; what it returns
is added to `done`'s data. An exception it raises becomes the stream's `error` event instead
(a ``ProblemError`` as it is, a database that cannot take the write as 503
`database-unavailable`, anything else as the generic 500)."""


def sse_doc(description: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI entry of a route that answers JSON, or events with `stream: true`."""
    return {
        200: {
            "description": description,
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    }


def event(name: str, data: object) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _error(problem: ProblemError) -> bytes:
    return event(
        "error",
        problem_body(problem.status, problem.detail, slug=problem.slug, title=problem.title),
    )


def _as_problem(exc: Exception) -> ProblemError:
    if isinstance(exc, ProblemError):
        return exc
    cause = unavailable(exc)
    if cause is not None:
        log.error("database unavailable at the end of a stream: %s", cause, exc_info=exc)
        return ProblemError(
            503,
            f"The database cannot take this request now: {cause.reason}. Nothing was changed.",
            slug="database-unavailable",
            title="Database unavailable",
        )
    log.exception("unhandled error at the end of a stream", exc_info=exc)
    return ProblemError(500, "An unexpected error occurred; nothing was changed.")


async def stream_reply(
    deltas: AsyncGenerator[str, None], opening: object, *, finish: Finish | None = None
) -> StreamingResponse:
    """The events for ``deltas``: `attributes` with ``opening`` as its data, the deltas, then
    ``finish`` (if any) and `done`. Raises the ``LLMError`` of a model that fails before its
    first delta (the caller's usual problem response then, and nothing was sent)."""
    try:
        first = await anext(deltas)
    except StopAsyncIteration:
        first = ""
    except LLMError:
        metrics.GENERATIONS.labels("personalized", "error").inc()
        await deltas.aclose()
        raise

    async def events() -> AsyncIterator[bytes]:
        parts = [first]
        async with aclosing(deltas):
            yield event("attributes", opening)
            if first:
                yield event("delta", {"text": first})
            try:
                async for delta in deltas:
                    parts.append(delta)
                    yield event("delta", {"text": delta})
            except LLMError as exc:
                metrics.GENERATIONS.labels("personalized", "error").inc()
                yield _error(llm_problem(exc))
                return
        metrics.GENERATIONS.labels("personalized", "ok").inc()
        reply = "".join(parts)
        try:
            extra = await finish(reply) if finish is not None else {}
        except Exception as exc:
            yield _error(_as_problem(exc))
            return
        yield event("done", {"reply": reply, **extra})

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
