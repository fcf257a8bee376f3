"""A real OpenAI-compatible HTTP server (Starlette under uvicorn, in a background thread) whose
answers each test scripts, and a factory for clients pointed at it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from service.llm import OpenAICompatibleClient


@dataclass
class Reply:
    """One scripted answer. ``sse`` lines are sent as they are, each followed by a blank line."""

    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    sse: list[str] | None = None


def completion(text: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> Reply:
    return Reply(
        json={
            "id": "cmpl-1",
            "object": "chat.completion",
            "model": "served-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def chunk(content: str | None = None, *, role: str | None = None, finish: str | None = None) -> str:
    delta: dict[str, str] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    body = {
        "id": "chunk",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return "data: " + json.dumps(body)


@dataclass
class Seen:
    at: float
    headers: dict[str, str]
    body: dict[str, Any]


class FakeLLMServer:
    """Answers POST /v1/chat/completions from a queue of Replies (then from ``fallback``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self.fallback: Reply | None = None
        self.requests: list[Seen] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._generation = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/health", self._health, methods=["GET"]),
            ]
        )
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    # --- scripting, from the test's thread ---------------------------------------------------

    def reply(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.fallback = None
            self.requests = []
            self.in_flight = 0
            self.max_in_flight = 0
            # Handlers of an earlier test that are still sleeping must not count in this one.
            self._generation += 1

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._server.started:
                try:
                    if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).is_success:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.02)
        raise RuntimeError("the fake LLM server did not start")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    # --- handlers, on the server's thread ----------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            generation = self._generation
            self.requests.append(Seen(time.monotonic(), dict(request.headers), body))
            reply = self._replies.popleft() if self._replies else self.fallback
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if reply is None:
                return JSONResponse({"error": {"message": "unscripted request"}}, status_code=418)
            if reply.delay:
                await _sleep_unless_disconnected(request, reply.delay)
            if reply.sse is not None:
                return StreamingResponse(_sse(reply.sse), media_type="text/event-stream")
            if reply.body is not None:
                return Response(reply.body, reply.status, reply.headers, "text/html")
            return JSONResponse(reply.json, reply.status, reply.headers)
        finally:
            with self._lock:
                if generation == self._generation:
                    self.in_flight -= 1


async def _sse(lines: list[str]) -> AsyncIterator[bytes]:
    for line in lines:
        yield (line + "\n\n").encode()
        await asyncio.sleep(0.005)


async def _sleep_unless_disconnected(request: Request, delay: float) -> None:
    """Sleep, but stop when the client hangs up, so that a test's slow handler does not
    outlive the test (or delay the server's shutdown)."""

    async def hung_up() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(hung_up(), delay)


@pytest.fixture(scope="module")
def llm_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake(llm_server: FakeLLMServer) -> FakeLLMServer:
    llm_server.reset()
    return llm_server


ClientFactory = Callable[..., OpenAICompatibleClient]


@pytest.fixture
async def make_client(fake: FakeLLMServer) -> AsyncIterator[ClientFactory]:
    """Clients on the fake server with short timeouts; each gets its own metrics label."""
    made: list[OpenAICompatibleClient] = []

    def make(**overrides: Any) -> OpenAICompatibleClient:
        kwargs: dict[str, Any] = {
            "base_url": fake.base_url,
            "model": "test-model",
            "api_key": "sk-test",
            "connect_timeout_s": 0.5,
            "read_timeout_s": 0.5,
            "max_retries": 2,
            "max_concurrency": 4,
            "deadline_s": 3.0,
            "name": f"test-{uuid.uuid4().hex[:8]}",
            "backoff_base_s": 0.01,
            "backoff_cap_s": 0.05,
            **overrides,
        }
        client = OpenAICompatibleClient(**kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
