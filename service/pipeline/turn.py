"""The request-path half of a chat turn: pick the attributes for the newest user message, then
write the reply. (Extraction from the turn is queued as a job by the caller; see jobs.)"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.inference import ModelRegistry
from service.llm.base import Completion, LLMClient
from service.pipeline import generate as generation
from service.pipeline.select import Item, Scored, select, user_items


@dataclass(frozen=True)
class Reply:
    completion: Completion
    used: list[Scored]
    generic: Completion | None = None


def last_user_message(conversation: Sequence[Mapping[str, str]]) -> str:
    for message in reversed(conversation):
        if message.get("role") == "user":
            return message.get("content", "")
    return ""


async def choose_attributes(
    models: ModelRegistry | None,
    conversation: Sequence[Mapping[str, str]],
    items: Sequence[Item],
    *,
    prefilter_k: int,
) -> list[Scored]:
    """The selected attributes for the newest user message (none when there is nothing to
    select from, so a new user's first turn needs no model)."""
    prompt = last_user_message(conversation)
    if not items or not prompt.strip() or models is None:
        return []
    scored = await select(models, prompt, items, prefilter_k=prefilter_k)
    return [s for s in scored if s.selected]


async def attributes_for(
    sessions: async_sessionmaker[AsyncSession],
    models: ModelRegistry | None,
    tenant_id: str,
    user_id: str,
    conversation: Sequence[Mapping[str, str]],
    *,
    prefilter_k: int,
) -> list[Scored]:
    """The first half of a turn (``/v1/turns``, and ``/v1/generate`` for a stored user): the
    user's stored attributes selected for the newest user message."""
    items = await user_items(sessions, tenant_id, user_id)
    return await choose_attributes(models, conversation, items, prefilter_k=prefilter_k)


async def reply(
    llm: LLMClient,
    conversation: Sequence[Mapping[str, str]],
    used: list[Scored],
    *,
    max_tokens: int,
    temperature: float,
    include_generic: bool = False,
) -> Reply:
    texts = [s.text for s in used]
    personal = generation.generate(
        llm, conversation, texts, max_tokens=max_tokens, temperature=temperature
    )
    if not include_generic:
        return Reply(await personal, used)
    generic = generation.generate(
        llm, conversation, [], max_tokens=max_tokens, temperature=temperature
    )
    first, second = await asyncio.gather(personal, generic)
    return Reply(first, used, second)
