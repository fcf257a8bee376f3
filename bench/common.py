"""What the bench scripts share: a free port, the CPU's name, and the report's tail (the
machine and the command that made the figures, printed and optionally written as JSON)."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def _cpus() -> int:
    try:  # the service's reading (cgroup quota, else affinity)
        from service.config import available_cpus
    except ImportError:  # a bench environment without the service (bench/mem0_side_by_side.py)
        return len(os.sched_getaffinity(0))
    return available_cpus()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def report(results: dict[str, Any], out: Path | None, **setup: Any) -> None:
    """Add the setup (``setup`` plus machine, Python and command), print, write to ``out``."""
    results["setup"] = {
        **setup,
        "machine": f"{cpu_model()}, {_cpus()} CPUs ({platform.machine()})",
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
    }
    print(json.dumps(results, indent=2))
    if out:
        out.write_text(json.dumps(results, indent=2))


def wait_ready(client: httpx.Client, server: subprocess.Popen[Any], logs: Path) -> None:
    """Until the server's /readyz answers 200; exits naming ``logs`` if it dies or takes
    over five minutes (a first start derives the CPU graphs)."""
    deadline = time.monotonic() + 300
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise SystemExit(f"the server did not become ready; see {logs}")
        time.sleep(0.5)
