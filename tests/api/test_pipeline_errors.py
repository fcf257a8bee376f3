"""Domain errors from below the API become their problem documents in one place."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from service.api import errors, pipeline_errors
from service.evaluation.uploads import UploadRejected, UploadTooLarge, UploadUnsupported
from service.inference import Overloaded
from service.llm.base import LLMBadResponse, LLMError, LLMTimeout, LLMUnavailable


async def _answer(exc: Exception) -> httpx.Response:
    app = FastAPI()
    errors.install(app)
    pipeline_errors.install(app)

    @app.get("/boom")
    async def boom() -> None:
        raise exc

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get("/boom")


@pytest.mark.parametrize(
    ("exc", "status", "slug", "retry_after"),
    [
        (Overloaded("verifier", 3), 429, "overloaded", "3"),
        (LLMUnavailable("down", retry_after=2.2), 503, "llm-unavailable", "3"),
        (LLMUnavailable("down"), 503, "llm-unavailable", None),
        (LLMTimeout("slow"), 504, "llm-timeout", None),
        (LLMBadResponse("html"), 502, "llm-bad-response", None),
        (LLMError("odd"), 502, "llm-error", None),
        (UploadRejected("bad jsonl", "invalid-jsonl"), 422, "invalid-jsonl", None),
        (UploadTooLarge("zip bomb", "archive-too-large"), 413, "archive-too-large", None),
        (
            UploadUnsupported("not an archive", "unsupported-archive"),
            415,
            "unsupported-archive",
            None,
        ),
    ],
)
async def test_each_domain_error_has_its_status_and_type(
    exc: Exception, status: int, slug: str, retry_after: str | None
) -> None:
    response = await _answer(exc)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["type"] == f"urn:tailor:problem:{slug}"
    assert response.headers.get("retry-after") == retry_after
