"""`tailor serve` as two processes, so that no crash of a model takes the service down.

The models run in the server process (ONNX Runtime, numpy; the embedded LLM already has a child
of its own). A native crash there (a segfault, an abort, an illegal instruction, the kernel's
OOM killer) ends that process with a signal, which no Python code inside it can catch. So the
process that `tailor serve` starts only holds the listening socket and watches: it runs the
server as its child on that socket, and when the child dies of a crash it starts a new one on
the same socket (connections wait in the socket's backlog meanwhile; requests the dead child
was serving fail). Jobs it held are leased and resume in the new child.

- A child that exits with status 0 (stopped by a signal the supervisor forwarded), 1 (a
  setting, database or model problem, already printed as one line) or 2-3 (usage, uvicorn's
  startup failure) is not restarted: the supervisor exits with the same status.
- Any other end (killed by a signal, another status) is a crash: restarted after a pause that
  doubles from ``backoff_s`` up to ``max_backoff_s``. After ``max_quick_crashes`` crashes in a
  row, each within ``stable_after_s`` of its start, the supervisor gives up with status 1 (a
  crash at every start would otherwise loop forever).
- SIGTERM and SIGINT are forwarded to the child, which runs in a session of its own (a
  terminal's Ctrl-C reaches the supervisor alone, and is forwarded once). On Linux the child
  is killed if the supervisor dies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

LISTEN_FD_ENV = "_TAILOR_LISTEN_FD"
RESTARTS_ENV = "_TAILOR_SERVER_RESTARTS"
FINAL_STATUSES = frozenset({0, 1, 2, 3})
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Policy:
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    stable_after_s: float = 60.0
    max_quick_crashes: int = 5


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """The listening socket every server child inherits (IPv4, IPv6 or a name, as uvicorn
    binds it). Raises OSError when the address is taken or cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def inherited_socket() -> socket.socket | None:
    """In a server child: the supervisor's listening socket, if it passed one."""
    fd = os.environ.pop(LISTEN_FD_ENV, None)
    return None if fd is None else socket.socket(fileno=int(fd))


def restarts_so_far() -> int:
    """In a server child: how many times the supervisor restarted the server before it."""
    return int(os.environ.get(RESTARTS_ENV, "0"))


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Linux: the child gets SIGKILL when the supervisor dies, so a killed supervisor never
    leaves a server running on its socket."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def describe(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


class Supervisor:
    """Runs ``command`` (the server) on ``sock`` and restarts it after a crash."""

    def __init__(
        self,
        command: Sequence[str],
        sock: socket.socket,
        policy: Policy = Policy(),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.command = list(command)
        self.sock = sock
        self.policy = policy
        self.sleep = sleep
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.restarts = 0

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True
        child = self.child
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    def _spawn(self) -> subprocess.Popen[bytes]:
        fd = self.sock.fileno()
        env = os.environ | {LISTEN_FD_ENV: str(fd), RESTARTS_ENV: str(self.restarts)}
        return subprocess.Popen(  # noqa: S603 - our own command line (sys.executable -m ...)
            self.command,
            env=env,
            pass_fds=(fd,),
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def run(self) -> int:
        """Until the child stops for good; its exit status (1 after too many crashes)."""
        previous = {s: signal.signal(s, self._forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._loop()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            child = self.child
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()

    def _loop(self) -> int:
        quick_crashes = 0
        pause = self.policy.backoff_s
        while True:
            started = time.monotonic()
            self.child = self._spawn()
            if self.stopping:  # a stop signal arrived while the child was being started
                self.child.send_signal(signal.SIGTERM)
            status = self.child.wait()
            if self.stopping or status in FINAL_STATUSES:
                return 0 if self.stopping and status < 0 else status
            lived = time.monotonic() - started
            if lived >= self.policy.stable_after_s:
                quick_crashes, pause = 0, self.policy.backoff_s
            quick_crashes += 1
            if quick_crashes >= self.policy.max_quick_crashes:
                print(
                    f"error: the server process {describe(status)} {quick_crashes} times in a "
                    f"row, each within {self.policy.stable_after_s:.0f} s of its start; giving "
                    "up (its log above says where it stopped)",
                    file=sys.stderr,
                )
                return 1
            print(
                f"ERROR:    the server process {describe(status)} after {lived:.1f} s; "
                f"starting a new one in {pause:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            deadline = time.monotonic() + pause
            while not self.stopping and (left := deadline - time.monotonic()) > 0:
                self.sleep(min(left, 0.1))
            if self.stopping:
                return 0
            pause = min(pause * 2, self.policy.max_backoff_s)
            self.restarts += 1
