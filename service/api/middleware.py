"""Pure ASGI middleware: request metrics, body-size limit and Idempotency-Key replay."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from datetime import timedelta

from sqlalchemy.exc import SQLAlchemyError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.errors import PROBLEM_JSON, problem_bytes
from service.api.idempotent import RECORDED, SCOPE_KEY, key_reused, replayed
from service.metrics import HTTP_IN_FLIGHT, HTTP_LATENCY
from service.state import AppState
from service.store import idempotency, tenants
from service.store.db import transaction
from service.store.idempotency import KeyTaken, KeyUse


async def _send_problem(
    send: Send,
    status: int,
    detail: str,
    slug: str | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = problem_bytes(status, detail, slug=slug)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", PROBLEM_JSON.encode()),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class MetricsMiddleware:
    """Latency by route *template* (not raw path, which would explode cardinality)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                elapsed_ms = (time.perf_counter() - started) * 1000
                headers = list(message.get("headers", []))
                headers.append((b"server-timing", f"app;dur={elapsed_ms:.1f}".encode()))
                message["headers"] = headers
            await send(message)

        HTTP_IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            HTTP_IN_FLIGHT.dec()
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            HTTP_LATENCY.labels(scope["method"], template, str(status)).observe(
                time.perf_counter() - started
            )


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it exceeds ``limit``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The buffered body first; after it, the real channel, whose next message is the client's
    disconnect. (Answering "disconnect" at once would make a streaming response, which listens
    for it, stop before its first byte.)"""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class BodyLimitMiddleware:
    """413 for a body over the limit, checked on Content-Length and on the bytes received.
    The (bounded) body is buffered and handed on, so later layers can read it again."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, overrides: dict[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        # Exact paths with their own limit (archive uploads are larger than any JSON body).
        self.overrides = dict(overrides or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        max_bytes = self.overrides.get(scope["path"], self.max_bytes)
        detail = f"Request body exceeds {max_bytes} bytes."
        length = Headers(scope=scope).get("content-length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            await _send_problem(send, 413, detail, "payload-too-large")
            return
        body = await _read_body(receive, max_bytes)
        if body is None:
            await _send_problem(send, 413, detail, "payload-too-large")
            return
        scope.setdefault("state", {})["raw_body"] = body
        await self.app(scope, _replay(body, receive), send)


log = logging.getLogger("tailor.api")
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
USER_PATH = re.compile(r"^/v1/users/([^/]+)")


def _user_ref(path: str, body: bytes) -> str | None:
    match = USER_PATH.match(path)
    if match:
        return match.group(1)
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return None
    if isinstance(doc, dict) and isinstance(doc.get("user_id"), str):
        return str(doc["user_id"])
    return None


def _key_use(
    scope: Scope, state: AppState, tenant_id: str | None, key: str, body: bytes
) -> KeyUse | None:
    if tenant_id is None:
        return None
    path = scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
    return KeyUse(
        tenant_id=tenant_id,
        key=key,
        method="POST",
        path=path,
        request_hash=hashlib.sha256(b"POST " + path.encode() + b"\n" + body).hexdigest(),
        user_ref=_user_ref(scope["path"], body),
        ttl=timedelta(seconds=state.settings.idempotency_ttl_seconds),
    )


class IdempotencyMiddleware:
    """A POST with ``Idempotency-Key`` is answered once; a repeat with the same key and the
    same request gets the stored first answer and writes nothing. Only 2xx JSON answers are
    kept, so a failed request may be retried with the same key. A route that writes stores its
    answer in its write's transaction (``idempotent.remember``); the answers of the others are
    stored here, after the response."""

    def __init__(self, app: ASGIApp, state_holder: object) -> None:
        self.app = app
        self.state_holder = state_holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        key = headers.get("idempotency-key")
        auth = headers.get("authorization", "")
        if key is None or not auth.lower().startswith("bearer "):
            await self.app(scope, receive, send)
            return
        if not IDEMPOTENCY_KEY.match(key):
            await _send_problem(
                send,
                422,
                "header.Idempotency-Key: must be 1-255 visible ASCII characters",
                "validation-error",
            )
            return
        state: AppState = self.state_holder.state.tailor  # type: ignore[attr-defined]
        body: bytes = scope.get("state", {}).get("raw_body", b"")
        try:
            async with transaction(state.sessions) as session:
                tenant_id = await tenants.authenticate(session, auth[7:].strip())
                use = _key_use(scope, state, tenant_id, key, body)
                stored = await idempotency.lookup(session, use) if use is not None else None
        except (SQLAlchemyError, OSError) as exc:
            log.warning("Idempotency-Key lookup failed: %s", type(exc).__name__)
            await _send_problem(
                send,
                503,
                "The database is not available right now; retry the request.",
                "database-unavailable",
                [(b"retry-after", b"1")],
            )
            return
        if use is None:  # let the route answer 401
            await self.app(scope, receive, send)
            return
        if stored is not None:
            answer = replayed(stored) if stored.same_request else key_reused()
            await answer(scope, receive, send)
            return
        scope.setdefault("state", {})[SCOPE_KEY] = use
        await self._run_and_store(scope, receive, send, state, use)

    async def _run_and_store(
        self, scope: Scope, receive: Receive, send: Send, state: AppState, use: KeyUse
    ) -> None:
        status = 0
        content_type: str | None = None
        chunks: list[bytes] = []
        storable = True

        async def send_wrapper(message: Message) -> None:
            nonlocal status, content_type, storable
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = Headers(raw=message.get("headers", []))
                content_type = headers.get("content-type")
                storable = bool(content_type and "json" in content_type) and (
                    "idempotent-replayed" not in headers
                )
            elif message["type"] == "http.response.body" and storable:
                chunks.append(message.get("body", b""))
            await send(message)

        await self.app(scope, receive, send_wrapper)
        if not (200 <= status < 300 and storable) or scope["state"].get(RECORDED):
            return
        # A route that wrote nothing: its answer is kept so that a retry gets the same one.
        try:
            async with transaction(state.sessions) as session:
                await idempotency.record(
                    session,
                    use,
                    status_code=status,
                    body=b"".join(chunks),
                    content_type=content_type,
                )
        except KeyTaken:
            pass  # a duplicate's answer was stored first; both wrote nothing
        except (SQLAlchemyError, OSError) as exc:  # the answer is sent; a retry recomputes it
            log.warning("Idempotency-Key answer not stored: %s", type(exc).__name__)
