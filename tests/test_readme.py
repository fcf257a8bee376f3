"""The README stays true about configuration."""

from __future__ import annotations

from service.config import REPO_ROOT, Settings


def test_every_setting_is_documented() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    missing = [
        f"TAILOR_{name.upper()}"
        for name in Settings.model_fields
        if f"`TAILOR_{name.upper()}`" not in readme
    ]
    assert missing == []
