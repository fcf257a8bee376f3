"""Engine and session factory, and what tells a database that cannot take writes apart.

On SQLite the engine also watches the database file itself: every commit first checks that the
path still names the file the connections opened. A deleted (or replaced) file keeps working
through its open descriptors, so without this check writes would succeed, answer 201, and be gone
after a restart; with it the commit fails with ``DatabaseUnavailable`` (503).

On SQLite every transaction is a write transaction (``BEGIN IMMEDIATE``) and the file takes one
writer at a time, so the transactions of this process first queue on an asyncio lock per file
(``_WriteGate``, first come first served) and only then ask SQLite for its lock; SQLite's
busy_timeout is left for other processes (the CLI, another replica)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, insert, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.util.concurrency import await_, in_greenlet

from service.config import Settings
from service.store.models import HealthCheck, utcnow


class DatabaseUnavailable(Exception):
    """The database cannot take this transaction now: its file is gone or was replaced
    (SQLite), it is read-only, full, busy past the timeout or unreachable.

    ``reason`` is short and safe to show to API clients and tenants (no paths, no SQL);
    ``str()`` adds the details for the log."""

    def __init__(self, reason: str, detail: str | None = None, *, retry_after: int | None = None):
        super().__init__(f"{reason} ({detail})" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.retry_after = retry_after


# --- SQLite ------------------------------------------------------------------------------


FileIdentity = tuple[int, int]


def _identity(path: str) -> FileIdentity | None:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise DatabaseUnavailable("the database file cannot be checked", str(exc)) from exc
    return (st.st_dev, st.st_ino)


@dataclass
class _SqliteFile:
    """The file an engine's connections opened, and the check that the path still names it."""

    path: str | None = None
    identity: FileIdentity | None = None

    def opened(self, path: str) -> None:
        current = _identity(path)
        if current is None:
            raise DatabaseUnavailable(
                "the database file is gone", f"{path} vanished as it was being opened"
            )
        if self.identity is None:
            self.path, self.identity = path, current
        elif (path, current) != (self.path, self.identity):
            # A new connection found another file at the path: the one the others write to
            # was deleted (SQLite then creates an empty one) or replaced.
            raise DatabaseUnavailable(
                "the database file was deleted or replaced",
                f"{path} is no longer the file this process opened",
            )

    def check(self) -> None:
        if self.path is None:
            return
        current = _identity(self.path)
        if current is None:
            raise DatabaseUnavailable(
                "the database file is gone",
                f"{self.path} no longer exists (deleted while serving); nothing was committed",
            )
        if current != self.identity:
            raise DatabaseUnavailable(
                "the database file was deleted or replaced",
                f"{self.path} is no longer the file this process opened; nothing was committed",
            )


def _main_file(dbapi_conn: DBAPIConnection) -> str:
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute("PRAGMA database_list")
        for row in cursor.fetchall():
            if row[1] == "main":
                return str(row[2] or "")
        return ""
    finally:
        cursor.close()


# How long a transaction waits for the other write transactions of this process before it is
# refused as busy (503 with Retry-After). The queue is first come first served, so this is only
# reached when a transaction holds the database for far longer than any request should.
WRITE_QUEUE_TIMEOUT_S = 30.0
# How long SQLite itself waits for a writer of another process (the CLI, another replica).
BUSY_TIMEOUT_MS = 5000


class _WriteGate:
    """One SQLite file's write lock as seen by one event loop: the connection that holds it and
    the asyncio lock the others queue on.

    Without it, concurrent transactions of one process all wait inside SQLite's busy handler,
    which polls with sleeps growing to 100 ms, favours newcomers over the longest waiter and
    gives up after busy_timeout: with 32 concurrent writers some requests got `database is
    locked` (503 `database-unavailable`). An asyncio lock
    queues them in order, costs nothing while waiting and hands over as soon as the holder's
    COMMIT or ROLLBACK has returned."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)  # not a strong one: _GATES is keyed weakly by the loop
        self.lock = asyncio.Lock()
        self.holder: int | None = None  # id() of the DB-API connection in a transaction

    async def acquire(self, holder: int) -> None:
        try:
            async with asyncio.timeout(WRITE_QUEUE_TIMEOUT_S):
                await self.lock.acquire()
        except TimeoutError:
            raise DatabaseUnavailable(
                "the database is busy",
                f"waited {WRITE_QUEUE_TIMEOUT_S:g} s for this process's other write transactions",
                retry_after=1,
            ) from None
        self.holder = holder

    def release(self, holder: int) -> None:
        if self.holder != holder:
            return
        self.holder = None
        loop = self.loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.lock.release()
        elif loop is not None and not loop.is_closed():  # finalized on another thread
            loop.call_soon_threadsafe(self.lock.release)


# Per event loop (tests run several), per database file: every engine of the process on the
# same file shares one queue.
_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _WriteGate]] = (
    weakref.WeakKeyDictionary()
)
_GATES_GUARD = threading.Lock()


def _gate(key: str) -> _WriteGate:
    loop = asyncio.get_running_loop()
    with _GATES_GUARD:
        gates = _GATES.setdefault(loop, {})
        gate = gates.get(key)
        if gate is None:
            gate = gates[key] = _WriteGate(loop)
        return gate


def _gate_key(engine: AsyncEngine) -> str:
    database = engine.url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return f"engine:{id(engine)}"  # in-memory or URI databases: this engine's own
    return os.path.realpath(database)


def _raw(connection: Any) -> int:
    """The DB-API connection under a pool proxy (or the connection itself), by id()."""
    return id(getattr(connection, "dbapi_connection", None) or connection)


def _sqlite_events(engine: AsyncEngine) -> _SqliteFile:
    watched = _SqliteFile()
    key = _gate_key(engine)
    held: dict[int, _WriteGate] = {}  # connection id -> the gate it holds

    def release(connection: Any) -> None:
        if connection is None:
            return
        raw = _raw(connection)
        gate = held.pop(raw, None)
        if gate is not None:
            gate.release(raw)

    def on_connect(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        # The sqlite3 driver's own transaction handling issues no BEGIN before a SAVEPOINT, so
        # a released savepoint would commit on its own. Take transactions over (SQLAlchemy's
        # documented recipe) and begin them ourselves in on_begin.
        dbapi_conn.isolation_level = None
        path = _main_file(dbapi_conn)  # "" for an in-memory database
        if path:
            watched.opened(path)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.close()

    def on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            # read_transaction: a WAL reader sees one snapshot and neither waits for writers
            # nor holds them up, so it takes neither the queue nor SQLite's write lock.
            conn.exec_driver_sql("BEGIN")
            return
        # First this process's queue (see _WriteGate), then SQLite's lock. IMMEDIATE takes the
        # write lock up front: a transaction that reads and then writes cannot fail with
        # SQLITE_BUSY halfway; a writer of another process is waited for up to busy_timeout.
        raw = _raw(conn.connection)
        if raw not in held and in_greenlet():  # (a sync engine outside asyncio: no queue)
            gate = _gate(key)
            await_(gate.acquire(raw))
            held[raw] = gate
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            release(conn.connection)
            raise

    def on_commit(_conn: Connection) -> None:
        # Runs before the COMMIT is sent: raising here leaves the transaction uncommitted (the
        # pool rolls it back when the connection is returned).
        watched.check()

    def after(method: Callable[[Any], None], *, always: bool) -> Callable[[Any], None]:
        """``method`` (the dialect's COMMIT or ROLLBACK), then the queue's next transaction.
        A failed COMMIT keeps the gate: the transaction is still open until its ROLLBACK."""

        def wrapped(dbapi_connection: Any) -> None:
            try:
                method(dbapi_connection)
            except BaseException:
                if always:
                    release(dbapi_connection)
                raise
            release(dbapi_connection)

        return wrapped

    dialect = engine.sync_engine.dialect
    # The pool's reset-on-return calls the same dialect methods, so a connection given back in
    # a transaction also releases the gate once rolled back.
    setattr(dialect, "do_commit", after(dialect.do_commit, always=False))  # noqa: B010
    setattr(dialect, "do_rollback", after(dialect.do_rollback, always=True))  # noqa: B010

    def on_gone(dbapi_conn: Any, *_args: Any) -> None:
        # Safety net: a connection checked in, invalidated, closed or detached no longer holds
        # a transaction, whatever path it took there.
        release(dbapi_conn)

    event.listen(engine.sync_engine, "connect", on_connect)
    event.listen(engine.sync_engine, "begin", on_begin)
    event.listen(engine.sync_engine, "commit", on_commit)
    for name in ("checkin", "invalidate", "close", "close_detached", "detach"):
        event.listen(engine.sync_engine.pool, name, on_gone)
    return watched


# --- engines and sessions -------------------------------------------------------------------


def create_engine(url: str, *, schema: str | None = None, pool_size: int = 10) -> AsyncEngine:
    if url.startswith("sqlite"):
        # No pre-ping: a connection to a local file does not go stale the way a network one
        # does, and the ping cost a round trip through aiosqlite's thread per checkout (a
        # deleted or replaced file is caught by _SqliteFile at commit instead).
        engine = create_async_engine(url)
        _sqlite_events(engine)
        return engine
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if schema:
        kwargs["connect_args"] = {"server_settings": {"search_path": schema}}
    return create_async_engine(url, pool_size=pool_size, max_overflow=pool_size, **kwargs)


def engine_from_settings(settings: Settings) -> AsyncEngine:
    if settings.is_sqlite:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    return create_engine(
        settings.resolved_database_url,
        schema=settings.database_schema,
        pool_size=settings.database_pool_size,
    )


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@asynccontextmanager
async def transaction(factory: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """One unit of work: commits on success, rolls back on any exception."""
    async with factory() as session, session.begin():
        yield session


# Execution option of a connection whose transaction only reads (read_transaction).
READ_ONLY = "tailor_read_only"


@asynccontextmanager
async def read_transaction(
    factory: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    """A unit of work that only reads (authentication, a selection's stored attributes): on
    SQLite a deferred BEGIN outside this process's write queue, so reads on the request path
    never wait behind writes; elsewhere the same as ``transaction``. Nothing may be written in
    it (on SQLite the write would have to take the lock halfway through)."""
    async with factory() as session, session.begin():
        await session.connection(execution_options={READ_ONLY: True})
        yield session


async def ping(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))


# --- can the database take a write? -------------------------------------------------------

HEALTH_ROW = "readyz"


async def check_writable(engine: AsyncEngine) -> None:
    """Commits one small write (the ``health_checks`` row): a read-only database, a full disk,
    a lost connection or (SQLite) a deleted database file raises here as it would for a
    request's write. A rollback would prove none of that, since nothing would reach the disk."""
    now = utcnow()
    async with engine.begin() as conn:
        name = conn.dialect.name
        if name in ("sqlite", "postgresql"):
            upsert = (sqlite.insert if name == "sqlite" else postgresql.insert)(HealthCheck)
            await conn.execute(
                upsert.values(id=HEALTH_ROW, checked_at=now).on_conflict_do_update(
                    index_elements=["id"], set_={"checked_at": now}
                )
            )
            return
        updated = await conn.execute(
            update(HealthCheck).where(HealthCheck.id == HEALTH_ROW).values(checked_at=now)
        )
        if not updated.rowcount:
            await conn.execute(insert(HealthCheck).values(id=HEALTH_ROW, checked_at=now))


# SQLite result codes (sqlite3 exceptions' ``sqlite_errorname``, extended codes start with these)
# that mean the database cannot take writes now, not that the request was wrong.
_SQLITE_UNAVAILABLE = {
    "SQLITE_READONLY": "the database is read-only",
    "SQLITE_CANTOPEN": "the database file cannot be opened",
    "SQLITE_IOERR": "the database file cannot be read or written (I/O error)",
    "SQLITE_FULL": "the database disk is full",
    "SQLITE_NOTADB": "the database file is not a database (corrupt or replaced)",
    "SQLITE_CORRUPT": "the database file is corrupt",
}
_SQLITE_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
# The same by message, for drivers that do not carry the code.
_SQLITE_MESSAGES = {
    "readonly database": "the database is read-only",
    "unable to open database file": "the database file cannot be opened",
    "disk i/o error": "the database file cannot be read or written (I/O error)",
    "database or disk is full": "the database disk is full",
    "file is not a database": "the database file is not a database (corrupt or replaced)",
}
# PostgreSQL SQLSTATEs (and classes) that mean the same.
_PG_UNAVAILABLE = {
    "25006": "the database is read-only",
    "53100": "the database disk is full",
    "57P01": "the database server is shutting down",
    "57P02": "the database server is shutting down",
    "57P03": "the database server is not accepting connections yet",
    "58030": "the database server cannot read or write its files (I/O error)",
}
_PG_RETRY = {
    "53300": "the database server has no connection free",
    "55P03": "the database is busy",
    "57014": "the database statement timed out",
}


def is_driver_error(exc: BaseException) -> bool:
    """A DB-API driver's own exception (sqlite3's, asyncpg's), not wrapped by SQLAlchemy."""
    module = type(exc).__module__.split(".", 1)[0]
    return module in ("sqlite3", "asyncpg", "aiosqlite", "psycopg", "psycopg2")


def unavailable(exc: BaseException) -> DatabaseUnavailable | None:
    """``exc`` as a ``DatabaseUnavailable`` when it means the database cannot take the
    transaction now (read-only, gone, full, unreachable, busy); None for any other error (a
    constraint, a bug), which is the caller's problem."""
    if isinstance(exc, DatabaseUnavailable):
        return exc
    if isinstance(exc, PoolTimeout):
        return DatabaseUnavailable("no database connection is free", str(exc), retry_after=1)
    orig: BaseException = exc
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return DatabaseUnavailable("the database connection was lost", str(exc.orig))
        if exc.orig is not None:
            orig = exc.orig
    detail = f"{type(orig).__name__}: {str(orig).splitlines()[0] if str(orig) else ''}"
    name = getattr(orig, "sqlite_errorname", None)
    if isinstance(name, str):
        if name.startswith(_SQLITE_BUSY):
            return DatabaseUnavailable("the database is busy", detail, retry_after=1)
        for prefix, reason in _SQLITE_UNAVAILABLE.items():
            if name.startswith(prefix):
                return DatabaseUnavailable(reason, detail)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if isinstance(state, str):
        if state in _PG_UNAVAILABLE:
            return DatabaseUnavailable(_PG_UNAVAILABLE[state], detail)
        if state in _PG_RETRY:
            return DatabaseUnavailable(_PG_RETRY[state], detail, retry_after=1)
        if state.startswith("08"):
            return DatabaseUnavailable("the database connection was lost", detail)
        return None
    if isinstance(orig, ConnectionError | socket.gaierror | TimeoutError):
        return DatabaseUnavailable("the database server cannot be reached", detail)
    if (isinstance(exc, DBAPIError) or is_driver_error(orig)) and name is None:
        message = str(orig).lower()
        if "database is locked" in message:
            return DatabaseUnavailable("the database is busy", detail, retry_after=1)
        for needle, reason in _SQLITE_MESSAGES.items():
            if needle in message:
                return DatabaseUnavailable(reason, detail)
        if "connection is closed" in message or "connection was closed" in message:
            return DatabaseUnavailable("the database connection was lost", detail)
    return None
