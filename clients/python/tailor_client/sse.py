"""Server-sent events: a decoder for the `text/event-stream` format (WHATWG HTML, "Server-sent
events") and the typed events of Tailor's streamed replies.

`POST /v1/generate` and `POST /v1/turns` with `"stream": true` answer `attributes` (what the
reply uses; for a turn also the extraction job's id), then `delta` events `{"text"}`, then
`done` `{"reply"}`, or `error` carrying a problem document when the reply failed after the
stream started."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from tailor_client.errors import TailorError, error_for
from tailor_client.models import UsedAttribute

__all__ = [
    "AttributesEvent",
    "DeltaEvent",
    "DoneEvent",
    "SSEDecoder",
    "ServerSentEvent",
    "StreamEvent",
    "aiter_sse",
    "iter_sse",
    "typed_event",
]


@dataclass(frozen=True)
class ServerSentEvent:
    """One event as sent: its name (``message`` when the stream named none), its data (the
    ``data:`` lines joined with newlines), and its ``id`` and ``retry`` when given."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        """The data parsed as JSON."""
        return json.loads(self.data)


class SSEDecoder:
    """Feed it the stream's lines (without their line ends); it returns an event at each blank
    line that ends one."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):  # a comment, e.g. a keep-alive
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def flush(self) -> ServerSentEvent | None:
        """At the end of the stream: an event left without its blank line is dropped, as the
        specification says; this only resets the decoder."""
        self._event, self._data = "", []
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._data and not self._event:
            return None
        sse = ServerSentEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._id,
            retry=self._retry,
        )
        self._event, self._data, self._retry = "", [], None
        return sse


def iter_sse(lines: Iterable[str]) -> Iterator[ServerSentEvent]:
    """The events of a stream given as lines (e.g. ``httpx.Response.iter_lines()``)."""
    decoder = SSEDecoder()
    for line in lines:
        sse = decoder.feed(line.rstrip("\r\n"))
        if sse is not None:
            yield sse
    decoder.flush()


async def aiter_sse(lines: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    """`iter_sse` for an async stream of lines (``httpx.Response.aiter_lines()``)."""
    decoder = SSEDecoder()
    async for line in lines:
        sse = decoder.feed(line.rstrip("\r\n"))
        if sse is not None:
            yield sse
    decoder.flush()


class AttributesEvent(BaseModel):
    """The stream's first event: the attributes the reply uses and, for a turn, the id the
    extraction job will have (``None`` for ``/v1/generate`` and for a turn with
    ``extract=False``). The job exists once the stream's ``done`` event came."""

    attributes_used: list[UsedAttribute]
    job_id: str | None = None


class DeltaEvent(BaseModel):
    """The next piece of the reply."""

    text: str


class DoneEvent(BaseModel):
    """The whole reply; the stream ends here."""

    reply: str


StreamEvent = AttributesEvent | DeltaEvent | DoneEvent


def typed_event(sse: ServerSentEvent) -> StreamEvent | None:
    """The typed event for ``sse``; ``None`` for an event name this client does not know
    (a newer service may send more). An ``error`` event raises its ``TailorError``."""
    if sse.event == "attributes":
        data = sse.json()
        if isinstance(data, list):  # /v1/generate: the list alone
            return AttributesEvent(attributes_used=[UsedAttribute.model_validate(a) for a in data])
        return AttributesEvent.model_validate(data)
    if sse.event == "delta":
        return DeltaEvent.model_validate(sse.json())
    if sse.event == "done":
        return DoneEvent.model_validate(sse.json())
    if sse.event == "error":
        raise problem_error(sse.json())
    return None


def problem_error(problem: Any) -> TailorError:
    """The exception for a problem document sent as an ``error`` event."""
    if not isinstance(problem, dict):
        problem = {"type": "about:blank", "title": "Stream error", "detail": str(problem)}
    status = problem.get("status")
    return error_for(status if isinstance(status, int) else 500, problem)
