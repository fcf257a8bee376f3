"""complete_structured against a real HTTP server, and the JSON extraction behind it."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel

from service.llm import LLMBadResponse, LLMTimeout, Message, complete_structured
from service.llm.base import extract_json_object
from tests.llm.conftest import ClientFactory, FakeLLMServer, Reply, completion


class Verdict(BaseModel):
    label: Literal["yes", "no"]
    score: int


ASK: list[Message] = [{"role": "user", "content": "Is the sky blue? Answer as JSON."}]


async def test_prose_wrapped_json_is_parsed(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(
        completion('Sure! Here it is:\n```json\n{"label": "yes", "score": 3}\n```\nAnything else?')
    )

    verdict, completions = await complete_structured(make_client(), ASK, Verdict)

    assert verdict == Verdict(label="yes", score=3)
    assert len(completions) == 1
    [seen] = fake.requests
    assert seen.body["response_format"]["json_schema"]["schema"] == Verdict.model_json_schema()
    assert seen.body["messages"] == ASK


async def test_invalid_answer_is_repaired_once(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    bad = '{"label": "maybe", "score": "high"}'
    fake.reply(
        completion(bad, completion_tokens=9),
        completion('{"label": "no", "score": 1}', completion_tokens=8),
    )

    verdict, completions = await complete_structured(make_client(), ASK, Verdict)

    assert verdict == Verdict(label="no", score=1)
    assert [c.completion_tokens for c in completions] == [9, 8]
    assert len(fake.requests) == 2
    messages = fake.requests[1].body["messages"]
    assert messages[: len(ASK)] == ASK
    assert messages[len(ASK)] == {"role": "assistant", "content": bad}
    repair = messages[len(ASK) + 1]
    assert repair["role"] == "user"
    assert "label: Input should be 'yes' or 'no'" in repair["content"]
    assert "score: Input should be a valid integer" in repair["content"]
    assert "only the corrected JSON" in repair["content"]


async def test_answer_without_json_is_repaired(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(completion("I think yes."), completion('{"label": "yes", "score": 2}'))
    verdict, _ = await complete_structured(make_client(), ASK, Verdict)
    assert verdict.score == 2
    assert "no JSON object" in fake.requests[1].body["messages"][-1]["content"]


async def test_still_invalid_after_repair_is_a_bad_response(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(completion('{"label": "maybe"}'), completion('{"label": "perhaps"}'))

    with pytest.raises(LLMBadResponse, match="even after a repair attempt") as caught:
        await complete_structured(make_client(), ASK, Verdict)

    assert len(fake.requests) == 2
    assert len(caught.value.completions) == 2


async def test_repair_that_times_out_keeps_the_first_completion(
    fake: FakeLLMServer, make_client: ClientFactory
) -> None:
    fake.reply(completion('{"label": "maybe"}'), Reply(delay=2.0, json={}))

    with pytest.raises(LLMTimeout) as caught:
        await complete_structured(make_client(read_timeout_s=5.0), ASK, Verdict, deadline_s=0.5)

    assert [c.text for c in caught.value.completions] == ['{"label": "maybe"}']


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": {"b": "}"}}\n```', {"a": {"b": "}"}}),
        ('Use {braces} like this: ```\n{"a": 2}\n```', {"a": 2}),
        ('Answer: {"a": [1, {"c": 3}]} -- hope it helps {x}', {"a": [1, {"c": 3}]}),
        ('prose with {stray} braces then {"a": 3} done', {"a": 3}),
    ],
)
def test_extract_json_object(text: str, expected: dict[str, object]) -> None:
    assert extract_json_object(text) == expected


@pytest.mark.parametrize("text", ["no json here", "[1, 2]", '{"a": 1'])
def test_extract_json_object_without_an_object(text: str) -> None:
    with pytest.raises(ValueError, match="no JSON object"):
        extract_json_object(text)
