"""``Idempotency-Key``: a write's answer is stored in the write's own transaction.

``IdempotencyMiddleware`` (middleware.py) replays stored answers and hands the handler a
``KeyUse`` in the request scope; a route that writes calls ``remember`` inside the transaction
that does its write, so the answer commits with the write or not at all. Answers of routes
that write nothing are stored by the middleware after the response."""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from service.api.errors import problem_response
from service.metrics import IDEMPOTENT_REPLAYS
from service.state import AppState
from service.store import idempotency
from service.store.db import transaction
from service.store.idempotency import KeyTaken, KeyUse, Stored

SCOPE_KEY = "idempotency"
RECORDED = "idempotency_recorded"


def key_use(request: Request) -> KeyUse | None:
    use = request.scope.get("state", {}).get(SCOPE_KEY)
    return use if isinstance(use, KeyUse) else None


def render(model: BaseModel) -> bytes:
    """The JSON bytes FastAPI sends for ``model`` as a route's return value."""
    return json.dumps(
        model.model_dump(mode="json"), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode()


async def remember(
    session: AsyncSession, request: Request, status_code: int, answer: BaseModel
) -> None:
    """Store ``answer`` for the request's key (if it has one) in ``session``'s transaction;
    call it in the transaction that does the request's write, before it commits."""
    use = key_use(request)
    if use is None:
        return
    await idempotency.record(
        session,
        use,
        status_code=status_code,
        body=render(answer),
        content_type="application/json",
    )
    request.scope["state"][RECORDED] = True


def replayed(stored: Stored) -> Response:
    IDEMPOTENT_REPLAYS.inc()
    return Response(
        stored.body,
        status_code=stored.status_code,
        media_type=stored.content_type or "application/json",
        headers={"Idempotent-Replayed": "true"},
    )


def key_reused(instance: str | None = None) -> Response:
    return problem_response(
        422,
        "Idempotency-Key was already used with a different request.",
        slug="idempotency-key-reused",
        instance=instance,
    )


def install(app: FastAPI) -> None:
    async def on_key_taken(request: Request, exc: Exception) -> Response:
        # A duplicate committed first while this request ran; this one's write rolled back.
        use = key_use(request)
        state: AppState = request.app.state.tailor
        stored = None
        if use is not None:
            async with transaction(state.sessions) as session:
                stored = await idempotency.lookup(session, use)
        if stored is None:  # expired between the two transactions: let the client retry
            return problem_response(
                409,
                "A request with this Idempotency-Key just completed; retry it.",
                slug="conflict",
                instance=request.url.path,
            )
        if not stored.same_request:
            return key_reused(request.url.path)
        return replayed(stored)

    app.add_exception_handler(KeyTaken, on_key_taken)
