"""The operator console in a real browser (headless Chromium, `make browser`) against a real
`tailor serve` process: sign in with a tenant key, find a user, see their attributes (active,
superseded and deleted, each with its evidence quote), an attribute's history, the user's jobs
and their errors, export the user as a JSON download, erase them after confirming, and see the
API agree that they are gone. The evaluation runs view shows a run's report and its chart, and
says so plainly when the server cannot draw charts (no matplotlib: 503 chart-unavailable).

The servers run without models, LLM or job worker: the console needs none of them, each starts
in seconds, and the jobs seeded here stay as they were written."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from service.config import Settings
from service.store import tenants
from service.store.db import engine_from_settings, session_factory, transaction
from service.store.jobs import JobRepository
from service.store.models import Job
from service.store.users import get_or_create_user
from tests.chromium import Browser, Page, chromium_path
from tests.server_process import create_tenant, start_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        chromium_path() is None, reason="no Chromium: `make browser` installs Debian's chromium"
    ),
]

TINY = Path(__file__).resolve().parent / "fixtures" / "personafeedback_tiny"
JOB_ERROR = "LLMError: the language model did not answer within 30 s"


@dataclass
class Server:
    base: str
    key: str
    data_dir: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return httpx.request(method, f"{self.base}{path}", json=body, headers=self.auth, timeout=30)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.request("POST", path, body)
        assert r.status_code in (201, 202), r.text
        return dict(r.json())


def serve(root: Path, **env: str) -> Iterator[Server]:
    data_dir = root / "data"
    # The evaluation datasets a run may name live in <data dir>/eval by default.
    shutil.copytree(TINY, data_dir / "eval" / "tiny")
    key = create_tenant(data_dir)
    proc, base = start_server(
        data_dir,
        root / "server.log",
        TAILOR_LOAD_MODELS="false",
        TAILOR_LOAD_LLM="false",
        TAILOR_JOBS_WORKER="false",
        **env,
    )
    try:
        yield Server(base, key, data_dir)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(tmp_path_factory.mktemp("console"))


@pytest.fixture(scope="module")
def chrome() -> Iterator[Browser]:
    b = Browser(width=1280, height=900)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def page(chrome: Browser) -> Iterator[Page]:
    chrome.page.cdp.events.clear()
    yield chrome.page
    assert chrome.page.errors == [], "the page logged errors"


def sign_in(page: Page, server: Server) -> None:
    page.goto(f"{server.base}/console")
    page.eval("sessionStorage.clear()")
    page.goto(f"{server.base}/console")
    page.wait_visible("#api-key")
    page.type("#api-key", server.key)
    page.click("#use-key")
    page.wait_visible("#user-id")


async def seed_jobs(server: Server, user: str) -> dict[str, str]:
    """Jobs as the extraction of two turns leaves them: one done, one that ran out of
    attempts. (Written to the server's database: jobs have no create route.)"""
    engine = engine_from_settings(Settings(data_dir=server.data_dir, database_url=None))
    try:
        async with transaction(session_factory(engine)) as s:
            tenant_id = await tenants.authenticate(s, server.key)
            assert tenant_id is not None
            owner = await get_or_create_user(s, tenant_id, user)
            repo = JobRepository(s)
            ids = {}
            for name, values in [
                ("done", {"status": "succeeded", "attempts": 1, "result": {"added": 1}}),
                ("failed", {"status": "failed", "attempts": 5, "error": JOB_ERROR}),
            ]:
                job = await repo.enqueue(
                    tenant_id=tenant_id, user_id=owner.id, kind="extract", payload={"turn": name}
                )
                await s.execute(update(Job).where(Job.id == job.id).values(**values))
                ids[name] = job.id
            return ids
    finally:
        await engine.dispose()


def attribute_rows(page: Page) -> dict[str, dict[str, str]]:
    rows = page.eval(
        "[...document.querySelectorAll('#attributes tbody tr')].map(r => ({"
        " id: r.dataset.attributeId, status: r.querySelector('.badge').textContent,"
        " text: r.querySelector('.attr-text').textContent,"
        " evidence: r.querySelector('.evidence').innerText}))"
    )
    return {row["id"]: row for row in rows}


def choose(page: Page, select: str, value: str) -> None:
    """Pick an option of a <select> (its native pop-up is not part of the page)."""
    page.eval(
        f"(() => {{ const s = document.querySelector({json.dumps(select)});"
        f" s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})()"
    )


def test_find_inspect_export_and_erase_a_user(server: Server, page: Page, chrome: Browser) -> None:
    tea = server.post(
        "/v1/users/alice/attributes",
        {
            "text": "The user drinks green tea every morning.",
            "category": "diet",
            "evidence": [{"message_index": 0, "quote": "I have green tea every morning"}],
        },
    )
    porto = server.post(
        "/v1/users/alice/attributes",
        {
            "text": "The user lives in Porto.",
            "category": "location",
            "evidence": [{"message_index": 2, "quote": "I live in Porto"}],
        },
    )
    assert server.request(
        "PATCH", f"/v1/users/alice/attributes/{porto['id']}", {"status": "superseded"}
    ).is_success
    dog = server.post(
        "/v1/users/alice/attributes",
        {"text": "The user has a dog.", "evidence": [{"message_index": 1, "quote": "my dog Rex"}]},
    )
    assert server.request("DELETE", f"/v1/users/alice/attributes/{dog['id']}").status_code == 204
    server.post("/v1/users/bob/attributes", {"text": "The user plays chess."})
    jobs = asyncio.run(seed_jobs(server, "alice"))

    sign_in(page, server)
    # The key lives in this tab's sessionStorage only.
    assert page.eval("sessionStorage.getItem('tailor.console.key')") == server.key
    assert page.eval("localStorage.length") == 0

    page.type("#user-id", "alice")
    page.click("#find-button")
    page.wait_visible("#user-panel")
    assert page.eval("document.querySelectorAll('#attributes tbody tr').length") == 3
    assert page.text("#user-title") == "User alice"
    rows = attribute_rows(page)
    assert rows[tea["id"]]["status"] == "active"
    assert rows[tea["id"]]["text"] == "The user drinks green tea every morning."
    assert "“I have green tea every morning”" in rows[tea["id"]]["evidence"]
    assert "message 0" in rows[tea["id"]]["evidence"]
    assert rows[porto["id"]]["status"] == "superseded"
    assert "“I live in Porto”" in rows[porto["id"]]["evidence"]
    assert rows[dog["id"]]["status"] == "deleted"
    assert "“my dog Rex”" in rows[dog["id"]]["evidence"]

    choose(page, "#attr-status", "active")
    page.wait_for("document.querySelectorAll('#attributes tbody tr').length === 1")
    assert list(attribute_rows(page)) == [tea["id"]]
    choose(page, "#attr-status", "deleted")
    page.wait_for(
        f"!!document.querySelector('#attributes tbody tr[data-attribute-id=\"{dog['id']}\"]')"
    )
    choose(page, "#attr-status", "any")
    page.wait_for("document.querySelectorAll('#attributes tbody tr').length === 3")

    # The jobs, newest first, with the failed one's error.
    job_ids = page.eval(
        "[...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.jobId)"
    )
    assert job_ids == [jobs["failed"], jobs["done"]]
    failed = page.text(f'#jobs tr[data-job-id="{jobs["failed"]}"]')
    assert "failed" in failed and JOB_ERROR in failed and "5 / 5" in failed
    assert '{"added":1}' in page.text(f'#jobs tr[data-job-id="{jobs["done"]}"]')

    # The superseded attribute's audit history.
    page.click(f'#attributes tr[data-attribute-id="{porto["id"]}"] button.history')
    page.wait_for(
        "document.getElementById('history-dialog').open"
        " && document.querySelectorAll('#history-list li').length === 2"
    )
    history = page.text("#history-list")
    assert "created" in history and "status_changed" in history
    assert "I live in Porto" in history and "superseded" in history
    assert f"#/users/alice/history/{porto['id']}" in page.eval("location.hash")
    page.click("#history-close")
    page.wait_for("!document.getElementById('history-dialog').open")
    page.wait_for("location.hash === '#/users/alice'")

    # Export: the user's JSON, downloaded.
    page.click("#export-user")
    exported = json.loads(chrome.download("tailor-export-alice.json").read_text())
    assert exported["user_id"] == "alice"
    assert {a["id"] for a in exported["attributes"]} == {tea["id"], porto["id"], dog["id"]}
    assert {j["id"] for j in exported["jobs"]} == set(jobs.values())

    # Erase: nothing happens until the user id is typed and Erase clicked; Cancel keeps all.
    page.click("#erase-user")
    page.wait_for("document.getElementById('erase-dialog').open")
    assert page.eval("document.getElementById('erase-confirm').disabled")
    page.type("#erase-confirm-input", "alic")
    assert page.eval("document.getElementById('erase-confirm').disabled")
    page.click("#erase-cancel")
    page.wait_for("!document.getElementById('erase-dialog').open")
    assert server.request("GET", "/v1/users/alice/attributes").status_code == 200

    page.click("#erase-user")
    page.wait_for("document.getElementById('erase-dialog').open")
    page.type("#erase-confirm-input", "alice")
    page.wait_for("!document.getElementById('erase-confirm').disabled")
    page.click("#erase-confirm")
    page.wait_for("document.getElementById('user-note').innerText.includes('was erased')")
    note = page.text("#user-note")
    assert "3 attributes" in note and "2 jobs" in note, note
    assert not page.visible("#user-panel")
    assert page.eval("document.querySelectorAll('#attributes tbody tr').length") == 0

    # The API agrees: alice is gone, bob is untouched.
    for path in ("/v1/users/alice/attributes", "/v1/users/alice/jobs", "/v1/users/alice/export"):
        assert server.request("GET", path).status_code == 404, path
    bob = server.request("GET", "/v1/users/bob/attributes").json()["items"]
    assert [a["text"] for a in bob] == ["The user plays chess."]

    # Looking alice up again says there is no such user.
    page.click("#find-button")
    page.wait_for("document.getElementById('user-note').innerText.includes('No user')")
    assert not page.visible("#user-panel")


def test_a_refused_key_is_not_kept_and_a_key_can_be_forgotten(server: Server, page: Page) -> None:
    page.goto(f"{server.base}/console")
    page.eval("sessionStorage.clear()")
    page.goto(f"{server.base}/console")
    page.type("#api-key", "tlr_0123456789abcdef_not-the-secret")
    page.click("#use-key")
    page.wait_visible("#key-error")
    assert "refused" in page.text("#key-error")
    assert page.eval("sessionStorage.getItem('tailor.console.key')") is None
    assert not page.visible("#users-view")

    sign_in(page, server)
    page.click("#forget-key")
    page.wait_visible("#api-key")
    assert page.eval("sessionStorage.getItem('tailor.console.key')") is None
    assert not page.visible("#nav")


def wait_run(server: Server, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        run = server.request("GET", f"/v1/eval/{run_id}").json()
        if run["status"] in ("succeeded", "failed"):
            return dict(run)
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not finish")


def open_run(page: Page, server: Server, run_id: str) -> None:
    sign_in(page, server)
    page.click('#nav a[data-view="eval"]')
    page.click(f'#runs tr[data-run-id="{run_id}"]')
    page.wait_for("location.hash === '#/eval/" + run_id + "'")
    page.wait_for("!!document.querySelector('#report table')")
    report = page.text("#report")
    assert f"PersonaFeedback evaluation {run_id}" in report
    assert "specific/hard" in report and "Judge: random" in report


def test_eval_runs_with_report_and_chart(server: Server, page: Page) -> None:
    run_id = server.post("/v1/eval", {"dataset": "tiny", "judge": "random", "seed": 1})["run_id"]
    assert wait_run(server, run_id)["status"] == "succeeded"
    open_run(page, server, run_id)
    row = page.text(f'#runs tr[data-run-id="{run_id}"]')
    assert "succeeded" in row and "random" in row and "tiny" in row
    page.wait_for(
        "(() => { const img = document.getElementById('chart-img');"
        " return !img.hidden && img.complete && img.naturalWidth > 300; })()"
    )
    assert not page.visible("#chart-unavailable")


@pytest.fixture
def chartless_server(tmp_path: Path) -> Iterator[Server]:
    """A server whose Python finds no matplotlib (as a serving-only install)."""
    stub = tmp_path / "stub" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('no matplotlib in this install')\n")
    path = os.pathsep.join(p for p in (str(stub.parent), os.environ.get("PYTHONPATH")) if p)
    yield from serve(tmp_path, PYTHONPATH=path)


def test_a_server_without_matplotlib_shows_the_report_and_says_why_no_chart(
    chartless_server: Server, page: Page
) -> None:
    server = chartless_server
    run_id = server.post("/v1/eval", {"dataset": "tiny", "judge": "random"})["run_id"]
    assert wait_run(server, run_id)["status"] == "succeeded"
    chart = server.request("GET", f"/v1/eval/{run_id}/chart.png")
    assert chart.status_code == 503
    assert chart.json()["type"] == "urn:tailor:problem:chart-unavailable"
    open_run(page, server, run_id)
    page.wait_visible("#chart-unavailable")
    assert "No chart on this server" in page.text("#chart-unavailable")
    assert "matplotlib" in page.text("#chart-unavailable")
    assert not page.visible("#chart-img")
