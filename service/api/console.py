"""/console: the operator console, a static page served by the service itself.

Loading the page needs no key: the operator types a tenant's API key into it, and the page calls
the /v1 API with it (`Authorization: Bearer`), so it can do nothing the key could not do with
curl. The routes are left out of the OpenAPI document: they are not part of the API."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import Response

from service.api.errors import not_found
from service.console import ASSETS, asset

router = APIRouter(include_in_schema=False)

# The page runs only its own script and style, talks only to this origin, and may not be
# framed: what it shows (user data) and holds (the key, in sessionStorage) stays in the tab.
# Images may be blob: URLs (the chart, fetched with the key) or data: URIs.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


def _serve(name: str) -> Response:
    return Response(asset(name).read_bytes(), media_type=ASSETS[name], headers=SECURITY_HEADERS)


@router.get("/console")
async def console() -> Response:
    """The console's page."""
    return _serve("index.html")


@router.get("/console/{name}")
async def console_asset(name: Annotated[str, Path()]) -> Response:
    """One of the page's files; any other name is 404 (nothing else is read from disk)."""
    if name not in ASSETS:
        raise not_found("console file")
    return _serve(name)
