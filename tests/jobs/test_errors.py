"""What a failed job shows its tenant: a short summary, never SQL or its parameters."""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import IntegrityError, OperationalError

from service.jobs.errors import MAX_SUMMARY_CHARS, public_error, summarize
from service.store.db import DatabaseUnavailable, unavailable

STATEMENT = "INSERT INTO users (id, tenant_id) VALUES (?, ?)"
PARAMS = ("f00d", "tenant-secret")


def _integrity() -> IntegrityError:
    return IntegrityError(STATEMENT, PARAMS, sqlite3.IntegrityError("UNIQUE constraint failed"))


def test_database_errors_are_reduced_to_their_class() -> None:
    exc = _integrity()
    assert "tenant-secret" in str(exc) and "[SQL:" in str(exc)  # what used to be stored
    assert summarize(exc) == "database error: IntegrityError"
    assert summarize(sqlite3.OperationalError("no such table: x")) == (
        "database error: OperationalError"
    )
    gone = DatabaseUnavailable("the database file is gone", "/var/lib/tailor/tailor.db")
    assert summarize(gone) == "database unavailable: the database file is gone"


def test_a_message_built_from_a_database_error_is_reduced_too() -> None:
    try:
        try:
            raise _integrity()
        except IntegrityError as inner:
            raise RuntimeError(f"could not store: {inner}") from inner
    except RuntimeError as outer:
        assert summarize(outer) == "database error: IntegrityError"


def test_other_errors_keep_their_class_and_first_line() -> None:
    assert summarize(ValueError("bad\nsecond line")) == "ValueError: bad"
    assert summarize(KeyError()) == "KeyError"
    assert summarize(RuntimeError("tab\there\x00")) == "RuntimeError: tab here"
    long = summarize(RuntimeError("x" * 5000))
    assert len(long) == len("RuntimeError: ") + MAX_SUMMARY_CHARS and long.endswith("…")
    assert summarize(RuntimeError("why"), with_type=False) == "why"


def test_stored_sql_errors_are_cut_down_when_shown() -> None:
    stored = f"IntegrityError: {_integrity()}"
    assert public_error(stored) == "database error: IntegrityError"
    assert public_error("RuntimeError: model unavailable") == "RuntimeError: model unavailable"
    assert public_error(None) is None


def test_unavailable_tells_availability_from_other_database_errors() -> None:
    def op(message: str, name: str) -> OperationalError:
        err = sqlite3.OperationalError(message)
        err.sqlite_errorname = name
        return OperationalError("UPDATE x", (), err)

    read_only = unavailable(op("attempt to write a readonly database", "SQLITE_READONLY"))
    assert read_only is not None and read_only.reason == "the database is read-only"
    busy = unavailable(op("database is locked", "SQLITE_BUSY"))
    assert busy is not None and busy.retry_after == 1
    assert unavailable(_integrity()) is None
    assert unavailable(ValueError("no")) is None
    refused = unavailable(ConnectionRefusedError(111, "Connect call failed"))
    assert refused is not None and refused.reason == "the database server cannot be reached"
