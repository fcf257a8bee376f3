from __future__ import annotations

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
