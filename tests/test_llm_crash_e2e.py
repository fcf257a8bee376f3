"""The embedded model's process dies under a real `tailor serve`: the server stays up.

A chat turn whose model process is SIGKILLed mid-generation (what a native crash such as
llama.cpp's AMX fault looks like from outside) answers 503 `llm-unavailable` and writes
nothing; the process is restarted and the next turn is answered. An evaluation run whose LLM
judge dies the same way ends `failed` with the reason, and the server stays ready.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server_process import (
    child_pids,
    create_tenant,
    prepare_data_dir,
    server_pid,
    start_server,
)

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures"
STORY = [{"role": "user", "content": "Write a very long story about a dragon and a knight."}]


def _metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    match = re.search(rf'^{name}\{{backend="embedded"\}} ([0-9.e+]+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def _kill_child_when_generating(base: str, server: int, limit_s: float = 60) -> int:
    """SIGKILL the model process as soon as a generation is in flight; its pid."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if _metric(base, "tailor_llm_requests_in_flight") >= 1:
            (pid,) = child_pids(server)
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.01)
    raise AssertionError("no generation started")


def test_a_dying_model_process_never_takes_the_server_down(
    tmp_path: Path, shared_data_dir: Path
) -> None:
    data_dir = tmp_path / "data"
    prepare_data_dir(data_dir, shared_data_dir)
    eval_dir = tmp_path / "eval"
    shutil.copytree(FIXTURES / "personafeedback_tiny", eval_dir / "tiny")
    key = create_tenant(data_dir)
    auth = {"Authorization": f"Bearer {key}"}
    proc, base = start_server(data_dir, tmp_path / "server.log", TAILOR_EVAL_DATA_DIR=str(eval_dir))
    try:
        server = server_pid(proc)
        (first_child,) = child_pids(server)
        answer: dict[str, Any] = {}

        def turn() -> None:
            r = httpx.post(
                f"{base}/v1/turns",
                json={"user_id": "bob", "messages": STORY, "max_tokens": 400},
                headers=auth,
                timeout=120,
            )
            answer["status"], answer["body"] = r.status_code, r.json()

        caller = threading.Thread(target=turn)
        caller.start()
        killed = _kill_child_when_generating(base, server)
        caller.join(120)
        assert killed == first_child
        assert answer["status"] == 503, answer
        assert answer["body"]["type"].endswith("llm-unavailable")
        assert "SIGKILL" in answer["body"]["detail"]
        assert proc.poll() is None and server_pid(proc) == server  # the server lives
        assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200
        # Nothing was written for the failed turn: no user, so no attributes and no job.
        assert httpx.get(f"{base}/v1/users/bob/export", headers=auth).status_code == 404

        # The model process comes back (backoff 0.5 s) and the next turn is answered.
        deadline = time.monotonic() + 60
        while True:
            r = httpx.post(
                f"{base}/v1/turns",
                json={"user_id": "bob", "messages": STORY, "max_tokens": 8},
                headers=auth,
                timeout=120,
            )
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        assert r.json()["reply"]
        (second_child,) = child_pids(server)
        assert second_child != first_child
        assert _metric(base, "tailor_llm_child_restarts_total") == 1

        # An evaluation run whose LLM judge dies ends failed, and the server stays ready.
        run_id = httpx.post(
            f"{base}/v1/eval", json={"dataset": "tiny", "judge": "llm"}, headers=auth
        ).json()["run_id"]
        _kill_child_when_generating(base, server)
        deadline = time.monotonic() + 60
        while True:
            doc = httpx.get(f"{base}/v1/eval/{run_id}", headers=auth).json()
            if doc["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert doc["status"] == "failed", doc
        assert "died" in doc["error"] and "SIGKILL" in doc["error"]
        assert proc.poll() is None
        assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # A clean stop leaves no model process behind.
    assert not Path(f"/proc/{second_child}").exists() or _is_zombie(second_child)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True
