"""Request dependencies as ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from service.api.errors import ProblemError, not_found
from service.inference import ModelRegistry
from service.llm.base import LLMClient
from service.metrics import TENANT_THROTTLED
from service.schemas.common import USER_ID_PATTERN
from service.state import AppState
from service.store import tenants, users
from service.store.db import read_transaction
from service.store.models import User


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.tailor
    return state


StateDep = Annotated[AppState, Depends(get_state)]


async def get_session(state: StateDep) -> AsyncIterator[AsyncSession]:
    """One transaction per request, committed before the response is sent (scope="function"),
    rolled back on any error so that a failed request leaves nothing half-written."""
    async with state.sessions() as session, session.begin():
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="An API key from `tailor admin create-tenant`.")
UNAUTHORIZED_HEADERS = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True)
class Caller:
    tenant_id: str
    key_id: str

    @property
    def actor(self) -> str:
        return f"key:{self.key_id}"


async def _authenticate(
    session: AsyncSession, credentials: HTTPAuthorizationCredentials | None
) -> Caller:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ProblemError(
            401, "Missing bearer API key.", slug="unauthorized", headers=UNAUTHORIZED_HEADERS
        )
    tenant_id = await tenants.authenticate(session, credentials.credentials)
    if tenant_id is None:
        raise ProblemError(
            401, "Invalid or revoked API key.", slug="unauthorized", headers=UNAUTHORIZED_HEADERS
        )
    return Caller(tenant_id=tenant_id, key_id=credentials.credentials[4:20])


async def get_caller(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    return await _authenticate(session, credentials)


async def get_caller_outside_transaction(
    state: StateDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> AsyncIterator[Caller]:
    """The caller, authenticated in a short transaction of its own, holding one of its
    tenant's slots for requests that run models or an LLM until the response is sent.

    For routes that run models or an LLM: they must not hold the request's transaction open
    for seconds (on SQLite every write transaction holds the write lock), so they open short
    ones themselves around their reads and their final writes."""
    async with read_transaction(state.sessions) as session:
        caller = await _authenticate(session, credentials)
    inflight = state.tenant_inflight
    limit = state.settings.tenant_max_concurrency
    if inflight[caller.tenant_id] >= limit:
        TENANT_THROTTLED.inc()
        raise ProblemError(
            429,
            f"This tenant already has {limit} requests running models or an LLM; retry after "
            "Retry-After seconds.",
            slug="tenant-busy",
            headers={"Retry-After": "1"},
        )
    inflight[caller.tenant_id] += 1
    try:
        yield caller
    finally:
        inflight[caller.tenant_id] -= 1
        if inflight[caller.tenant_id] <= 0:
            del inflight[caller.tenant_id]


CallerDep = Annotated[Caller, Depends(get_caller)]
AuthOnlyDep = Annotated[Caller, Depends(get_caller_outside_transaction)]


def get_models(state: StateDep) -> ModelRegistry:
    if state.models is None:
        raise ProblemError(
            503,
            "This deployment runs without models (TAILOR_LOAD_MODELS=false).",
            slug="models-unavailable",
        )
    return state.models


def get_llm(state: StateDep) -> LLMClient:
    if state.llm is None:
        raise ProblemError(
            503,
            "No language model is configured: set TAILOR_LLM_BASE_URL or run the embedded one.",
            slug="llm-unavailable",
        )
    return state.llm


ModelsDep = Annotated[ModelRegistry, Depends(get_models)]
LLMDep = Annotated[LLMClient, Depends(get_llm)]
UserIdPath = Annotated[str, Path(pattern=USER_ID_PATTERN, description="Your id for the user.")]


async def get_existing_user(session: SessionDep, caller: CallerDep, user_id: UserIdPath) -> User:
    """The tenant's user or 404; another tenant's user looks exactly like a missing one."""
    user = await users.get_user(session, caller.tenant_id, user_id)
    if user is None:
        raise not_found("user")
    return user


ExistingUserDep = Annotated[User, Depends(get_existing_user)]


def document_idempotency_key(
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=255,
            pattern=r"^[\x21-\x7e]{1,255}$",
            description=(
                "Optional; 1-255 visible ASCII characters (0x21-0x7E), else 422. A repeated "
                "POST with the same key and body returns the first (2xx) response and writes "
                "nothing new, the answer being stored with the write itself; a different body "
                "gives 422; a concurrent duplicate waits for the first and gets its answer."
            ),
        ),
    ] = None,
) -> None:
    """Documents the header in OpenAPI; IdempotencyMiddleware does the work."""


IDEMPOTENT = [Depends(document_idempotency_key)]
