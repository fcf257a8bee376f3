"""`tailor serve`'s supervisor with stand-in server processes (no models, no HTTP): a crash is
restarted on the same socket, a startup failure or a clean stop is final, a crash at every
start gives up, and a stop signal reaches the child."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service import supervisor
from service.supervisor import Policy, Supervisor

FAST = Policy(backoff_s=0.01, max_backoff_s=0.02, stable_after_s=60.0, max_quick_crashes=5)

# Records the socket it inherited and its restart count, then acts on its N-th start as the
# test says: "segv", "abort", "exit:<status>" or "wait" (until SIGTERM, then exit 0).
CHILD = """
import os, signal, socket, sys, time
from pathlib import Path
from service import supervisor
record = Path(sys.argv[1])
actions = sys.argv[2].split(",")
sock = supervisor.inherited_socket()
n = len(record.read_text().splitlines()) if record.exists() else 0
with record.open("a") as out:
    out.write(f"{sock.getsockname()[1]} {supervisor.restarts_so_far()}\\n")
action = actions[min(n, len(actions) - 1)]
if action == "segv":
    os.kill(os.getpid(), signal.SIGSEGV)
elif action == "abort":
    os.abort()
elif action.startswith("exit:"):
    sys.exit(int(action[5:]))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(60)
sys.exit(9)
"""


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    s = supervisor.listen("127.0.0.1", 0)
    yield s
    s.close()


def _supervisor(
    tmp_path: Path, sock: socket.socket, actions: str, policy: Policy = FAST
) -> tuple[Supervisor, Path]:
    record = tmp_path / "starts.txt"
    command = [sys.executable, "-c", CHILD, str(record), actions]
    return Supervisor(command, sock, policy), record


def _starts(record: Path) -> list[tuple[int, int]]:
    return [tuple(map(int, line.split())) for line in record.read_text().splitlines()]


def test_a_crashed_server_is_restarted_on_the_same_socket(
    tmp_path: Path, sock: socket.socket, capfd: pytest.CaptureFixture[str]
) -> None:
    sup, record = _supervisor(tmp_path, sock, "segv,abort,exit:0")
    assert sup.run() == 0
    port = sock.getsockname()[1]
    assert _starts(record) == [(port, 0), (port, 1), (port, 2)]
    err = capfd.readouterr().err
    assert "killed by SIGSEGV" in err and "killed by SIGABRT" in err


@pytest.mark.parametrize("status", [1, 2, 3])
def test_a_startup_failure_is_final(tmp_path: Path, sock: socket.socket, status: int) -> None:
    sup, record = _supervisor(tmp_path, sock, f"exit:{status}")
    assert sup.run() == status
    assert len(_starts(record)) == 1


def test_an_unexpected_exit_status_counts_as_a_crash(tmp_path: Path, sock: socket.socket) -> None:
    sup, record = _supervisor(tmp_path, sock, "exit:70,exit:0")
    assert sup.run() == 0
    assert len(_starts(record)) == 2


def test_a_crash_at_every_start_gives_up(
    tmp_path: Path, sock: socket.socket, capfd: pytest.CaptureFixture[str]
) -> None:
    sup, record = _supervisor(tmp_path, sock, "segv", Policy(backoff_s=0.01, max_quick_crashes=3))
    assert sup.run() == 1
    assert len(_starts(record)) == 3
    assert "killed by SIGSEGV 3 times in a row" in capfd.readouterr().err


def test_a_stop_signal_is_forwarded_and_nothing_restarts(
    tmp_path: Path, sock: socket.socket
) -> None:
    sup, record = _supervisor(tmp_path, sock, "wait")

    def stop() -> None:
        deadline = time.monotonic() + 30
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop, daemon=True).start()
    started = time.monotonic()
    assert sup.run() == 0
    assert time.monotonic() - started < 30
    assert len(_starts(record)) == 1
    assert sup.child is not None and sup.child.returncode == 0


def test_listening_on_a_taken_port_fails(sock: socket.socket) -> None:
    with pytest.raises(OSError):
        supervisor.listen("127.0.0.1", sock.getsockname()[1])


def test_describe() -> None:
    assert supervisor.describe(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert supervisor.describe(3) == "exited with status 3"
