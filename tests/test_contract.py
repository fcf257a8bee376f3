"""The OpenAPI contract, checked by schemathesis against a real `tailor serve`.

Every operation of the served document gets a bounded number of generated requests, valid and
invalid, in each of schemathesis' phases (examples, coverage, fuzzing, stateful), under every
stable check: no server error, only documented statuses, content types, headers and bodies, valid
data accepted, invalid data rejected, 405 with a correct Allow for undeclared methods, and the rest
of `--checks all`. A fixed seed keeps the run the same from one test run to the next.

The server runs without models and without an LLM, so that it starts in seconds: the routes that
need them answer their documented 503 (status_code_conformance still holds each operation to its
documented statuses), and everything before that (authentication, routing, media types) and every
route that needs neither is exercised in full."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from schemathesis.engine import events, from_schema
from schemathesis.engine.recorder import ScenarioRecorder

from service.api.eval import UPLOAD_PATH
from service.config import Settings
from service.store import tenants
from service.store.db import engine_from_settings, session_factory, transaction
from service.store.migrate import upgrade
from tests.conftest import POSTGRES_URL, _drop_schema, new_pg_schema
from tests.server_process import start_server

pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 25
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


def _unique_idempotency_keys(ctx: Any, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    """A well-formed generated Idempotency-Key made unique. The same key with another body is a
    documented 422 (the key was reused), which schemathesis, drawing the same short keys again
    and again, would take for valid data refused; a malformed key is left as generated."""
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and IDEMPOTENCY_KEY.match(key):
        case.headers["Idempotency-Key"] = f"{key[:200]}-{secrets.token_hex(16)}"


def _config(key: str) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": 20260101,
            # As the security scheme, so that schemathesis can also leave it out (401 expected).
            "auth": {"openapi": {"HTTPBearer": {"bearer": key}}},
            "request-timeout": 20,
            "generation": {"max-examples": EXAMPLES_PER_OPERATION, "database": "none"},
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": True, "max-steps": 10},
            },
            "checks": {
                "enabled": True,
                # No models and no LLM here: their routes' documented answer is 503.
                "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", "503"]},
            },
        }
    )


# Refusals of schema-valid data that no schema can foresee, each documented (422/415/413):
# the bytes of an upload must be a .zip or .tar.gz in the release layout (`format: binary` cannot
# say so), and a run's `dataset` or `upload_id` must name one that exists on this server.
UPLOAD_REFUSALS = {413, 415, 422}
MISSING_REFERENCES = {"no such dataset", "no such upload"}


def _expected(failure: Any, response: Any) -> bool:
    if type(failure).__name__ != "RejectedPositiveData":
        return False
    if failure.operation == f"POST {UPLOAD_PATH}":
        return bool(failure.status_code in UPLOAD_REFUSALS)
    if failure.operation == "POST /v1/eval" and failure.status_code == 422 and response:
        errors = json.loads(response.content).get("errors") or []
        return bool(errors) and all(e["message"] in MISSING_REFERENCES for e in errors)
    return False


def _summary(
    operations: set[str],
    cases: int,
    statuses: Counter[int],
    failed_checks: Counter[str],
    wall_s: float,
) -> str:
    server_errors = {code: n for code, n in sorted(statuses.items()) if code >= 500}
    return (
        f"schemathesis: {len(operations)} operations, {cases} cases, "
        f"{sum(statuses.values())} responses in {wall_s:.1f}s; 5xx by status {server_errors}; "
        f"failures by check {dict(failed_checks)}"
    )


async def _issue_key(settings: Settings) -> str:
    engine = engine_from_settings(settings)
    try:
        async with transaction(session_factory(engine)) as session:
            return (await tenants.create_tenant(session, "contract")).key
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_available: bool
) -> Iterator[tuple[str, str]]:
    """A real `tailor serve` on each database backend, and a tenant's API key."""
    data_dir = tmp_path / "data"
    env = {"TAILOR_LOAD_MODELS": "false", "TAILOR_LOAD_LLM": "false"}
    pg_schema = None
    if request.param == "postgres":
        if not postgres_available:
            pytest.skip(f"no PostgreSQL answers at {POSTGRES_URL}")
        pg_schema = new_pg_schema()
        upgrade(POSTGRES_URL, schema=pg_schema)
        env |= {"TAILOR_DATABASE_URL": POSTGRES_URL, "TAILOR_DATABASE_SCHEMA": pg_schema}
    proc, base = start_server(data_dir, tmp_path / "server.log", **env)
    try:
        settings = Settings(
            data_dir=data_dir,
            database_url=POSTGRES_URL if pg_schema else None,
            database_schema=pg_schema,
        )
        yield base, asyncio.run(_issue_key(settings))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        if pg_schema is not None:
            asyncio.run(_drop_schema(pg_schema))


def test_every_operation_keeps_the_contract(server: tuple[str, str]) -> None:
    base, key = server
    schemathesis.hook("before_call")(_unique_idempotency_keys)
    try:
        schema = schemathesis.openapi.from_url(f"{base}/openapi.json", config=_config(key))
        started = time.monotonic()
        operations: set[str] = set()
        statuses: Counter[int] = Counter()
        failures: list[str] = []
        failed_checks: Counter[str] = Counter()
        cases = 0
        for event in from_schema(schema).execute():
            if isinstance(event, events.ScenarioFinished):
                recorder: ScenarioRecorder = event.recorder
                operations.update(node.value.operation.label for node in recorder.cases.values())
                cases += len(recorder.cases)
                for interaction in recorder.interactions.values():
                    if interaction.response is not None:
                        statuses[interaction.response.status_code] += 1
                for case_id, checks in recorder.checks.items():
                    for check in checks:
                        if check.failure_info is not None:
                            failure = check.failure_info.failure
                            if _expected(failure, recorder.find_response(case_id=case_id)):
                                continue
                            failed_checks[check.name] += 1
                            failures.append(
                                f"{check.name} on {recorder.label}: {failure.title}\n"
                                f"{failure.message}\n{check.failure_info.code_sample}"
                            )
            elif isinstance(event, events.EngineFinished):
                failures += [f"{f.title}: {f.message}" for f in event.failures]
            elif isinstance(event, events.NonFatalError):
                failures.append(f"schemathesis error on {event.label}: {event.value!r}")
            elif isinstance(event, events.FatalError):
                failures.append(f"schemathesis fatal error: {event.exception!r}")
        wall_s = time.monotonic() - started
    finally:
        schemathesis.hooks.unregister(_unique_idempotency_keys)

    summary = _summary(operations, cases, statuses, failed_checks, wall_s)
    print(summary)
    assert len(operations) >= len(schema), summary
    assert failures == [], summary + "\n\n" + "\n\n".join(dict.fromkeys(failures))
    # 503 is the documented answer of the routes that need the models or the LLM; nothing else.
    assert not any(code >= 500 and code != 503 for code in statuses), summary
