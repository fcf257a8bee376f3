"""503 problem+json for a database that cannot take the request's transaction now.

A read-only database, a full disk, a lost or refused connection, a lock held past the busy
timeout, or an embedded SQLite file deleted or replaced while serving (``service/store/db.py``
refuses to commit then) all answer 503 ``database-unavailable``: the request wrote nothing and
may be retried, unlike a 500. Any other database error keeps the generic 500 answer."""

from __future__ import annotations

import logging
import socket
from types import TracebackType

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from service.api.errors import on_unexpected, problem_response
from service.store.db import DatabaseUnavailable, unavailable

log = logging.getLogger("tailor.api")

SLUG = "database-unavailable"
# Modules whose frames mark a connection error (ConnectionRefusedError, a DNS failure) as the
# database's: the drivers raise those unwrapped when the server cannot be reached.
_DATABASE_MODULES = ("sqlalchemy", "asyncpg", "aiosqlite", "sqlite3", "service.store")


def _raised_by_database(tb: TracebackType | None) -> bool:
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.startswith(_DATABASE_MODULES):
            return True
        tb = tb.tb_next
    return False


def _problem(request: Request, problem: DatabaseUnavailable) -> JSONResponse:
    headers = {"Retry-After": str(problem.retry_after)} if problem.retry_after else None
    return problem_response(
        503,
        f"The database cannot take this request now: {problem.reason}. Nothing was changed.",
        slug=SLUG,
        title="Database unavailable",
        instance=request.url.path,
        headers=headers,
    )


async def _answer(
    request: Request, exc: Exception, problem: DatabaseUnavailable | None
) -> JSONResponse:
    if problem is None:
        # Not about availability (a constraint, a bug, another connection error): the generic
        # answer, as for any unexpected error.
        return await on_unexpected(request, exc)
    log.error(
        "database unavailable on %s %s: %s", request.method, request.url.path, problem, exc_info=exc
    )
    return _problem(request, problem)


async def _on_database_error(request: Request, exc: Exception) -> JSONResponse:
    return await _answer(request, exc, unavailable(exc))


async def _on_connection_error(request: Request, exc: Exception) -> JSONResponse:
    by_database = _raised_by_database(exc.__traceback__)
    return await _answer(request, exc, unavailable(exc) if by_database else None)


def install(app: FastAPI) -> None:
    """Adds the handlers; call it after ``errors.install`` (``service/app.py``)."""
    app.add_exception_handler(DatabaseUnavailable, _on_database_error)
    app.add_exception_handler(SQLAlchemyError, _on_database_error)
    for kind in (ConnectionError, TimeoutError, socket.gaierror):
        # 503 only when raised from the database's code (see _raised_by_database), else the
        # generic 500 as before.
        app.add_exception_handler(kind, _on_connection_error)
