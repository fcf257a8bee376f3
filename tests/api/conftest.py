"""An app with the shipped models loaded and a scripted OpenAI-compatible LLM server, shared by
the tests of one module (loading the models per test would cost seconds each). Tests isolate
themselves by creating their own tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from service.app import create_app
from tests.conftest import Api, Database
from tests.llm.conftest import FakeLLMServer


@pytest.fixture(scope="module")
def module_llm_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def serving(
    database: Database, data_dir: Path, llm: FakeLLMServer, **overrides: object
) -> AsyncIterator[Api]:
    """The app with the shipped models, on ``database``, talking to the scripted ``llm``."""
    settings = database.settings(
        data_dir,
        **{
            "llm_base_url": llm.base_url,
            "llm_max_retries": 0,
            "llm_read_timeout_s": 2.0,
            "llm_deadline_s": 3.0,
            # The LLM server here is scripted per test; extraction defaults to the rules.
            "extractor": "rules",
            **overrides,
        },
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://tailor.test", timeout=30
        ) as client:
            yield Api(client, database, settings, app)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def model_api(
    database: Database, shared_data_dir: Path, module_llm_server: FakeLLMServer
) -> AsyncIterator[Api]:
    async with serving(database, shared_data_dir, module_llm_server, jobs_worker=False) as api:
        yield api


@pytest.fixture
def llm(module_llm_server: FakeLLMServer) -> FakeLLMServer:
    module_llm_server.reset()
    return module_llm_server
