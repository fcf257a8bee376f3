"""``LLMClient`` for servers that speak OpenAI's chat-completions API (vLLM, SGLang, TGI,
llama.cpp, OpenAI itself).

One call is bounded by its deadline as a whole: connecting, waiting for a concurrency slot,
every retry and every backoff sleep. Transient failures (429, 5xx, dropped or refused
connections) are retried with full-jitter exponential backoff; a read timeout is not, because a
server that is still generating would only get the same work twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from types import TracebackType
from typing import Any, Self

import httpx

from service import metrics
from service.config import Settings
from service.llm.base import (
    Completion,
    LLMBadResponse,
    LLMClient,
    LLMError,
    LLMTimeout,
    LLMUnavailable,
    Message,
    count_tokens,
)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Failures of the connection rather than of the request. A chat completion changes nothing on
# the server, so asking again is safe even when the first request may have been processed.
RETRY_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 4.0
# Server messages end up in problem documents; a whole HTML error page does not belong there.
MAX_SERVER_MESSAGE_CHARS = 300


class _Retryable(Exception):
    """This attempt failed in a way that another attempt may not."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class OpenAICompatibleClient(LLMClient):
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 3.0,
        read_timeout_s: float = 30.0,
        max_retries: int = 2,
        max_concurrency: int = 16,
        deadline_s: float = 60.0,
        name: str = "openai_compatible",
        backoff_base_s: float = BACKOFF_BASE_S,
        backoff_cap_s: float = BACKOFF_CAP_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if max_retries < 0 or max_concurrency < 1 or deadline_s <= 0:
            raise ValueError("need max_retries >= 0, max_concurrency >= 1 and deadline_s > 0")
        self.name = name
        self.model = model
        self.max_retries = max_retries
        self.deadline_s = deadline_s
        self.read_timeout_s = read_timeout_s
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self._url = base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(
                connect=connect_timeout_s,
                read=read_timeout_s,
                write=connect_timeout_s,
                pool=connect_timeout_s,
            ),
            # The semaphore is the one bound on requests (its wait counts against the deadline);
            # a pool limit as well would add a second queue that fails on the pool timeout.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=max_concurrency),
            transport=transport,
        )
        self._slots = asyncio.Semaphore(max_concurrency)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Self:
        if not settings.llm_base_url:
            raise ValueError("TAILOR_LLM_BASE_URL is unset; there is no server to talk to")
        kwargs: dict[str, Any] = {
            "api_key": settings.llm_api_key,
            "connect_timeout_s": settings.llm_connect_timeout_s,
            "read_timeout_s": settings.llm_read_timeout_s,
            "max_retries": settings.llm_max_retries,
            "max_concurrency": settings.llm_max_concurrency,
            "deadline_s": settings.llm_deadline_s,
            **overrides,
        }
        return cls(settings.llm_base_url, settings.llm_model, **kwargs)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- calls -----------------------------------------------------------------------------

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 512,
        temperature: float = 0.2,
        json_schema: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> Completion:
        payload = self._payload(messages, max_tokens, temperature)
        if json_schema is not None:
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": json_schema, "strict": True},
            }
        budget = self.deadline_s if deadline_s is None else deadline_s
        deadline = asyncio.get_running_loop().time() + budget
        started = time.perf_counter()
        try:
            async with (
                asyncio.timeout_at(deadline),
                self._exchange(payload, deadline, stream=False) as response,
            ):
                completion = self._completion(response, time.perf_counter() - started)
        except (LLMError, TimeoutError, httpx.HTTPError) as exc:
            error = self._failed(exc, budget)
            if error is exc:
                raise
            raise error from exc
        finally:
            metrics.LLM_REQUEST_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        count_tokens(self.name, completion.prompt_tokens, completion.completion_tokens)
        return completion

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 512,
        temperature: float = 0.2,
        deadline_s: float | None = None,
    ) -> AsyncGenerator[str, None]:
        payload = self._payload(messages, max_tokens, temperature)
        payload["stream"] = True
        # Lets the server report token usage in a last chunk; servers that do not know the
        # option ignore it and the tokens go uncounted.
        payload["stream_options"] = {"include_usage": True}
        budget = self.deadline_s if deadline_s is None else deadline_s
        deadline = asyncio.get_running_loop().time() + budget
        started = time.perf_counter()
        try:
            async with contextlib.AsyncExitStack() as stack:
                # The deadline is applied around each await, never across a yield: a timeout
                # scope left open while suspended would cancel whatever the consumer awaits.
                async with asyncio.timeout_at(deadline):
                    response = await stack.enter_async_context(
                        self._exchange(payload, deadline, stream=True)
                    )
                lines = response.aiter_lines()
                data: list[str] = []
                while True:
                    async with asyncio.timeout_at(deadline):
                        line = await anext(lines, None)
                    if line:
                        # SSE: "field: value", one optional space after the colon; lines
                        # starting with ":" are comments (keep-alives).
                        field, _, value = line.partition(":")
                        if field == "data":
                            data.append(value.removeprefix(" "))
                        continue
                    # A blank line ends an event; so does the end of the body, for servers
                    # that close right after "data: [DONE]".
                    if data:
                        event, data = "\n".join(data), []
                        if event == "[DONE]":
                            break
                        delta = self._delta(event)
                        if delta:
                            yield delta
                    if line is None:
                        raise LLMBadResponse("The language model's stream ended before [DONE].")
        except (LLMError, TimeoutError, httpx.HTTPError) as exc:
            error = self._failed(exc, budget)
            if error is exc:
                raise
            raise error from exc
        finally:
            metrics.LLM_REQUEST_SECONDS.labels(self.name).observe(time.perf_counter() - started)

    # --- HTTP ------------------------------------------------------------------------------

    def _payload(
        self, messages: Sequence[Message], max_tokens: int, temperature: float
    ) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "max_tokens": max_tokens,
            "temperature": temperature,
        }

    @contextlib.asynccontextmanager
    async def _exchange(
        self, payload: dict[str, Any], deadline: float, *, stream: bool
    ) -> AsyncIterator[httpx.Response]:
        """A 2xx response, after retries; the caller enforces the deadline, this only decides
        whether another attempt still fits in it. The concurrency slot is held per attempt (and
        while the caller reads the response), not during backoff."""
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                async with self._slot():
                    request = self._http.build_request("POST", self._url, json=payload)
                    try:
                        response = await self._http.send(request, stream=stream)
                    except RETRY_ERRORS as exc:
                        raise _Retryable(_transport_reason(exc)) from exc
                    try:
                        if response.status_code in RETRY_STATUSES:
                            raise _Retryable(
                                f"answered HTTP {response.status_code}",
                                _retry_after(response),
                            )
                        if not response.is_success:
                            await response.aread()
                            raise LLMBadResponse(
                                f"The language model server refused the request with HTTP "
                                f"{response.status_code}: {_server_message(response)}"
                            )
                        yield response
                        return
                    finally:
                        await response.aclose()
            except _Retryable as failure:
                attempt += 1
                if attempt > self.max_retries:
                    raise LLMUnavailable(
                        f"The language model server {failure.reason} "
                        f"({attempt} attempt{'s' if attempt > 1 else ''}).",
                        retry_after=failure.retry_after,
                    ) from failure.__cause__
                delay = (
                    failure.retry_after
                    if failure.retry_after is not None
                    else random.uniform(
                        0, min(self.backoff_cap_s, self.backoff_base_s * 2 ** (attempt - 1))
                    )
                )
                # Waiting past the deadline would only turn a clear "unavailable" into a
                # timeout; say so now instead.
                if loop.time() + delay >= deadline:
                    raise LLMUnavailable(
                        f"The language model server {failure.reason}, and waiting "
                        f"{delay:.2g} s to retry would pass the call's deadline.",
                        retry_after=failure.retry_after,
                    ) from failure.__cause__
                metrics.LLM_RETRIES.labels(self.name).inc()
                await asyncio.sleep(delay)

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        async with self._slots:
            gauge = metrics.LLM_IN_FLIGHT.labels(self.name)
            gauge.inc()
            try:
                yield
            finally:
                gauge.dec()

    # --- parsing ---------------------------------------------------------------------------

    def _completion(self, response: httpx.Response, latency_s: float) -> Completion:
        try:
            body = response.json()
        except ValueError as exc:
            raise LLMBadResponse(
                f"The language model server's answer is not JSON: {_snippet(response.text)}"
            ) from exc
        try:
            message = body["choices"][0]["message"]
            content = message["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMBadResponse(
                "The language model server's answer has no choices[0].message.content."
            ) from exc
        if not isinstance(content, str):
            refusal = message.get("refusal") if isinstance(message, dict) else None
            raise LLMBadResponse(
                f"The language model refused: {_snippet(str(refusal))}"
                if refusal
                else "The language model server's answer has no text content."
            )
        prompt_tokens, completion_tokens = _usage(body.get("usage"))
        model = body.get("model")
        return Completion(
            text=content,
            model=model if isinstance(model, str) else self.model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_s=latency_s,
        )

    def _delta(self, event: str) -> str | None:
        try:
            chunk = json.loads(event)
        except ValueError as exc:
            raise LLMBadResponse(
                f"The language model's stream has an event that is not JSON: {_snippet(event)}"
            ) from exc
        if not isinstance(chunk, dict):
            raise LLMBadResponse("The language model's stream has an event that is not an object.")
        if chunk.get("error"):
            raise LLMBadResponse(
                f"The language model server failed mid-stream: {_error_message(chunk)}"
            )
        usage = chunk.get("usage")
        if usage:
            count_tokens(self.name, *_usage(usage))
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise LLMBadResponse("The language model's stream has a chunk without choices.")
        if not choices:
            return None
        try:
            content = (choices[0].get("delta") or {}).get("content")
        except AttributeError as exc:
            raise LLMBadResponse(
                "The language model's stream has a chunk without choices[0].delta."
            ) from exc
        if content is not None and not isinstance(content, str):
            raise LLMBadResponse("The language model's stream has non-text content.")
        return content

    # --- accounting ------------------------------------------------------------------------

    def _failed(self, exc: BaseException, budget: float) -> LLMError:
        error = _as_llm_error(exc, budget, self.read_timeout_s)
        metrics.LLM_ERRORS.labels(self.name, error.slug).inc()
        return error


def _as_llm_error(exc: BaseException, budget: float, read_timeout_s: float) -> LLMError:
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, TimeoutError):
        return LLMTimeout(f"The language model did not answer within the {budget:g} s deadline.")
    if isinstance(exc, httpx.ReadTimeout):
        return LLMTimeout(
            f"The language model server sent nothing for {read_timeout_s:g} s (read timeout)."
        )
    if isinstance(exc, httpx.TimeoutException):
        return LLMTimeout(f"The language model server timed out ({type(exc).__name__}).")
    if isinstance(exc, httpx.DecodingError):
        return LLMBadResponse("The language model server's answer could not be decoded.")
    if isinstance(exc, httpx.TransportError):
        return LLMUnavailable(f"The language model server {_transport_reason(exc)}.")
    return LLMUnavailable(f"The language model server could not be used ({type(exc).__name__}).")


def _transport_reason(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return f"could not be reached ({type(exc).__name__})"
    return f"dropped the connection ({type(exc).__name__})"


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds; the HTTP-date form is left to the backoff."""
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _usage(usage: object) -> tuple[int, int]:
    if not isinstance(usage, dict):
        return 0, 0

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return count("prompt_tokens"), count("completion_tokens")


def _error_message(body: dict[str, Any]) -> str:
    """The message of OpenAI's {"error": {"message"}} or vLLM's {"message"} error bodies."""
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return _snippet(error["message"])
    for value in (error, body.get("message"), body.get("detail")):
        if isinstance(value, str):
            return _snippet(value)
    return _snippet(json.dumps(body))


def _server_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return _snippet(response.text) or response.reason_phrase
    return _error_message(body) if isinstance(body, dict) else _snippet(response.text)


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= MAX_SERVER_MESSAGE_CHARS:
        return text
    return text[: MAX_SERVER_MESSAGE_CHARS - 1] + "…"
