"""What a failed job tells its tenant (``GET /v1/jobs/{id}`` ``error``): a short summary of the
problem, never a SQL statement, its parameters (tenant and user ids, embedding bytes) or a stack
trace. The worker logs the full error server-side."""

from __future__ import annotations

import re

from sqlalchemy.exc import SQLAlchemyError

from service.store.db import DatabaseUnavailable, is_driver_error

MAX_SUMMARY_CHARS = 300
# What SQLAlchemy appends to a statement's error: the statement itself, its parameters and a
# link. Any of them in a message means it carries a database error's text.
_SQL_MARKERS = ("[SQL:", "[parameters:", "(Background on this error", "sqlalche.me/e/")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _database_error(exc: BaseException) -> BaseException | None:
    """The first database error in ``exc``'s chain (itself, its cause, its context)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, SQLAlchemyError | DatabaseUnavailable) or is_driver_error(current):
            return current
        current = current.__cause__ or current.__context__
    return None


def first_line(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """The first non-empty line of ``text``, without control characters, at most ``limit``."""
    line = next((part for part in text.splitlines() if part.strip()), "")
    line = " ".join(_CONTROL.sub(" ", line).split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _database_summary(db: BaseException) -> str:
    if isinstance(db, DatabaseUnavailable):
        return f"database unavailable: {db.reason}"
    return f"database error: {type(db).__name__}"


def summarize(exc: BaseException, *, with_type: bool = True) -> str:
    """A short, safe summary of a job's failure.

    Database errors (SQLAlchemy's and the drivers') are reduced to their class, e.g.
    ``database error: IntegrityError``; anything else is its class and the first line of its
    message, cut to ``MAX_SUMMARY_CHARS``, unless that line carries SQL (a message built from a
    database error), which is reduced the same way."""
    if isinstance(exc, SQLAlchemyError | DatabaseUnavailable) or is_driver_error(exc):
        return _database_summary(exc)
    text = first_line(str(exc))
    if any(marker in text for marker in _SQL_MARKERS) or any(
        marker in str(exc) for marker in _SQL_MARKERS
    ):
        db = _database_error(exc)
        return _database_summary(db) if db is not None else f"database error: {type(exc).__name__}"
    name = type(exc).__name__
    if not with_type:
        return text or name
    return f"{name}: {text}" if text else name


def public_error(stored: str | None) -> str | None:
    """A stored job error as the API shows it: rows written before errors were summarized may
    still hold a database error's full text, which is cut down here."""
    if stored is None:
        return None
    if any(marker in stored for marker in _SQL_MARKERS):
        head = first_line(stored)
        match = re.match(r"\(([\w.]+)\)", head) or re.search(r"\b(\w+Error)\b", head)
        name = match.group(1).rsplit(".", 1)[-1] if match else "DatabaseError"
        return f"database error: {name}"
    return first_line(stored)
