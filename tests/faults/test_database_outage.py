"""PostgreSQL unreachable while serving, then back: the service answers 503 problem documents
(never a 500, never a 2xx for a write it could not make), /readyz says the database is down,
and once the database is back the same requests succeed with no restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from tests.conftest import Api, Database, bearer
from tests.server_process import free_port

PG_HOST, PG_PORT = "127.0.0.1", 5432


class TcpProxy:
    """A loopback TCP relay to PostgreSQL that can be cut (every connection dropped, new ones
    refused) and restored on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(PG_HOST, PG_PORT)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@pytest.fixture
async def proxied(clean_db: Database, tmp_path: Path) -> AsyncIterator[tuple[Api, TcpProxy]]:
    if clean_db.backend != "postgres":
        pytest.skip("a PostgreSQL server behind a relay")
    proxy = TcpProxy()
    await proxy.start()
    url = clean_db.url.replace(f"{PG_HOST}:{PG_PORT}", f"127.0.0.1:{proxy.port}")
    db = Database("postgres", url, clean_db.schema)
    settings = db.settings(tmp_path, load_models=False, load_llm=False, jobs_worker=False)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://tailor.test") as client:
            yield Api(client, db, settings, app), proxy
    with contextlib.suppress(Exception):
        await proxy.cut()


async def test_database_down_then_back(proxied: tuple[Api, TcpProxy]) -> None:
    api, proxy = proxied
    h = bearer(await api.new_tenant())
    body = {"text": "The user grows tomatoes."}
    assert (await api.client.post("/v1/users/u/attributes", json=body, headers=h)).is_success

    await proxy.cut()
    down = [
        await api.client.post("/v1/users/u/attributes", json=body, headers=h),
        await api.client.post(
            "/v1/users/u/attributes", json=body, headers=h | {"Idempotency-Key": "outage"}
        ),
        await api.client.get("/v1/users/u/attributes", headers=h),
    ]
    for r in down:
        assert r.status_code == 503, r.text
        assert r.headers["content-type"] == "application/problem+json"
    ready = await api.client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] != "ok"

    await proxy.start()
    retried = await api.client.post(
        "/v1/users/u/attributes", json=body, headers=h | {"Idempotency-Key": "outage"}
    )
    assert retried.status_code == 201, retried.text
    assert (await api.client.get("/readyz")).status_code == 200
    items = (await api.client.get("/v1/users/u/attributes", headers=h)).json()["items"]
    assert len(items) == 2  # the first write and the retried one; none of the refused ones
