"""A native crash of the server process under a real `tailor serve`: the supervisor starts a
new one on the same port, the stored data is all there, and a stop signal then ends both."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.server_process import create_tenant, prepare_data_dir, server_pid, start_server

pytestmark = pytest.mark.slow


def _restarts(base: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    match = re.search(r"^tailor_server_restarts ([0-9.e+]+)$", text, re.M)
    assert match, "no tailor_server_restarts metric"
    return float(match.group(1))


def test_a_segfaulting_server_process_is_replaced(tmp_path: Path, shared_data_dir: Path) -> None:
    data_dir = tmp_path / "data"
    prepare_data_dir(data_dir, shared_data_dir)
    key = create_tenant(data_dir)
    auth = {"Authorization": f"Bearer {key}"}
    log = tmp_path / "server.log"
    proc, base = start_server(data_dir, log)
    try:
        fact = {"text": "The user is vegetarian."}
        r = httpx.post(f"{base}/v1/users/ann/attributes", json=fact, headers=auth)
        assert r.status_code == 201, r.text
        assert _restarts(base) == 0
        first = server_pid(proc)
        os.kill(first, signal.SIGSEGV)  # what a native crash in a model would do

        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
            try:
                ready = httpx.get(f"{base}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                ready = False
            if ready or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert ready, log.read_text(errors="replace")[-4000:]
        second = server_pid(proc)
        assert second != first
        assert "killed by SIGSEGV" in log.read_text(errors="replace")
        assert _restarts(base) == 1
        listed = httpx.get(f"{base}/v1/users/ann/attributes", headers=auth).json()
        assert [a["text"] for a in listed["items"]] == ["The user is vegetarian."]
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=60)
    assert status == 0
    assert not Path(f"/proc/{second}").exists()
