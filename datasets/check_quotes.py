"""Validate the hand-labeled verification files (schema, labels, quotes).

For every row: ``label`` is ``supported`` or ``unsupported``; a ``supported`` row has a non-empty
``quote`` that is an exact substring of one message with role ``user``; an ``unsupported`` row has
``quote: null``. Exits non-zero on the first file with problems.

Usage:
  python3 datasets/check_quotes.py datasets/verification_val_checked.jsonl \\
      datasets/verifier_hard_negatives.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

LABELS = {"supported", "unsupported"}
CATEGORIES = {
    "over_generalization",
    "partner_stated",
    "hypothetical_or_question",
    "other_person",
    "joke_or_roleplay",
    "negation",
    "past_vs_present",
    "positive_control",
}


def check_row(row: dict) -> list[str]:
    problems: list[str] = []
    conv = row.get("conversation")
    if not isinstance(conv, list) or not conv:
        return ["conversation missing or empty"]
    for msg in conv:
        if msg.get("role") not in {"user", "assistant"} or not isinstance(msg.get("content"), str):
            problems.append(f"bad message {msg!r:.80}")
    if not isinstance(row.get("attribute"), str) or not row["attribute"].strip():
        problems.append("attribute missing")
    label, quote = row.get("label"), row.get("quote")
    if label not in LABELS:
        problems.append(f"bad label {label!r}")
    if label == "supported":
        user_texts = [m["content"] for m in conv if m.get("role") == "user"]
        if not isinstance(quote, str) or not quote.strip():
            problems.append("supported row without quote")
        elif not any(quote in text for text in user_texts):
            problems.append(f"quote not in any user message: {quote!r}")
    elif label == "unsupported" and quote is not None:
        problems.append("unsupported row with a quote")
    if "category" in row and row["category"] not in CATEGORIES:
        problems.append(f"unknown category {row['category']!r}")
    if "category" in row and (row["category"] == "positive_control") != (label == "supported"):
        problems.append("positive_control must be supported and only positive_control may be")
    return problems


def check_file(path: Path) -> bool:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    ids = Counter(r.get("id") for r in rows)
    ok = True
    for rid, n in ids.items():
        if n > 1:
            print(f"{path}: duplicate id {rid}")
            ok = False
    for row in rows:
        for problem in check_row(row):
            print(f"{path}: {row.get('id')}: {problem}")
            ok = False
    labels = Counter(r.get("label") for r in rows)
    quoted = sum(1 for r in rows if r.get("quote"))
    status = "OK" if ok else "FAILED"
    print(f"{path}: {len(rows)} rows, labels {dict(labels)}, {quoted} quotes verified: {status}")
    return ok


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or [
        Path(__file__).with_name("verification_val_checked.jsonl"),
        Path(__file__).with_name("verifier_hard_negatives.jsonl"),
    ]
    results = [check_file(p) for p in paths if p.exists()]
    sys.exit(0 if results and all(results) else 1)


if __name__ == "__main__":
    main()
