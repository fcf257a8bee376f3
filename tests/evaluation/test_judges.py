"""Each judge picks between the two replies of a case; the LLM judge asks in both orders."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.evaluation.judges import (
    EmbeddingJudge,
    JudgeUnavailable,
    LLMJudge,
    RandomJudge,
    RewardJudge,
    build_judge,
    parse_choice,
)
from service.evaluation.persona import persona_text, reward_query
from service.evaluation.personafeedback import Case, load
from service.llm.base import Completion, LLMBadResponse, Message

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "personafeedback_tiny"


def _cases() -> list[Case]:
    return load(TINY).cases


async def test_random_is_seeded_and_independent_of_chunking() -> None:
    cases = _cases()
    judge = RandomJudge(seed=7)
    whole = [v.correct for v in await judge.judge(cases)]
    parts = [v.correct for v in await judge.judge(cases[:3])] + [
        v.correct for v in await judge.judge(cases[3:])
    ]
    assert whole == parts
    assert whole == [v.correct for v in await RandomJudge(seed=7).judge(cases)]
    # Another seed draws differently on some case (8 fair coins agreeing by chance: 1/256).
    others = [[v.correct for v in await RandomJudge(seed=s).judge(cases)] for s in range(1, 6)]
    assert any(o != whole for o in others)


async def test_reward_prefers_the_higher_score_and_uses_reward_query() -> None:
    cases = _cases()
    seen: list[tuple[str, str]] = []

    async def score(pairs: list[tuple[str, str]]) -> np.ndarray:
        assert len(pairs) <= 3  # one fixed-size batch at a time
        seen.extend(pairs)
        # The chosen reply wins exactly when it is the longer one.
        return np.array([len(reply) for _, reply in pairs], dtype=np.float32)

    verdicts = await RewardJudge(score, batch_size=3).judge(cases)
    assert [v.correct for v in verdicts] == [len(c.chosen) > len(c.reject) for c in cases]
    assert (reward_query(cases[0].persona, cases[0].question), cases[0].chosen) in seen
    assert len(seen) == 2 * len(cases)


async def test_reward_tie_is_not_a_win() -> None:
    async def score(pairs: list[tuple[str, str]]) -> np.ndarray:
        return np.zeros(len(pairs), dtype=np.float32)

    assert not any(v.correct for v in await RewardJudge(score).judge(_cases()))


async def test_embedding_prefers_the_reply_closer_to_the_persona() -> None:
    cases = _cases()
    near = {c.chosen for c in cases} | {persona_text(c.persona) for c in cases}

    async def encode(texts: Sequence[str]) -> np.ndarray:
        assert len(texts) <= 4  # at most batch_size texts at a time
        # Personas and chosen replies point one way, rejected replies another.
        return np.array([[1.0, 0.0] if t in near else [0.0, 1.0] for t in texts], np.float32)

    verdicts = await EmbeddingJudge(encode, batch_size=4).judge(cases)
    assert all(v.correct for v in verdicts)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"choice": "A"}', "A"),
        ('```json\n{"choice": "b"}\n```', "B"),
        ("B", "B"),
        (" a. ", "A"),
        ("Reply A", "A"),
        ("I think A is better but B is also fine", None),
        ('{"choice": "C"}', None),
        ("", None),
    ],
)
def test_parse_choice_is_strict(text: str, expected: str | None) -> None:
    assert parse_choice(text) == expected


class ScriptedLLM:
    """Answers by looking at which reply sits in slot A: ``policy(case_chosen_is_A) -> text``."""

    name = "scripted"

    def __init__(self, policy: Any, chosen: set[str]) -> None:
        self.policy = policy
        self.chosen = chosen
        self.calls = 0

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 512,
        temperature: float = 0.2,
        json_schema: dict[str, Any] | None = None,
        deadline_s: float | None = None,
    ) -> Completion:
        self.calls += 1
        assert temperature == 0.0
        assert json_schema is not None
        user = messages[-1]["content"]
        reply_a = user.split("Reply A:\n", 1)[1].split("\n\nReply B:", 1)[0]
        text = self.policy(reply_a in self.chosen)
        if text is None:
            raise LLMBadResponse("refused")
        return Completion(text, "m", prompt_tokens=10, completion_tokens=2, latency_s=0.0)

    def stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[str, None]:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


async def test_llm_correct_only_when_both_orders_pick_chosen() -> None:
    cases = _cases()
    chosen = {c.chosen for c in cases}
    good = ScriptedLLM(lambda chosen_is_a: '{"choice": "A"}' if chosen_is_a else "B", chosen)
    verdicts = await LLMJudge(good, concurrency=2).judge(cases)
    assert all(v.correct and v.consistent for v in verdicts)
    assert good.calls == 2 * len(cases)
    assert sum(v.prompt_tokens + v.completion_tokens for v in verdicts) == 24 * len(cases)

    # Always "A": right in one order, wrong in the other → never correct, never consistent.
    biased = ScriptedLLM(lambda chosen_is_a: "A", chosen)
    verdicts = await LLMJudge(biased).judge(cases)
    assert not any(v.correct for v in verdicts)
    assert not any(v.consistent for v in verdicts)


async def test_llm_unreadable_answers_count_as_wrong_and_are_counted() -> None:
    cases = _cases()[:2]
    chosen = {c.chosen for c in cases}
    llm = ScriptedLLM(lambda chosen_is_a: "A" if chosen_is_a else None, chosen)
    verdicts = await LLMJudge(llm).judge(cases)
    assert [(v.correct, v.unparsed) for v in verdicts] == [(False, 1), (False, 1)]


def test_build_judge_names_what_is_missing() -> None:
    assert isinstance(build_judge("random", seed=1), RandomJudge)
    with pytest.raises(JudgeUnavailable, match="reward model"):
        build_judge("reward")
    with pytest.raises(JudgeUnavailable, match="TAILOR_LLM_BASE_URL"):
        build_judge("llm")
    with pytest.raises(JudgeUnavailable, match="embedder"):
        build_judge("embedding")
