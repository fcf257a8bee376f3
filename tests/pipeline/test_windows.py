from __future__ import annotations

import itertools

from service.pipeline.windows import user_windows


def test_one_window_per_user_message_with_partner_context() -> None:
    conv = [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello, I am a nurse. " + "blah " * 100},
        {"role": "user", "content": "Me too!"},
        {"role": "user", "content": "   "},
        {"role": "user", "content": "I also  have\ntwo dogs."},
    ]
    windows = user_windows(conv)
    assert [w.message_index for w in windows] == [0, 2, 4]
    assert windows[0].text == "user: Hi!"
    assert windows[1].text.startswith("other: … ")
    assert windows[1].text.endswith("\nuser: Me too!")
    assert len(windows[1].text) < 300  # partner context is only the tail
    assert windows[2].text == "user: I also have two dogs."  # no partner message right before


def test_quote_window_keeps_a_late_quote_in_view() -> None:
    from service.pipeline.windows import QUOTE_USER_CHARS, quote_window

    filler = "Some words about the weather and traffic today. " * 20
    message = filler + "I strongly prefer learning with stories. " + filler
    conversation = [
        {"role": "assistant", "content": "Tell me how you like to learn." * 10},
        {"role": "user", "content": message},
    ]
    window = quote_window(conversation, 1, "I strongly prefer learning with stories")
    other, user = window.text.split("\n")
    assert other.startswith("other: ") and len(other) < 140
    assert "I strongly prefer learning with stories" in user
    assert user.startswith("user: … ") and user.endswith(" …")
    assert len(user) <= len("user: … ") + QUOTE_USER_CHARS + 2
    # Cut at spaces, never inside a word.
    body = user.removeprefix("user: … ").removesuffix(" …")
    assert body in " ".join(message.split()) and body.split(" ")[0] in {"Some", "words", "about",
        "the", "weather", "and", "traffic", "today."}  # fmt: skip


def test_quote_window_of_a_short_message_is_the_message() -> None:
    from service.pipeline.windows import quote_window

    conversation = [{"role": "user", "content": "I have  a cat."}]
    assert quote_window(conversation, 0, "a cat").text == "user: I have a cat."


def test_a_long_message_is_read_in_overlapping_chunks_of_whole_sentences() -> None:
    from service.pipeline.windows import CHUNK_CHARS, message_chunks

    before = "My boss moved the deadline again and I stayed late twice this week. " * 4
    fact = "Anyway, I finally adopted a cat from the shelter last Sunday."
    after = " The bus was late every single day and the weather was grey and cold. " * 4
    message = before + fact + after
    conversation = [
        {"role": "assistant", "content": "How was your week?"},
        {"role": "user", "content": message},
    ]
    windows = user_windows(conversation)
    assert len(windows) > 1 and {w.message_index for w in windows} == {1}
    # Only the first carries the partner's words; every chunk is short enough to be read whole.
    assert windows[0].text.startswith("other: How was your week?\nuser: ")
    assert all(not w.text.startswith("other:") for w in windows[1:])
    chunks = message_chunks(message)
    assert all(len(c) <= CHUNK_CHARS for c in chunks)
    # The fact sits whole in one chunk; consecutive chunks share a sentence.
    assert any(fact in c for c in chunks)
    for first, second in itertools.pairwise(chunks):
        assert first.rsplit(". ", 1)[-1].rstrip(".") in second
    # A short message stays one window.
    assert message_chunks("I have two dogs.") == ["I have two dogs."]
