"""/healthz, /readyz and /metrics."""

from __future__ import annotations

from fastapi import FastAPI

from tests.conftest import Api, bearer


async def test_healthz_and_readyz(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    r = await api.client.get("/readyz")
    assert r.status_code == 200
    assert r.json()["checks"]["database"] == "ok"


async def test_readyz_fails_when_a_check_fails(api: Api) -> None:
    transport = api.client._transport
    app: FastAPI = transport.app  # type: ignore[attr-defined]

    async def not_loaded() -> str | None:
        return "verifier not loaded"

    app.state.tailor.readiness["verifier"] = not_loaded
    r = await api.client.get("/readyz")
    assert r.status_code == 503
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["checks"]["verifier"] == "verifier not loaded"


async def test_metrics_use_route_templates(api: Api) -> None:
    h = bearer(await api.new_tenant())
    await api.client.get("/v1/users/someone-specific/attributes", headers=h)
    text = (await api.client.get("/metrics")).text
    assert 'route="/v1/users/{user_id}/attributes"' in text
    assert "someone-specific" not in text
    assert "tailor_http_requests_in_flight" in text
