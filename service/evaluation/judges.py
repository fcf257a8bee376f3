"""Judges for PersonaFeedback: each picks, for a case, the reply that fits the persona better.

A judge scores a chunk of cases at a time (``judge(cases) -> verdicts``, same order). Every
judge is deterministic for the same cases, chunking and settings: the reward model always sees
the same length-sorted batches, the random judge draws from a seed and the case's own position
in the release, and the LLM judge asks at temperature 0.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from service.evaluation.batching import Pair, ascore_in_sorted_batches
from service.evaluation.persona import persona_text, reward_query
from service.evaluation.personafeedback import Case
from service.llm.base import LLMBadResponse, LLMClient, Message, extract_json_object

JUDGES = ("reward", "llm", "embedding", "random")
JudgeName = Literal["reward", "llm", "embedding", "random"]


@dataclass(frozen=True)
class Verdict:
    correct: bool
    # LLM judge only: did the two orders pick the same reply; None for one-shot judges.
    consistent: bool | None = None
    # LLM judge only: answers that could not be read as "A" or "B" (0, 1 or 2 per case).
    unparsed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Judge(Protocol):
    name: str

    async def judge(self, cases: Sequence[Case]) -> list[Verdict]: ...


class RewardJudge:
    """The shipped reward model: the reply with the higher (persona+question, reply) score wins.

    The query text is ``reward_query``, exactly what the model was trained on. ``score`` gets
    length-sorted batches of fixed size, one at a time (in the service, the reward model's
    ``MicroBatcher.submit_batch``: between live batches, never merged with them), so int8
    activation ranges (which depend on the batch) are the same on every run.
    """

    name = "reward"

    def __init__(
        self, score: Callable[[list[Pair]], Awaitable[np.ndarray]], batch_size: int = 64
    ) -> None:
        self._score = score
        self._batch_size = batch_size

    async def judge(self, cases: Sequence[Case]) -> list[Verdict]:
        queries = [reward_query(c.persona, c.question) for c in cases]
        pairs = [(q, c.chosen) for q, c in zip(queries, cases, strict=True)] + [
            (q, c.reject) for q, c in zip(queries, cases, strict=True)
        ]
        scores = await ascore_in_sorted_batches(self._score, pairs, self._batch_size)
        n = len(cases)
        # A tie is not a win: the judge must prefer the chosen reply to count as correct.
        return [Verdict(bool(scores[i] > scores[n + i])) for i in range(n)]


class EmbeddingJudge:
    """Baseline: the reply whose embedding is closer to the persona's text wins. ``encode`` gets
    at most ``batch_size`` texts at a time (in the service, the embedder's batcher, one batch
    at a time)."""

    name = "embedding"

    def __init__(
        self, encode: Callable[[Sequence[str]], Awaitable[np.ndarray]], batch_size: int = 64
    ) -> None:
        self._encode = encode
        self._batch_size = batch_size

    async def judge(self, cases: Sequence[Case]) -> list[Verdict]:
        texts = [persona_text(c.persona) for c in cases]
        texts += [c.chosen for c in cases] + [c.reject for c in cases]
        parts = [
            await self._encode(texts[start : start + self._batch_size])
            for start in range(0, len(texts), self._batch_size)
        ]
        vectors = np.concatenate(parts)
        n = len(cases)
        persona, chosen, reject = vectors[:n], vectors[n : 2 * n], vectors[2 * n :]
        # Unit vectors (the embedder normalises), so the dot product is the cosine.
        sim_chosen = np.einsum("ij,ij->i", persona, chosen)
        sim_reject = np.einsum("ij,ij->i", persona, reject)
        return [Verdict(bool(a > b)) for a, b in zip(sim_chosen, sim_reject, strict=True)]


class RandomJudge:
    """Sanity check: a fair coin per case, seeded by the seed and the case's file:line, so the
    draw does not depend on which other cases are in the run or how they are chunked."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._seed = seed

    def _coin(self, case: Case) -> bool:
        digest = hashlib.sha256(f"{self._seed}:{case.source}".encode()).digest()
        return digest[0] < 128

    async def judge(self, cases: Sequence[Case]) -> list[Verdict]:
        return [Verdict(self._coin(c)) for c in cases]


SYSTEM_PROMPT = (
    "You judge personalised replies. Given a user's persona, their question and two replies, "
    "choose the reply that fits this particular user better. Answer with JSON "
    '{"choice": "A"} or {"choice": "B"} and nothing else.'
)
CHOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"choice": {"type": "string", "enum": ["A", "B"]}},
    "required": ["choice"],
    "additionalProperties": False,
}
_BARE = re.compile(r"^\W*(?:reply\s+)?([AB])\W*$", re.IGNORECASE)


def parse_choice(text: str) -> Literal["A", "B"] | None:
    """ "A" or "B" from a JSON answer or a bare letter; anything else is unreadable (None).

    Strict on purpose: guessing a letter out of prose would credit a judge for an answer it
    did not give.
    """
    try:
        value = extract_json_object(text).get("choice")
    except ValueError:
        match = _BARE.match(text.strip())
        value = match.group(1) if match else None
    if isinstance(value, str) and value.strip().upper() in ("A", "B"):
        return "A" if value.strip().upper() == "A" else "B"
    return None


def choice_messages(case: Case, reply_a: str, reply_b: str) -> list[Message]:
    user = (
        f"Persona:\n{json.dumps(case.persona, ensure_ascii=False)}\n\n"
        f"Question:\n{case.question.strip()}\n\n"
        f"Reply A:\n{reply_a.strip()}\n\n"
        f"Reply B:\n{reply_b.strip()}\n\n"
        "Which reply fits this user better?"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


class LLMJudge:
    """The configured LLM, asked in both orders (chosen as A, then chosen as B).

    A case is correct only when both orders pick the chosen reply, which cancels the position
    bias LLM judges are known for; the share of cases where both orders pick the same reply is
    reported as position consistency. An unreadable answer (or one the server refused) counts
    as a wrong pick and is counted; a server that cannot be reached fails the run instead,
    since its figures would say nothing about the judge.
    """

    name = "llm"

    def __init__(self, client: LLMClient, concurrency: int = 8, max_tokens: int = 16) -> None:
        self._client = client
        self._limit = asyncio.Semaphore(concurrency)
        self._max_tokens = max_tokens

    async def _ask(self, case: Case, chosen_first: bool) -> tuple[str | None, int, int]:
        a, b = (case.chosen, case.reject) if chosen_first else (case.reject, case.chosen)
        async with self._limit:
            try:
                completion = await self._client.complete(
                    choice_messages(case, a, b),
                    max_tokens=self._max_tokens,
                    temperature=0.0,
                    json_schema=CHOICE_SCHEMA,
                )
            except LLMBadResponse as exc:
                tokens = [(c.prompt_tokens, c.completion_tokens) for c in exc.completions]
                return None, sum(t[0] for t in tokens), sum(t[1] for t in tokens)
        choice = parse_choice(completion.text)
        picked = None
        if choice is not None:
            picked = "chosen" if (choice == "A") == chosen_first else "reject"
        return picked, completion.prompt_tokens, completion.completion_tokens

    async def _one(self, case: Case) -> Verdict:
        first, second = await asyncio.gather(self._ask(case, True), self._ask(case, False))
        picks = (first[0], second[0])
        unparsed = sum(p is None for p in picks)
        return Verdict(
            correct=picks == ("chosen", "chosen"),
            consistent=unparsed == 0 and picks[0] == picks[1],
            unparsed=unparsed,
            prompt_tokens=first[1] + second[1],
            completion_tokens=first[2] + second[2],
        )

    async def judge(self, cases: Sequence[Case]) -> list[Verdict]:
        return list(await asyncio.gather(*(self._one(c) for c in cases)))


class JudgeUnavailable(LookupError):
    """The judge needs a model or an LLM backend this process does not have."""


def build_judge(
    name: str,
    *,
    seed: int = 0,
    reward_score: Callable[[list[Pair]], Awaitable[np.ndarray]] | None = None,
    encode: Callable[[Sequence[str]], Awaitable[np.ndarray]] | None = None,
    llm: LLMClient | None = None,
    llm_concurrency: int = 8,
) -> Judge:
    if name == "random":
        return RandomJudge(seed)
    if name == "reward":
        if reward_score is None:
            raise JudgeUnavailable("the reward model is not loaded in this deployment")
        return RewardJudge(reward_score)
    if name == "embedding":
        if encode is None:
            raise JudgeUnavailable("the embedder is not loaded in this deployment")
        return EmbeddingJudge(encode)
    if name == "llm":
        if llm is None:
            raise JudgeUnavailable(
                "no LLM backend is configured (set TAILOR_LLM_BASE_URL) for the llm judge"
            )
        return LLMJudge(llm, llm_concurrency)
    raise JudgeUnavailable(f"unknown judge {name!r} (one of {', '.join(JUDGES)})")
