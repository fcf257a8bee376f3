"""The `tailor` command end to end: a real server process on the embedded defaults, driven
over HTTP the way a new user would with curl."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server_process import free_port, wait_ready


def _tailor(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    # A file, not a pipe: an unread pipe fills up with the server's logs and blocks it.
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    wait_ready(proc, base, tmp_path / "server.log", limit_s=90)
    try:
        yield base, tmp_path
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_new_user_flow(server: tuple[str, Path]) -> None:
    base, cwd = server
    assert (cwd / ".tailor" / "tailor.db").exists()  # embedded SQLite, migrated by serve
    out = _tailor(cwd, "admin", "create-tenant", "acme")
    key = out.stdout.strip().splitlines()[-1]
    assert key.startswith("tlr_")
    h = {"Authorization": f"Bearer {key}"}

    r = httpx.post(f"{base}/v1/users/alice/attributes", json={"text": "Is vegetarian"}, headers=h)
    assert r.status_code == 201, r.text
    r = httpx.get(f"{base}/v1/users/alice/attributes", headers=h)
    assert [a["text"] for a in r.json()["items"]] == ["Is vegetarian"]

    key_id = key[4:20]
    _tailor(cwd, "admin", "revoke-key", key_id)
    assert httpx.get(f"{base}/v1/users/alice/attributes", headers=h).status_code == 401
    assert "tailor_http_request_duration_seconds" in httpx.get(f"{base}/metrics").text


def test_migrate_down_and_up(tmp_path: Path) -> None:
    _tailor(tmp_path, "migrate")
    _tailor(tmp_path, "migrate", "--downgrade", "base")
    _tailor(tmp_path, "migrate")
    out = _tailor(tmp_path, "admin", "create-tenant", "t")
    assert out.stdout.strip().splitlines()[-1].startswith("tlr_")


def test_revoke_unknown_key_fails(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as err:
        _tailor(tmp_path, "admin", "revoke-key", "0" * 16)
    assert "no such key" in err.value.stderr
