"""A real `tailor serve` process for end-to-end tests: start it, find its children, stop it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    return env | {"TAILOR_DATA_DIR": str(data_dir)} | extra


def prepare_data_dir(data_dir: Path, shared_data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    # The int8 graphs derived by other tests; deriving them again would only cost time.
    cache = shared_data_dir / "onnx-cache"
    if cache.is_dir() and not (data_dir / "onnx-cache").exists():
        (data_dir / "onnx-cache").symlink_to(cache)


def create_tenant(data_dir: Path, name: str = "acme") -> str:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "admin", "create-tenant", name],
        env=server_env(data_dir),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.splitlines()[-1]


def wait_ready(proc: subprocess.Popen[bytes], base: str, log: Path, limit_s: float = 180) -> None:
    """Until ``base``/readyz answers 200; the log's tail in the error if the server exits or
    never gets ready."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {log.read_text(errors='replace')[-4000:]}")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"server not ready: {log.read_text(errors='replace')[-4000:]}")


def start_server(data_dir: Path, log: Path, **extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            env=server_env(data_dir, **extra),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    wait_ready(proc, base, log)
    return proc, base


def child_pids(pid: int) -> list[int]:
    """The direct children of a process (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def server_pid(proc: subprocess.Popen[bytes]) -> int:
    """The HTTP server's pid: `tailor serve` (``proc``) supervises it as its one child."""
    (pid,) = child_pids(proc.pid)
    return pid
