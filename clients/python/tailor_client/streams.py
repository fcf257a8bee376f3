"""Streamed replies: what ``generate(..., stream=True)`` and ``turn(..., stream=True)`` return.

Iterate for the typed events (`AttributesEvent`, then `DeltaEvent`s, then `DoneEvent`); an
``error`` event raises its ``TailorError``. After the iteration ``reply``, ``attributes_used``
and ``job_id`` hold the outcome; ``until_done()`` consumes the stream and returns the reply.
Use it as a context manager (or exhaust it) so that its connection is released.

A turn retried with an ``Idempotency-Key`` whose first answer completed is replayed as JSON;
the stream then yields the same three kinds of event made from that answer."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing
from types import TracebackType
from typing import Any

import httpx

from tailor_client.errors import ConnectionFailed, StreamInterrupted
from tailor_client.models import UsedAttribute
from tailor_client.sse import (
    AttributesEvent,
    DeltaEvent,
    DoneEvent,
    StreamEvent,
    aiter_sse,
    iter_sse,
    typed_event,
)

__all__ = ["AsyncReplyStream", "ReplyStream"]


def _is_json(response: httpx.Response) -> bool:
    return "json" in response.headers.get("content-type", "")


def _replayed_events(answer: Any) -> list[StreamEvent]:
    """The events equivalent to a JSON answer (a replayed turn, or a service that ignored
    ``stream``)."""
    used = [UsedAttribute.model_validate(a) for a in answer.get("attributes_used", [])]
    reply = str(answer.get("reply", ""))
    events: list[StreamEvent] = [AttributesEvent(attributes_used=used, job_id=answer.get("job_id"))]
    if reply:
        events.append(DeltaEvent(text=reply))
    events.append(DoneEvent(reply=reply))
    return events


class _StreamState:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.attributes_used: list[UsedAttribute] = []
        self.job_id: str | None = None
        self.reply: str | None = None
        self.parts: list[str] = []
        self.started = False
        self.finished = False

    def record(self, event: StreamEvent) -> None:
        if isinstance(event, AttributesEvent):
            self.attributes_used = event.attributes_used
            self.job_id = event.job_id
        elif isinstance(event, DeltaEvent):
            self.parts.append(event.text)
        else:
            self.reply = event.reply
            self.finished = True

    @property
    def text(self) -> str:
        """The reply so far (all of it once done)."""
        return self.reply if self.reply is not None else "".join(self.parts)

    def interrupted(self) -> StreamInterrupted:
        return StreamInterrupted(
            "the stream ended before its done event",
            status=self.response.status_code,
            headers=dict(self.response.headers),
        )


class _StreamView:
    """What a streamed reply has shown so far; the same for the sync and the async stream."""

    def __init__(self, response: httpx.Response) -> None:
        self._state = _StreamState(response)

    @property
    def response(self) -> httpx.Response:
        return self._state.response

    @property
    def attributes_used(self) -> list[UsedAttribute]:
        return self._state.attributes_used

    @property
    def job_id(self) -> str | None:
        """A turn's extraction job (exists once the stream is done)."""
        return self._state.job_id

    @property
    def reply(self) -> str:
        """The reply so far; all of it once the stream is done."""
        return self._state.text

    @property
    def done(self) -> bool:
        return self._state.finished


class ReplyStream(_StreamView):
    """A streamed reply (see the module's documentation)."""

    def __iter__(self) -> Iterator[StreamEvent]:
        state = self._state
        if state.started:
            raise RuntimeError("a stream can be iterated only once")
        state.started = True
        try:
            for event in self._events():
                state.record(event)
                yield event
                if state.finished:
                    return
            raise state.interrupted()
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"the stream broke: {exc}") from exc
        finally:
            self.close()

    def _events(self) -> Iterator[StreamEvent]:
        response = self._state.response
        if _is_json(response):
            response.read()
            yield from _replayed_events(response.json())
            return
        for sse in iter_sse(response.iter_lines()):
            event = typed_event(sse)
            if event is not None:
                yield event

    def until_done(self) -> str:
        """Consume the rest of the stream; the whole reply."""
        if not self._state.started:
            for _ in self:
                pass
        elif not self._state.finished:
            raise self._state.interrupted()
        return self.reply

    def close(self) -> None:
        self._state.response.close()

    def __enter__(self) -> ReplyStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncReplyStream(_StreamView):
    """`ReplyStream` for the async client: ``async for`` and ``async with``."""

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[StreamEvent]:
        state = self._state
        if state.started:
            raise RuntimeError("a stream can be iterated only once")
        state.started = True
        try:
            async with aclosing(self._events()) as events:
                async for event in events:
                    state.record(event)
                    yield event
                    if state.finished:
                        return
            raise state.interrupted()
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"the stream broke: {exc}") from exc
        finally:
            await self.aclose()

    async def _events(self) -> AsyncGenerator[StreamEvent, None]:
        response = self._state.response
        if _is_json(response):
            await response.aread()
            for replayed in _replayed_events(response.json()):
                yield replayed
            return
        async for sse in aiter_sse(response.aiter_lines()):
            event = typed_event(sse)
            if event is not None:
                yield event

    async def until_done(self) -> str:
        """Consume the rest of the stream; the whole reply."""
        if not self._state.started:
            async for _ in self:
                pass
        elif not self._state.finished:
            raise self._state.interrupted()
        return self.reply

    async def aclose(self) -> None:
        await self._state.response.aclose()

    async def __aenter__(self) -> AsyncReplyStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
