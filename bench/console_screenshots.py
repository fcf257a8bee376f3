"""Screenshots of the operator console (docs/console-*.png), remade with

    .venv/bin/python bench/console_screenshots.py [--out docs]

It starts a real `tailor serve` on a fresh data folder (no models, no LLM, no job worker: the
console needs none of them), seeds one user through the API (attributes with evidence quotes,
one superseded, one deleted, one edited), writes that user's extraction jobs straight into the
server's database as a worker would have left them (jobs have no create route; one of them
failed), runs a PersonaFeedback evaluation on the tiny test fixture, and photographs each view
in headless Chromium (`make browser`) driven as tests/test_console_browser.py drives it."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import REPO, start_tailor, wait_ready
from sqlalchemy import update

sys.path.insert(0, str(REPO))  # the DevTools driver lives with the tests

from service.config import Settings
from service.store import tenants
from service.store.db import engine_from_settings, session_factory, transaction
from service.store.jobs import JobRepository
from service.store.models import Job
from service.store.users import get_or_create_user
from tests.chromium import Page, browser

USER = "maria.santos"
MAX_BYTES = 200_000

ATTRIBUTES: list[dict[str, Any]] = [
    {
        "text": "The user works night shifts as a nurse.",
        "category": "work",
        "evidence": [
            {"message_index": 0, "quote": "I work nights as a nurse at the children's hospital"}
        ],
    },
    {
        "text": "The user is vegetarian.",
        "category": "diet",
        "evidence": [{"message_index": 2, "quote": "I stopped eating meat three years ago"}],
    },
    {
        "text": "The user is training for a half marathon in October.",
        "category": "fitness",
        "evidence": [
            {"message_index": 4, "quote": "I'm training for the Lisbon half marathon in October"}
        ],
    },
    {
        "text": "The user lives in Porto.",
        "category": "location",
        "evidence": [{"message_index": 0, "quote": "we live in Porto, near the river"}],
    },
    {
        "text": "The user lives in Lisbon.",
        "category": "location",
        "evidence": [{"message_index": 6, "quote": "since we moved to Lisbon last spring"}],
    },
    {
        "text": "The user has two cats.",
        "category": "pets",
        "evidence": [{"message_index": 2, "quote": "my two cats wake me up after a shift"}],
    },
    {
        "text": "The user prefers short answers.",
        "category": "style",
        "evidence": [{"message_index": 8, "quote": "keep it short please, bullet points"}],
    },
]


def seed_api(client: httpx.Client) -> dict[str, str]:
    """The user's attributes; their ids by the first word that tells them apart."""
    ids = {}
    for body in ATTRIBUTES:
        r = client.post(f"/v1/users/{USER}/attributes", json=body)
        r.raise_for_status()
        ids[body["text"].split()[-1].rstrip(".")] = r.json()["id"]
    attrs = f"/v1/users/{USER}/attributes"
    client.patch(f"{attrs}/{ids['Porto']}", json={"status": "superseded"}).raise_for_status()
    client.delete(f"{attrs}/{ids['cats']}").raise_for_status()
    client.patch(
        f"{attrs}/{ids['answers']}", json={"text": "The user prefers short, bullet-point answers."}
    ).raise_for_status()
    return ids


async def seed_jobs(data_dir: Path, key: str, ids: dict[str, str]) -> None:
    """Four turns' extraction jobs, oldest first: three done, one out of attempts."""
    candidate = {"verdict": "supported", "score": 0.94, "action": "added", "message_index": 0}
    jobs: list[dict[str, Any]] = [
        {
            "status": "succeeded",
            "attempts": 1,
            "result": {
                "candidates": [
                    candidate | {"text": ATTRIBUTES[0]["text"], "attribute_id": ids["nurse"]},
                    candidate
                    | {"text": ATTRIBUTES[3]["text"], "attribute_id": ids["Porto"], "score": 0.88},
                ]
            },
        },
        {
            "status": "succeeded",
            "attempts": 2,
            "result": {
                "candidates": [
                    candidate | {"text": ATTRIBUTES[1]["text"], "attribute_id": ids["vegetarian"]}
                ]
            },
        },
        {
            "status": "failed",
            "attempts": 5,
            "error": "LLMError: the language model did not answer within 30 s",
        },
        {
            "status": "succeeded",
            "attempts": 1,
            "result": {
                "candidates": [
                    candidate | {"text": ATTRIBUTES[4]["text"], "attribute_id": ids["Lisbon"]}
                ]
            },
        },
    ]
    engine = engine_from_settings(Settings(data_dir=data_dir, database_url=None))
    try:
        async with transaction(session_factory(engine)) as s:
            tenant_id = await tenants.authenticate(s, key)
            assert tenant_id is not None
            user = await get_or_create_user(s, tenant_id, USER)
            for n, values in enumerate(jobs):
                job = await JobRepository(s).enqueue(
                    tenant_id=tenant_id, user_id=user.id, kind="extract", payload={"turn": n}
                )
                await s.execute(update(Job).where(Job.id == job.id).values(**values))
    finally:
        await engine.dispose()


def run_eval(client: httpx.Client) -> str:
    for seed in (7, 1):
        r = client.post("/v1/eval", json={"dataset": "tiny", "judge": "random", "seed": seed})
        r.raise_for_status()
        run_id: str = r.json()["run_id"]
        for _ in range(300):
            if client.get(f"/v1/eval/{run_id}").json()["status"] in ("succeeded", "failed"):
                break
            time.sleep(0.1)
    return run_id


def shoot(page: Page, path: Path, **how: Any) -> None:
    size = page.screenshot(path, **how)
    print(f"{path}: {size // 1024} KB")
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="tailor-console-") as tmp:
        data_dir = Path(tmp) / "data"
        shutil.copytree(
            REPO / "tests" / "fixtures" / "personafeedback_tiny", data_dir / "eval" / "tiny"
        )
        server, base, key = start_tailor(
            data_dir,
            TAILOR_LOAD_MODELS="false",
            TAILOR_LOAD_LLM="false",
            TAILOR_JOBS_WORKER="false",
        )
        try:
            with httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
            ) as client:
                wait_ready(client, server, data_dir / "server.log")
                ids = seed_api(client)
                asyncio.run(seed_jobs(data_dir, key, ids))
                run_id = run_eval(client)

            with browser(width=1280, height=900) as chrome:
                page = chrome.page
                page.goto(f"{base}/console")
                page.type("#api-key", key)
                page.click("#use-key")
                page.wait_visible("#user-id")

                page.type("#user-id", USER)
                page.click("#find-button")
                page.wait_visible("#user-panel")
                page.eval("scrollTo(0, 0)")
                shoot(page, out / "console-user.png")

                page.click(f'#attributes tr[data-attribute-id="{ids["answers"]}"] button.history')
                page.wait_for("document.querySelectorAll('#history-list li').length === 2")
                page.eval("scrollTo(0, 0)")
                shoot(page, out / "console-history.png")
                page.click("#history-close")
                page.wait_for("!document.getElementById('history-dialog').open")

                # The Jobs card (the section around the table).
                page.eval("document.getElementById('jobs').closest('section').id = 'jobs-card'")
                shoot(page, out / "console-jobs.png", element="#jobs-card")

                page.click('#nav a[data-view="eval"]')
                page.click(f'#runs tr[data-run-id="{run_id}"]')
                page.wait_for(
                    "(() => { const i = document.getElementById('chart-img');"
                    " return !i.hidden && i.complete && i.naturalWidth > 0"
                    " && !!document.querySelector('#report table'); })()"
                )
                page.eval("scrollTo(0, 0)")
                shoot(page, out / "console-eval.png", full_page=True)
                if page.errors:
                    raise SystemExit(f"the page logged errors: {page.errors}")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
