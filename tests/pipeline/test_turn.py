"""The request-path half of a chat turn: which message selection reads, and when it runs."""

from __future__ import annotations

from service.inference import ModelRegistry
from service.pipeline.select import Item
from service.pipeline.turn import choose_attributes, last_user_message
from tests.pipeline.test_select import registry


def test_the_newest_user_message_is_the_prompt() -> None:
    chat = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "another reply"},
    ]
    assert last_user_message(chat) == "second"
    assert last_user_message([{"role": "assistant", "content": "hi"}]) == ""


async def test_only_selected_attributes_are_used() -> None:
    models, axes, relevance = registry()
    items = [Item(t, t, axes.vector(t)) for t in ("north 0.9", "north 0.1", "south 0.95")]
    chat = [
        {"role": "user", "content": "south is cold"},
        {"role": "user", "content": "north again"},
    ]
    used = await choose_attributes(models, chat, items, prefilter_k=2)
    assert [u.text for u in used] == ["north 0.9"]
    assert relevance.pairs_seen == 2


async def test_a_first_turn_or_an_empty_message_runs_no_model() -> None:
    models, axes, relevance = registry()
    items = [Item("north 0.9", "a", axes.vector("north 0.9"))]
    first = [{"role": "user", "content": "north"}]
    assert await choose_attributes(models, first, [], prefilter_k=8) == []
    blank = [{"role": "user", "content": "   "}]
    assert await choose_attributes(models, blank, items, prefilter_k=8) == []
    assert await choose_attributes(None, first, items, prefilter_k=8) == []
    assert relevance.pairs_seen == 0 and axes.seen == []
    assert isinstance(models, ModelRegistry)
