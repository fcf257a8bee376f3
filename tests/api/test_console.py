"""/console: the operator console's page and files, served without a key, with a strict
content security policy, out of the OpenAPI document, and shipped as package data."""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from service.app import create_app
from service.config import REPO_ROOT, Settings
from service.console import ASSETS, asset


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    # The console's routes read no state: no lifespan (database, models) is needed.
    app = create_app(Settings(data_dir=tmp_path, load_models=False, load_llm=False))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://tailor.test") as c:
        yield c


async def test_the_page_loads_without_a_key(client: httpx.AsyncClient) -> None:
    r = await client.get("/console")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script src="/console/console.js" defer></script>' in r.text
    assert 'href="/console/console.css"' in r.text
    assert 'id="api-key"' in r.text and 'type="password"' in r.text
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp and "connect-src 'self'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize(
    ("name", "media_type"),
    [
        ("console.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("index.html", "text/html; charset=utf-8"),
    ],
)
async def test_its_files(client: httpx.AsyncClient, name: str, media_type: str) -> None:
    r = await client.get(f"/console/{name}")
    assert r.status_code == 200
    assert r.headers["content-type"] == media_type
    assert r.content == asset(name).read_bytes()


@pytest.mark.parametrize(
    "path", ["/console/app.py", "/console/..%2F..%2Fapp.py", "/console/static", "/console/x.js"]
)
async def test_nothing_else_is_served(client: httpx.AsyncClient, path: str) -> None:
    r = await client.get(path)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"


async def test_only_get(client: httpx.AsyncClient) -> None:
    r = await client.post("/console")
    assert r.status_code == 405 and r.headers["allow"] == "GET"


def test_the_page_uses_no_inline_script_nor_foreign_origin() -> None:
    """What the content security policy would block anyway, caught before a browser does."""
    html = asset("index.html").read_text(encoding="utf-8")
    assert "<script>" not in html and " on" + "click=" not in html and "style=" not in html
    for name in ASSETS:
        text = asset(name).read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text, name
    script = asset("console.js").read_text(encoding="utf-8")
    # Data from the API goes on the page as text only.
    assert "innerHTML" not in script and "outerHTML" not in script
    assert "insertAdjacentHTML" not in script and "document.write" not in script


def test_left_out_of_the_openapi_document(tmp_path: Path) -> None:
    schema = create_app(Settings(data_dir=tmp_path)).openapi()
    assert not [path for path in schema["paths"] if path.startswith("/console")]


def test_every_file_is_package_data() -> None:
    """A non-editable install carries the page: pyproject.toml's package-data covers every
    file of service/console/static, and every served name is one of them."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["service.console"]
    static = REPO_ROOT / "service" / "console" / "static"
    files = sorted(p.relative_to(static.parent).as_posix() for p in static.iterdir())
    assert files and all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in files)
    assert {f"static/{name}" for name in ASSETS} == set(files)
