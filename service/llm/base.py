"""What the rest of the service needs of a language model, whichever backend serves it.

Callers depend on ``LLMClient`` and the three ``LLMError`` kinds only, so an OpenAI-compatible
server, an embedded model or a test fake can stand behind the same code. ``complete_structured``
turns a free-text answer into a validated pydantic model, with one repair round trip because
even schema-constrained servers occasionally answer with prose, fences or a wrong field.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, TypeVar

from pydantic import BaseModel, ValidationError

from service import metrics


class Message(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


class LLMError(Exception):
    """A call to the language model failed; ``slug`` names the kind of failure (metrics label
    and, in the API, the problem type)."""

    slug: str = "llm-error"

    def __init__(self, detail: str, *, completions: Sequence[Completion] = ()) -> None:
        super().__init__(detail)
        self.detail = detail
        # Answers already paid for before the failure (structured output), so callers can
        # still account for their tokens.
        self.completions = list(completions)


class LLMUnavailable(LLMError):
    """The server could not be reached, or kept answering 429/5xx until retries ran out."""

    slug = "llm-unavailable"

    def __init__(
        self,
        detail: str,
        *,
        retry_after: float | None = None,
        completions: Sequence[Completion] = (),
    ) -> None:
        super().__init__(detail, completions=completions)
        self.retry_after = retry_after


class LLMTimeout(LLMError):
    """The call's deadline or the read timeout passed before the answer was complete."""

    slug = "llm-timeout"


class LLMBadResponse(LLMError):
    """The server answered, but not with something usable (or refused our request)."""

    slug = "llm-bad-response"


def count_tokens(backend: str, prompt: int, completion: int) -> None:
    """Add one call's tokens to the per-backend token counter (every backend reports them)."""
    metrics.LLM_TOKENS.labels(backend, "prompt").inc(prompt)
    metrics.LLM_TOKENS.labels(backend, "completion").inc(completion)


class LLMClient(Protocol):
    """One language-model backend. ``name`` labels its metrics."""

    name: str

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 512,
        temperature: float = 0.2,
        json_schema: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> Completion:
        """The whole answer. ``json_schema`` asks the server to constrain its output to it."""
        ...

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 512,
        temperature: float = 0.2,
        deadline_s: float | None = None,
    ) -> AsyncGenerator[str, None]:
        """Text deltas as they are generated. Close it (``contextlib.aclosing``) when stopping
        early: it holds a connection and a concurrency slot until then, which is why this is a
        generator (it has ``aclose``) rather than any async iterator."""
        ...

    async def aclose(self) -> None: ...


T = TypeVar("T", bound=BaseModel)

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_MAX_REPORTED_ERRORS = 20


def extract_json_object(text: str) -> dict[str, Any]:
    """The outermost JSON object in a model's answer, tolerating code fences and prose around it.

    Raises ValueError when there is none.
    """
    decoder = json.JSONDecoder()
    # A fenced block is the model's own statement of where the answer is; prefer it over braces
    # that may appear in the surrounding prose.
    for candidate in [*_FENCE.findall(text), text]:
        start = candidate.find("{")
        while start != -1:
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                pass
            else:
                if isinstance(value, dict):
                    return value
            start = candidate.find("{", start + 1)
    raise ValueError("the answer contains no JSON object")


def _describe(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    lines = [
        f"- {'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
        for err in errors[:_MAX_REPORTED_ERRORS]
    ]
    if len(errors) > _MAX_REPORTED_ERRORS:
        lines.append(f"- ... and {len(errors) - _MAX_REPORTED_ERRORS} more")
    return "\n".join(lines)


def _parse(text: str, model_type: type[T]) -> T | str:
    """The validated model, or a description of what is wrong with the answer."""
    try:
        obj = extract_json_object(text)
    except ValueError as exc:
        return f"- {exc}"
    try:
        return model_type.model_validate(obj)
    except ValidationError as exc:
        return _describe(exc)


def _repair_request(errors: str) -> str:
    return (
        "Your previous answer is not valid for the required JSON schema:\n"
        f"{errors}\n"
        "Reply with only the corrected JSON object: no explanation, no code fences."
    )


async def complete_structured(
    client: LLMClient,
    messages: Sequence[Message],
    model_type: type[T],
    *,
    max_tokens: int = 1024,
    temperature: float = 0.0,
    deadline_s: float | None = None,
) -> tuple[T, list[Completion]]:
    """Ask for JSON matching ``model_type``; returns the validated model and every completion.

    ``deadline_s`` bounds both calls together; unset, each call gets the client's default.
    Raises LLMBadResponse when the answer is still invalid after one repair attempt; any
    LLMError raised after the first answer carries the completions already made.
    """
    schema = model_type.model_json_schema()
    started = time.monotonic()

    def remaining() -> float | None:
        return None if deadline_s is None else deadline_s - (time.monotonic() - started)

    first = await client.complete(
        messages,
        max_tokens=max_tokens,
        temperature=temperature,
        json_schema=schema,
        deadline_s=deadline_s,
    )
    completions = [first]
    parsed = _parse(first.text, model_type)
    if not isinstance(parsed, str):
        return parsed, completions

    left = remaining()
    if left is not None and left <= 0:
        metrics.LLM_STRUCTURED_REPAIRS.labels(client.name, "failed").inc()
        raise LLMTimeout(
            f"the answer did not match the schema and the {deadline_s:g} s deadline left no "
            "time to repair it",
            completions=completions,
        )
    repair: list[Message] = [
        *messages,
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": _repair_request(parsed)},
    ]
    try:
        second = await client.complete(
            repair,
            max_tokens=max_tokens,
            temperature=temperature,
            json_schema=schema,
            deadline_s=left,
        )
    except LLMError as exc:
        metrics.LLM_STRUCTURED_REPAIRS.labels(client.name, "failed").inc()
        exc.completions = [*completions, *exc.completions]
        raise
    completions.append(second)
    repaired = _parse(second.text, model_type)
    if isinstance(repaired, str):
        metrics.LLM_STRUCTURED_REPAIRS.labels(client.name, "failed").inc()
        raise LLMBadResponse(
            f"The language model's answer did not match the {model_type.__name__} schema, "
            f"even after a repair attempt:\n{repaired}",
            completions=completions,
        )
    metrics.LLM_STRUCTURED_REPAIRS.labels(client.name, "repaired").inc()
    return repaired, completions
