"""Verifier training data: hand-checked labels, never the raw file's.

Training pairs come from datasets/verification_train/checked_*.jsonl (labels read one by one
against datasets/LABELING.md), joined with the source conversations; conversations of the
validation persona groups are dropped so that validation stays held apart by persona.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from service.pipeline.windows import Window, user_windows
from service.training.crossencoder import PointExample
from service.training.synthetic import generate

WORD = re.compile(r"[a-z']+")
STOP = frozenset(
    {
        "i",
        "a",
        "an",
        "the",
        "my",
        "me",
        "am",
        "is",
        "are",
        "was",
        "be",
        "to",
        "of",
        "and",
        "in",
        "on",
        "for",
        "at",
        "it",
        "that",
        "this",
        "with",
        "do",
        "you",
        "your",
        "have",
        "has",
        "had",
        "like",
        "love",
        "so",
        "just",
        "not",
        "but",
        "or",
        "as",
        "we",
        "they",
        "he",
        "she",
        "them",
    }
)


def _words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


def _overlap(attribute: str, window: Window) -> float:
    a = _words(attribute)
    return len(a & _words(window.text)) / (len(a) or 1)


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def training_rows(
    source: Path, checked: Iterable[Path], val_rows: list[dict[str, Any]], holdout: set[str]
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    by_id = {r["id"]: r for r in load_jsonl(source)}
    val_sentences = {
        r["attribute"].strip().lower() for r in val_rows if r.get("source_label") == "supported"
    }
    # Persona sets overlap across conversations: drop any training conversation whose source
    # persona shares a sentence with a validation conversation's persona.
    conv_persona: dict[str, set[str]] = {}
    for r in by_id.values():
        if r["label"] == "supported":
            conv_persona.setdefault(r["id"].rsplit("-", 1)[0], set()).add(
                r["attribute"].strip().lower()
            )
    rows, dropped, agree, total = [], 0, 0, 0
    for path in checked:
        for label in load_jsonl(path):
            total += 1
            agree += label["source_label"] == label["label"]
            conv = label["conversation_id"]
            if conv in holdout or conv_persona.get(conv, set()) & val_sentences:
                dropped += 1
                continue
            src = by_id[label["id"]]
            rows.append(
                {
                    "conversation": src["conversation"],
                    "attribute": src["attribute"],
                    "supported": label["label"] == "supported",
                    "message_index": label.get("message_index"),
                    "conversation_id": conv,
                }
            )
    return rows, {
        "checked_rows_used": len(rows),
        "checked_rows_dropped_for_val": dropped,
        "source_label_agreement": round(agree / max(total, 1), 4),
    }


def everyday_rows(path: Path) -> list[dict[str, Any]]:
    """The written everyday corpus (datasets/everyday/verification/*.jsonl), its third-person
    attributes in the first person the service's verifier reads (``first_person``)."""
    from service.pipeline.extraction.person import first_person

    return [
        {
            "id": r.get("id"),
            "conversation": r["conversation"],
            "attribute": first_person(r["attribute"]),
            "supported": r["label"] == "supported",
            "message_index": r.get("message_index"),
            "quote": r.get("quote"),
            "category": r.get("category"),
            "label": r["label"],
        }
        for r in load_jsonl(path)
    ]


def written_rows(path: Path) -> list[dict[str, Any]]:
    """Hand-written failure-mode cases for training (datasets/verifier_train_written.jsonl);
    written apart from, and never mixed with, the held-out hand-written test set."""
    return [
        {
            "conversation": r["conversation"],
            "attribute": r["attribute"],
            "supported": r["label"] == "supported",
            "message_index": r.get("message_index"),
            "quote": r.get("quote"),
        }
        for r in load_jsonl(path)
    ]


def window_examples(rows: Iterable[Mapping[str, Any]], seed: int = 13) -> list[PointExample]:
    """One positive window (the evidence message) per supported row, plus the windows most
    likely to fool the model as negatives: lexically close windows of the same conversation."""
    rng = random.Random(seed)
    out = []
    for row in rows:
        windows = user_windows(row["conversation"])
        if not windows:
            continue
        attribute = row["attribute"]
        if row["supported"] and row.get("message_index") is not None:
            evidence = [w for w in windows if w.message_index == row["message_index"]]
            others = [w for w in windows if w.message_index != row["message_index"]]
            # A long message is several windows: the positive is the one holding the quote
            # (the others may say nothing about the fact, and are used neither way).
            quote = " ".join(str(row.get("quote") or "").split())
            holding = [w for w in evidence if quote and quote in w.text]
            positive = holding or evidence[:1]
            out += [PointExample(attribute, w.text, 1.0) for w in positive]
            ranked = sorted(others, key=lambda w: _overlap(attribute, w))
            # The least similar windows are safe negatives; similar ones might also support.
            out += [PointExample(attribute, w.text, 0.0) for w in ranked[:2]]
        elif not row["supported"]:
            ranked = sorted(windows, key=lambda w: -_overlap(attribute, w))
            chosen = ranked[:3] + rng.sample(windows, min(1, len(windows)))
            out += [PointExample(attribute, w.text, 0.0) for w in dict.fromkeys(chosen)]
    return out


def synthetic_examples(rounds: int, seed: int = 13) -> list[PointExample]:
    rows = [
        {
            "conversation": c.conversation,
            "attribute": c.attribute,
            "supported": c.supported,
            "message_index": c.evidence_index,
        }
        for c in generate(rounds, seed)
    ]
    return window_examples(rows, seed)
