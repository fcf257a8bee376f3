"""Time-ordered identifiers: sortable by creation time, so a cursor is just the last id."""

from __future__ import annotations

import secrets
import time


def new_id() -> str:
    """32 hex chars: 16 of nanoseconds since the epoch, then 16 random."""
    return f"{time.time_ns():016x}{secrets.token_hex(8)}"
