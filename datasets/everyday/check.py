"""Validate the raw everyday corpus files (standard library only).

    python3 datasets/everyday/check.py            # every raw file
    python3 datasets/everyday/check.py FILE ...   # only these
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOMAINS = {
    "food_diet", "allergies", "health", "fitness", "family_children", "pets", "home",
    "location_climate", "commute_car", "work_schedule", "money", "education", "languages",
    "tech", "hobbies", "music", "film_tv", "books", "travel", "accessibility", "lifestyle",
    "shopping", "gardening", "parenting", "relationships", "sleep", "sports", "fashion_beauty",
    "cooking", "social_events",
}  # fmt: skip
CATEGORIES = {
    "plain", "paraphrase", "implied", "past_state", "someone_else", "joke_sarcasm", "negation",
    "overgeneralization", "question", "assistant_said", "hypothetical", "unrelated",
}  # fmt: skip
KINDS = {"direct", "indirect", "mixed", "none"}
SPLITS = {"train", "val", "test"}


def check_relevance(row: dict, where: str) -> list[str]:
    errs = []
    if not isinstance(row.get("profile_id"), str):
        errs.append(f"{where}: profile_id missing")
    if row.get("split") not in SPLITS:
        errs.append(f"{where}: bad split {row.get('split')!r}")
    facts = row.get("facts")
    if not isinstance(facts, list) or not 8 <= len(facts) <= 15:
        errs.append(f"{where}: need 8-15 facts")
        return errs
    for i, f in enumerate(facts):
        if not isinstance(f, dict) or not str(f.get("text", "")).startswith("The user"):
            errs.append(f"{where}: fact {i} must be {{text: 'The user ...', domain}}")
        elif f.get("domain") not in DOMAINS:
            errs.append(f"{where}: fact {i} unknown domain {f.get('domain')!r}")
    prompts = row.get("prompts")
    if not isinstance(prompts, list) or not prompts:
        errs.append(f"{where}: prompts missing")
        return errs
    for j, p in enumerate(prompts):
        w = f"{where} prompt {j}"
        if not isinstance(p.get("prompt"), str) or not p["prompt"].strip():
            errs.append(f"{w}: empty prompt")
        rel = p.get("relevant")
        if not isinstance(rel, list) or any(
            not isinstance(i, int) or not 0 <= i < len(facts) for i in rel
        ):
            errs.append(f"{w}: relevant must be indices into facts")
        elif len(set(rel)) != len(rel):
            errs.append(f"{w}: duplicate index")
        if p.get("kind") not in KINDS:
            errs.append(f"{w}: bad kind {p.get('kind')!r}")
        elif (p["kind"] == "none") != (rel == []):
            errs.append(f"{w}: kind none iff relevant is empty")
        if p.get("domain") not in DOMAINS | {"general"}:
            errs.append(f"{w}: unknown domain {p.get('domain')!r}")
    return errs


def check_extra(row: dict, where: str, profiles: dict[str, dict]) -> list[str]:
    """A row of relevance/extra/*.jsonl: more prompts for a train or val profile written earlier
    ({"profile_id", "prompts": [...]}, prompts as in a profile)."""
    profile = profiles.get(str(row.get("profile_id")))
    if profile is None:
        return [f"{where}: unknown profile {row.get('profile_id')!r}"]
    if profile["split"] == "test":
        return [f"{where}: {row['profile_id']} is a test profile; extras are for train and val"]
    merged = dict(profile, prompts=row.get("prompts"))
    return check_relevance(merged, where)


def check_verification(row: dict, where: str) -> list[str]:
    errs = []
    if not isinstance(row.get("conversation_id"), str):
        errs.append(f"{where}: conversation_id missing")
    if row.get("split") not in SPLITS:
        errs.append(f"{where}: bad split {row.get('split')!r}")
    if row.get("domain") not in DOMAINS:
        errs.append(f"{where}: unknown domain {row.get('domain')!r}")
    conv = row.get("conversation")
    if not isinstance(conv, list) or not conv or conv[0].get("role") != "user":
        errs.append(f"{where}: conversation must start with a user message")
        return errs
    for m in conv:
        if m.get("role") not in {"user", "assistant"} or not str(m.get("content", "")).strip():
            errs.append(f"{where}: bad message {m!r}"[:200])
    cases = row.get("cases")
    if not isinstance(cases, list) or not cases:
        errs.append(f"{where}: cases missing")
        return errs
    for k, c in enumerate(cases):
        w = f"{where} case {k}"
        if not str(c.get("attribute", "")).startswith("The user"):
            errs.append(f"{w}: attribute must start with 'The user'")
        if c.get("category") not in CATEGORIES:
            errs.append(f"{w}: unknown category {c.get('category')!r}")
        label = c.get("label")
        if label == "supported":
            i, q = c.get("message_index"), c.get("quote")
            if not isinstance(i, int) or not 0 <= i < len(conv) or conv[i]["role"] != "user":
                errs.append(f"{w}: message_index must point at a user message")
            elif not isinstance(q, str) or not q or q not in conv[i]["content"]:
                errs.append(f"{w}: quote {q!r} is not in message {i}")
        elif label == "unsupported":
            if c.get("quote") is not None or c.get("message_index") is not None:
                errs.append(f"{w}: unsupported cases have quote and message_index null")
        else:
            errs.append(f"{w}: bad label {label!r}")
    return errs


def _profiles() -> dict[str, dict]:
    return {
        row["profile_id"]: row
        for path in sorted((HERE / "relevance" / "raw").glob("*.jsonl"))
        for row in map(json.loads, filter(str.strip, path.read_text(encoding="utf-8").splitlines()))
    }


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv] or sorted(HERE.glob("*/raw/*.jsonl")) + sorted(
        HERE.glob("relevance/extra/*.jsonl")
    )
    profiles = _profiles()
    errors: list[str] = []
    seen: dict[str, str] = {}
    counts = {"profiles": 0, "prompts": 0, "conversations": 0, "cases": 0}
    for path in files:
        kind = path.parent.parent.name
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name}:{n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"{where}: not JSON ({exc})")
                continue
            if path.parent.name == "extra":
                errors += check_extra(row, where, profiles)
                counts["prompts"] += len(row.get("prompts") or [])
                continue
            key = row.get("profile_id") or row.get("conversation_id")
            if key in seen:
                errors.append(f"{where}: id {key} also at {seen[key]}")
            seen[str(key)] = where
            if kind == "relevance":
                errors += check_relevance(row, where)
                counts["profiles"] += 1
                counts["prompts"] += len(row.get("prompts") or [])
            else:
                errors += check_verification(row, where)
                counts["conversations"] += 1
                counts["cases"] += len(row.get("cases") or [])
    for e in errors:
        print(e)
    print(json.dumps(counts), f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
