"""One chat turn end to end on the embedded defaults only: a real `tailor serve` process, the
embedded SQLite file, the shipped models and the embedded LLM, no network and no other process.

The turn answers at once; its extraction job is queued. The service is SIGKILLed while the job
is still queued (its worker switched off for the first start), started again, and the job then
runs exactly once: the user's own fact appears once, and the facts the assistant stated about
itself never become the user's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

MESSAGES = [
    {"role": "assistant", "content": "Hello! I live in Lisbon and I have three cats. And you?"},
    {
        "role": "user",
        "content": "I work as a nurse at night. Any tips for sleeping during the day?",
    },
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    return env | {"TAILOR_DATA_DIR": str(data_dir)} | extra


def _start(data_dir: Path, log: Path, **extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            env=_env(data_dir, **extra),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {log.read_text(errors='replace')[-4000:]}")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"server not ready: {log.read_text(errors='replace')[-4000:]}")


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
    data_dir.mkdir()
    # The int8 graphs derived by other tests; deriving them again would only cost time.
    cache = shared_data_dir / "onnx-cache"
    if cache.is_dir():
        (data_dir / "onnx-cache").symlink_to(cache)
    log = tmp_path / "server.log"
    key = subprocess.run(
        [sys.executable, "-m", "service.cli", "admin", "create-tenant", "acme"],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()[-1]
    auth = {"Authorization": f"Bearer {key}"}

    proc, base = _start(data_dir, log, TAILOR_JOBS_WORKER="false")
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

    proc, base = _start(data_dir, log)
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
