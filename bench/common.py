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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(pid: int) -> int:
    """The HTTP server's process under ``tailor serve`` (``pid``): the supervisor's one child
    (TAILOR_SERVE_SUPERVISE, the default), or ``pid`` itself when it has none."""
    children = [
        int(c)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for c in (task / "children").read_text().split()
    ]
    return children[0] if len(children) == 1 else pid


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


REPO = Path(__file__).resolve().parents[1]


def start_tailor(
    data_dir: Path, *, python: str = sys.executable, **settings: str
) -> tuple[subprocess.Popen[bytes], str, str]:
    """A real `tailor serve` on its embedded defaults in ``data_dir`` (migrated, one tenant),
    with ``settings`` as extra environment; (process, base URL, API key). Reuses the repo's
    derived CPU graphs (``.tailor/onnx-cache``) when they exist."""
    env = dict(os.environ, TAILOR_DATA_DIR=str(data_dir), TAILOR_LOG_LEVEL="warning", **settings)
    cache = REPO / ".tailor" / "onnx-cache"
    if cache.is_dir():
        (data_dir / "onnx-cache").symlink_to(cache.resolve())
    tailor = [python, "-m", "service.cli"]
    subprocess.run([*tailor, "migrate"], env=env, check=True, capture_output=True, cwd=REPO)
    key = subprocess.run(
        [*tailor, "admin", "create-tenant", "bench"], env=env, check=True, capture_output=True,
        text=True, cwd=REPO,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [*tailor, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(data_dir / "server.log", "w"),  # noqa: SIM115
    )
    return proc, f"http://127.0.0.1:{port}", key


def concurrent_selects(
    base: str, key: str, queries: list[tuple[str, str]], callers: int
) -> tuple[list[float], float]:
    """``queries`` ((user id, prompt)) shared round-robin by ``callers`` client threads, each
    with its own connection, calling ``POST /v1/select`` one after another: (each request's
    seconds, the wall seconds of the whole run)."""
    import threading

    done: list[float] = []
    lock = threading.Lock()

    def caller(share: list[tuple[str, str]]) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            for uid, prompt in share:
                started = time.perf_counter()
                r = client.post("/v1/select", json={"prompt": prompt, "user_id": uid})
                r.raise_for_status()
                with lock:
                    done.append(time.perf_counter() - started)

    threads = [threading.Thread(target=caller, args=(queries[i::callers],)) for i in range(callers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done, time.perf_counter() - started


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50, p95 and mean in milliseconds of timings in seconds."""
    import numpy as np

    ms = np.array(seconds) * 1000
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p95_ms": round(float(np.percentile(ms, 95)), 1),
        "mean_ms": round(float(ms.mean()), 1),
        "n": len(seconds),
    }


def emit(results: dict[str, Any], out: Path | None) -> None:
    """Print the results as JSON and write them to ``out``."""
    text = json.dumps(results, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


def report(results: dict[str, Any], out: Path | None, **setup: Any) -> None:
    """Add the setup (``setup`` plus machine, Python and command), print, write to ``out``."""
    results["setup"] = {
        **setup,
        "machine": f"{cpu_model()}, {_cpus()} CPUs ({platform.machine()})",
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
    }
    emit(results, out)


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
