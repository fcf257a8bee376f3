"""What the bench scripts share: a free port, the CPU's name, and the report's tail (the
machine and the command that made the figures, printed and optionally written as JSON)."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any


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
