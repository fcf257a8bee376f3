"""Persona records as text for the reward model.

PersonaFeedback personas are `{"Name", "Demographics": {...}, "Personality": {...},
"Preference": [...], "Bias": {...}}` with values nested to any depth; the dev set's personas
carry only a Preference list. Preferences come first: they decide most cases, and a long
record is truncated from the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_CHARS = 1200
ORDER = ("Preference", "Bias", "Personality", "Demographics", "Name")


def _flatten(value: Any) -> str:
    if isinstance(value, Mapping):
        parts = [f"{k}: {_flatten(v)}" for k, v in value.items() if _flatten(v)]
        return "; ".join(parts)
    if isinstance(value, list | tuple):
        return "; ".join(s for s in (_flatten(v) for v in value) if s)
    return "" if value is None else str(value).strip()


def persona_text(persona: Mapping[str, Any]) -> str:
    keys = [k for k in ORDER if k in persona] + [k for k in persona if k not in ORDER]
    parts = []
    for key in keys:
        text = _flatten(persona[key])
        if text:
            parts.append(text if key == "Preference" else f"{key}: {text}")
    text = " | ".join(parts)
    return text[:MAX_CHARS]


def reward_query(persona: Mapping[str, Any], question: str) -> str:
    return f"{persona_text(persona)}\nQuestion: {question.strip()}"
