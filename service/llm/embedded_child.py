"""The embedded model's own process: llama.cpp runs here, never inside the server.

Native code can crash (llama.cpp's AMX path does on Intel Sapphire Rapids), and a crash in the
server process would take every tenant down with it. ``EmbeddedLLMClient`` starts this module
as a child process and talks to it over its standard input and output, one JSON object per
line:

    parent → child  {"op": "generate", "id": 7, "messages": [...], "max_tokens": 64,
                     "temperature": 0.2, "json_schema": null, "deadline_s": 29.5,
                     "stream": true}
                    {"op": "cancel", "id": 7}
    child → parent  {"event": "ready", "model": "SmolLM2-135M-Instruct.Q4_1"}   (once loaded)
                    {"event": "delta", "id": 7, "text": "Once"}                  (stream only)
                    {"event": "done", "id": 7, "text": "...", "prompt_tokens": 31,
                     "completion_tokens": 12}
                    {"event": "error", "id": 7, "kind": "timeout" | "bad_response" |
                     "cancelled", "detail": "..."}

Jobs run one at a time in arrival order on the main thread; a reader thread takes the input,
so a cancel reaches the job in progress (llama.cpp asks the abort callback between the
operations of every forward pass). The child exits when its input closes.

The protocol uses a private copy of file descriptor 1; descriptor 1 itself is pointed at
standard error, so anything native code prints can never corrupt the protocol.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO, Any, cast

# Fixed so that the same prompt gives the same answer: greedy at temperature 0, and the same
# sample at any other temperature, which keeps tests and evaluation runs repeatable.
SEED = 1234


class _JobError(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class _TokenCounter:
    """A logits processor that changes nothing and counts: llama.cpp calls it once per sampled
    token, and on the first call the context holds exactly the prompt. The streamed chunks
    cannot be counted instead: a character split over several tokens arrives as one chunk."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.sampled = 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.sampled == 0:
            self.prompt_tokens = len(input_ids)
        self.sampled += 1
        return scores


class _Job:
    def __init__(self, request: dict[str, Any], received: float) -> None:
        self.id = int(request["id"])
        self.messages = list(request["messages"])
        self.max_tokens = int(request["max_tokens"])
        self.temperature = float(request["temperature"])
        self.json_schema = request.get("json_schema")
        self.stream = bool(request.get("stream", False))
        self.budget = float(request["deadline_s"])
        self.deadline = received + self.budget
        self.cancelled = threading.Event()


class Child:
    def __init__(self, model: str, threads: int, context: int, out: IO[str]) -> None:
        # Imported here: this is the only process that loads the native library.
        import llama_cpp

        self.llama_cpp_module = llama_cpp
        self._out = out
        self._out_lock = threading.Lock()
        self.llama = llama_cpp.Llama(
            model_path=model,
            n_ctx=context,
            n_threads=threads,
            n_threads_batch=threads,
            seed=SEED,
            verbose=False,
        )
        self._current: _Job | None = None
        self._abort_callback = llama_cpp.ggml_abort_callback(self._should_abort)
        llama_cpp.llama_set_abort_callback(self.llama.ctx, self._abort_callback, None)
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self._pending: dict[int, _Job] = {}
        self._pending_lock = threading.Lock()

    def send(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, ensure_ascii=False)
        with self._out_lock:
            self._out.write(line + "\n")
            self._out.flush()

    # --- input (reader thread) -------------------------------------------------------------

    def read_input(self, source: IO[str]) -> None:
        for line in source:
            if not line.strip():
                continue
            request = json.loads(line)
            if request.get("op") == "generate":
                job = _Job(request, time.monotonic())
                with self._pending_lock:
                    self._pending[job.id] = job
                self.jobs.put(job)
            elif request.get("op") == "cancel":
                with self._pending_lock:
                    cancelled = self._pending.get(int(request["id"]))
                if cancelled is not None:
                    cancelled.cancelled.set()
        # Input closed: the parent is gone or shutting down; stop what runs and exit.
        with self._pending_lock:
            for job in self._pending.values():
                job.cancelled.set()
        self.jobs.put(None)

    # --- jobs (main thread) ----------------------------------------------------------------

    def serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                text, prompt_tokens, completion_tokens = self._generate(job)
                self.send(
                    {
                        "event": "done",
                        "id": job.id,
                        "text": text,
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                    }
                )
            except _JobError as exc:
                self.send({"event": "error", "id": job.id, "kind": exc.kind, "detail": exc.detail})
            finally:
                with self._pending_lock:
                    self._pending.pop(job.id, None)

    def _should_abort(self, _data: object) -> bool:
        job = self._current
        return job is not None and (job.cancelled.is_set() or time.monotonic() >= job.deadline)

    def _generate(self, job: _Job) -> tuple[str, int, int]:
        if job.cancelled.is_set():
            raise _JobError("cancelled", "The call was cancelled.")
        counter = _TokenCounter()
        if time.monotonic() >= job.deadline:
            raise self._timeout(job, counter)
        parts: list[str] = []
        finish: str | None = None
        # A fresh context for every call: reusing the previous call's cached prefix changes
        # the batch shapes of the prompt evaluation, which may change a greedy answer.
        self.llama.reset()  # type: ignore[no-untyped-call]
        chunks: Generator[Any, None, None] | None = None
        self._current = job
        try:
            chunks = cast(
                "Generator[Any, None, None]",
                self.llama.create_chat_completion(
                    messages=job.messages,
                    max_tokens=job.max_tokens,
                    temperature=job.temperature,
                    seed=SEED,
                    stream=True,
                    response_format=(
                        {"type": "json_object", "schema": job.json_schema}
                        if job.json_schema is not None
                        else None
                    ),
                    logits_processor=self.llama_cpp_module.LogitsProcessorList([counter]),
                ),
            )
            for chunk in chunks:
                choice = chunk["choices"][0]
                content = choice["delta"].get("content")
                if content:
                    parts.append(content)
                    if job.stream:
                        self.send({"event": "delta", "id": job.id, "text": content})
                finish = choice.get("finish_reason") or finish
                if job.cancelled.is_set():
                    raise _JobError("cancelled", "The call was cancelled.")
                if time.monotonic() >= job.deadline and finish is None:
                    raise self._timeout(job, counter)
        except ValueError as exc:
            # llama.cpp's words for a prompt that does not fit: "Requested tokens (N) exceed
            # context window of M".
            if "context window" in str(exc):
                raise _JobError(
                    "bad_response",
                    f"The prompt does not fit the embedded language model: {exc} tokens "
                    "(TAILOR_LLM_EMBEDDED_CONTEXT sets the window).",
                ) from exc
            raise _JobError("bad_response", f"The embedded language model failed: {exc}") from exc
        except RuntimeError as exc:
            # llama_decode's status 2: the abort callback stopped the forward pass.
            if "llama_decode returned 2" not in str(exc):
                raise _JobError(
                    "bad_response", f"The embedded language model failed: {exc}"
                ) from exc
            if job.cancelled.is_set():
                raise _JobError("cancelled", "The call was cancelled.") from None
            raise self._timeout(job, counter) from None
        finally:
            self._current = None
            if chunks is not None:
                chunks.close()
        # On "stop" the last token sampled was the end-of-turn token, which is not text.
        completion_tokens = counter.sampled - (1 if finish == "stop" else 0)
        return "".join(parts), counter.prompt_tokens, max(0, completion_tokens)

    @staticmethod
    def _timeout(job: _Job, counter: _TokenCounter) -> _JobError:
        where = (
            f"{counter.sampled} tokens generated" if counter.sampled else "still reading the prompt"
        )
        return _JobError(
            "timeout",
            f"The embedded language model did not finish within the {job.budget:g} s "
            f"deadline ({where}).",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--context", type=int, required=True)
    args = parser.parse_args(argv)
    # The protocol gets its own descriptor; fd 1 goes to stderr (see the module docstring).
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    child = Child(args.model, args.threads, args.context, out)
    # What the native library was built with ("AVX2 = 1 | ... | AMX_INT8 = 1" on a native
    # build for an AMX machine): the server logs it, operators see which build runs.
    info = child.llama_cpp_module.llama_print_system_info()
    system_info = info.decode(errors="replace") if isinstance(info, bytes) else str(info)
    child.send(
        {
            "event": "ready",
            "model": Path(args.model).stem,
            "pid": os.getpid(),
            "system_info": system_info.strip(" |"),
        }
    )
    reader = threading.Thread(
        target=child.read_input, args=(sys.stdin,), name="tailor-llm-input", daemon=True
    )
    reader.start()
    child.serve()
    child.llama.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
