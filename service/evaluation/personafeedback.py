"""PersonaFeedback in its release layout.

    <root>/persona/all_personas.jsonl        line k (1-based) is the persona of user_id "k"
    <root>/data/{general,specific}/{easy,medium,hard}.jsonl
        {"user_id", "question", "chosen", "reject"}

The release spells the specific folder "spedific"; both spellings are read as `specific`.
A bad row is reported with its file and line and skipped, never fatal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPLITS = {"general": "general", "specific": "specific", "spedific": "specific"}
TIERS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Case:
    split: str
    tier: str
    user_id: str
    question: str
    chosen: str
    reject: str
    persona: dict[str, Any]
    source: str  # file:line

    @property
    def key(self) -> str:
        return f"{self.split}/{self.tier}"


@dataclass
class Dataset:
    cases: list[Case] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load_personas(path: Path, problems: list[str]) -> dict[str, dict[str, Any]]:
    personas: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path.name}:{number}: not JSON ({exc.msg})")
            continue
        if not isinstance(doc, dict):
            problems.append(f"{path.name}:{number}: persona is not an object")
            continue
        personas[str(number)] = doc
    return personas


def load(
    root: Path, splits: Iterable[str] | None = None, tiers: Iterable[str] | None = None
) -> Dataset:
    want_splits = set(splits or ("general", "specific"))
    want_tiers = set(tiers or TIERS)
    data = Dataset()
    personas = load_personas(root / "persona" / "all_personas.jsonl", data.problems)
    data_dir = root / "data"
    for folder in sorted(p for p in data_dir.iterdir() if p.is_dir()) if data_dir.is_dir() else []:
        split = SPLITS.get(folder.name)
        if split is None or split not in want_splits:
            continue
        for tier in TIERS:
            path = folder / f"{tier}.jsonl"
            if tier not in want_tiers or not path.exists():
                continue
            rel = f"data/{folder.name}/{tier}.jsonl"
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                case = _parse(line, split, tier, personas, f"{rel}:{number}", data.problems)
                if case is not None:
                    data.cases.append(case)
    return data


def _parse(
    line: str,
    split: str,
    tier: str,
    personas: dict[str, dict[str, Any]],
    where: str,
    problems: list[str],
) -> Case | None:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        problems.append(f"{where}: not JSON ({exc.msg})")
        return None
    if not isinstance(doc, dict):
        problems.append(f"{where}: row is not an object")
        return None
    missing = [k for k in ("user_id", "question", "chosen", "reject") if not doc.get(k)]
    if missing:
        problems.append(f"{where}: missing {', '.join(missing)}")
        return None
    user_id = str(doc["user_id"])
    persona = personas.get(user_id)
    if persona is None:
        problems.append(f"{where}: no persona for user_id {user_id}")
        return None
    values = [doc[k] for k in ("question", "chosen", "reject")]
    if not all(isinstance(v, str) for v in values):
        problems.append(f"{where}: question, chosen and reject must be strings")
        return None
    return Case(split, tier, user_id, values[0], values[1], values[2], persona, where)
