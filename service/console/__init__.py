"""The operator console: a static page (HTML, CSS and vanilla JavaScript, no build step)
served at /console by service/api/console.py. It holds no secret and reads nothing itself: the
operator enters a tenant's API key in the page, which calls the /v1 API with it."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

# The files the page is made of, by the name it is served under, and their media types.
ASSETS: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
}


def asset(name: str) -> Traversable:
    """A file of the page, from the installed package (editable or not)."""
    return files(__name__).joinpath("static", name)
