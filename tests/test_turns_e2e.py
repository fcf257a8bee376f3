"""One chat turn end to end on the embedded defaults only: a real `tailor serve` process, the
embedded SQLite file, the shipped models and the embedded LLM, no network and no other process.

The turn answers at once; its extraction job is queued. The service is SIGKILLed while the job
is still queued (its worker switched off for the first start), started again, and the job then
runs exactly once: the user's own fact appears once, and the facts the assistant stated about
itself never become the user's."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server_process import create_tenant, prepare_data_dir, start_server

pytestmark = pytest.mark.slow

MESSAGES = [
    {"role": "assistant", "content": "Hello! I live in Lisbon and I have three cats. And you?"},
    {
        "role": "user",
        "content": "I work as a nurse at night. Any tips for sleeping during the day?",
    },
]


def _job(base: str, key: str, job_id: str) -> dict[str, Any]:
    r = httpx.get(f"{base}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return dict(r.json())


def _wait_done(base: str, key: str, job_id: str, limit_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        job = _job(base, key, job_id)
        if job["status"] in ("succeeded", "failed"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not done: {job}")


def test_turn_on_embedded_defaults_survives_a_kill(tmp_path: Path, shared_data_dir: Path) -> None:
    data_dir = tmp_path / "data"
    prepare_data_dir(data_dir, shared_data_dir)
    log = tmp_path / "server.log"
    key = create_tenant(data_dir)
    auth = {"Authorization": f"Bearer {key}"}

    proc, base = start_server(data_dir, log, TAILOR_JOBS_WORKER="false")
    try:
        r = httpx.post(
            f"{base}/v1/turns",
            json={"user_id": "alice", "messages": MESSAGES, "max_tokens": 24},
            headers=auth,
            timeout=120,
        )
        assert r.status_code == 200, r.text
        turn = r.json()
        assert turn["reply"].strip() and turn["usage"]["completion_tokens"] > 0
        assert _job(base, key, turn["job_id"])["status"] == "queued"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    proc, base = start_server(data_dir, log)
    try:
        job = _wait_done(base, key, turn["job_id"])
        assert job["status"] == "succeeded" and job["attempts"] == 1, job
        r = httpx.get(f"{base}/v1/users/alice/attributes", headers=auth)
        texts = [a["text"] for a in r.json()["items"]]
        assert texts == ["The user works as a nurse at night."], texts

        # The next turn, with the worker running from the start: its facts appear shortly.
        r = httpx.post(
            f"{base}/v1/turns",
            json={
                "user_id": "alice",
                "messages": [
                    *MESSAGES,
                    {"role": "assistant", "content": turn["reply"]},
                    {"role": "user", "content": "Thanks. I have a cat named Tom, he wakes me up."},
                ],
                "max_tokens": 24,
            },
            headers=auth,
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert _wait_done(base, key, r.json()["job_id"])["status"] == "succeeded"
        r = httpx.get(f"{base}/v1/users/alice/attributes", headers=auth)
        texts = [a["text"] for a in r.json()["items"]]
        assert texts[0] == "The user works as a nurse at night." and len(texts) >= 1
        joined = " ".join(texts).lower()
        assert "lisbon" not in joined and "three cats" not in joined
        # The first job's fact was written once, with one piece of evidence.
        nurse = r.json()["items"][0]
        assert len(nurse["evidence"]) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
