"""The request-path half of a chat turn: which message selection reads, and when it runs."""

from __future__ import annotations

from service.inference import ModelRegistry
from service.inference.embedder import Embedder
from service.pipeline.select import Item, select_for
from service.pipeline.turn import attributes_for, choose_attributes, last_user_message
from service.store import tenants
from service.store.attributes import AttributeIn, AttributeRepository
from service.store.db import create_engine, session_factory, transaction
from service.store.users import get_or_create_user
from tests.conftest import Database
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


async def test_a_turn_reads_only_this_tenants_user_from_the_database(clean_db: Database) -> None:
    """attributes_for and select_for on a real database: the stored vectors are used (no text
    is embedded but the prompt), and another tenant's user of the same name is never read."""
    engine = create_engine(clean_db.url, schema=clean_db.schema)
    sessions = session_factory(engine)
    models, axes, _ = registry()
    async with transaction(sessions) as s:
        ours = (await tenants.create_tenant(s, "ours")).tenant_id
        theirs = (await tenants.create_tenant(s, "theirs")).tenant_id
        for tenant, texts in ((ours, ["north 0.9", "south 0.2"]), (theirs, ["north 0.99"])):
            user = await get_or_create_user(s, tenant, "alice")
            repo = AttributeRepository(s, tenant)
            for text in texts:
                vector = Embedder.to_bytes(axes.vector(text))
                await repo.create(user, AttributeIn(text, embedding=vector), actor="test")
            if tenant == ours:  # a deleted attribute is never read
                gone = AttributeIn("north 0.95", embedding=Embedder.to_bytes(axes.vector("north")))
                await repo.delete(await repo.create(user, gone, actor="test"), actor="test")
    chat = [{"role": "user", "content": "north please"}]
    used = await attributes_for(sessions, models, ours, "alice", chat, prefilter_k=8)
    assert [u.text for u in used] == ["north 0.9"]
    assert axes.seen == ["north please"]
    scored = await select_for(
        sessions, models, theirs, "north", user_id="alice", attributes=None, prefilter_k=8
    )
    assert [(s.text, s.selected) for s in scored] == [("north 0.99", True)]
    inline = await select_for(
        sessions, models, ours, "south", user_id=None, attributes=["south 0.7"], prefilter_k=8
    )
    assert [(s.text, s.selected) for s in inline] == [("south 0.7", True)]
    assert await attributes_for(sessions, models, ours, "bob", chat, prefilter_k=8) == []
    await engine.dispose()
