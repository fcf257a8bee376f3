"""Validate the raw extraction corpus files (datasets/extraction/raw/*.jsonl).

Usage: python3 datasets/extraction/check.py [files...]   (default: every raw file)
Prints one line per problem and a summary; exits 1 when anything is wrong.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOMAINS = set(
    "food_diet allergies health fitness family_children pets home location_climate commute_car "
    "work_schedule money education languages tech hobbies music film_tv books travel "
    "accessibility lifestyle shopping gardening parenting relationships sleep sports "
    "fashion_beauty cooking social_events".split()
)
REGISTERS = set("terse chatty typos long non_native formal slang back_and_forth".split())
CATEGORIES = set(
    "identity occupation location family pets hobby preference diet health education "
    "possession other".split()
)
KINDS = set("stated passing relation preference implied answer correction".split())
TRAP_KINDS = set(
    "overgeneralization negation someone_else assistant_said hypothetical joke_sarcasm "
    "past_state question unrelated".split()
)
SPLITS = ("train", "val", "test")
ID = re.compile(r"^([A-Za-z0-9]+)-(train|val|test)-(\d{3,4})$")


def norm(text: str) -> str:
    return " ".join(text.split())


def check_chat(row: object, split: str, where: str) -> list[str]:
    errs: list[str] = []
    if not isinstance(row, dict):
        return [f"{where}: not an object"]
    cid = row.get("chat_id")
    m = ID.match(cid) if isinstance(cid, str) else None
    if not m:
        errs.append(f"{where}: chat_id {cid!r} is not <writer>-<split>-<nnn>")
    elif m.group(2) != split:
        errs.append(f"{where}: chat_id {cid} in the {split} file")
    if row.get("split") != split:
        errs.append(f"{where}: split {row.get('split')!r} != file split {split}")
    if row.get("domain") not in DOMAINS:
        errs.append(f"{where}: unknown domain {row.get('domain')!r}")
    if row.get("register") not in REGISTERS:
        errs.append(f"{where}: unknown register {row.get('register')!r}")
    conv = row.get("conversation")
    if not isinstance(conv, list) or not 2 <= len(conv) <= 8:
        return errs + [f"{where}: conversation must be a list of 2-8 messages"]
    for i, msg in enumerate(conv):
        want = "user" if i % 2 == 0 else "assistant"
        if not isinstance(msg, dict) or msg.get("role") != want:
            errs.append(f"{where}: message {i} must have role {want}")
        elif not isinstance(msg.get("content"), str) or not msg["content"].strip():
            errs.append(f"{where}: message {i} has no content")
    facts = row.get("facts")
    if not isinstance(facts, list):
        return errs + [f"{where}: facts must be a list"]
    for k, f in enumerate(facts):
        fw = f"{where} fact {k}"
        if not isinstance(f, dict):
            errs.append(f"{fw}: not an object")
            continue
        text = f.get("text")
        if not isinstance(text, str) or not text.startswith("The user") or not text.endswith("."):
            errs.append(f"{fw}: text must start with 'The user' and end with '.': {text!r}")
        if f.get("category") not in CATEGORIES:
            errs.append(f"{fw}: unknown category {f.get('category')!r}")
        if f.get("kind") not in KINDS:
            errs.append(f"{fw}: unknown kind {f.get('kind')!r}")
        idx = f.get("message_index")
        if not isinstance(idx, int) or not 0 <= idx < len(conv) or idx % 2:
            errs.append(f"{fw}: message_index {idx!r} is not a user message")
            continue
        quote = f.get("quote")
        if not isinstance(quote, str) or len(norm(quote)) < 2:
            errs.append(f"{fw}: quote missing")
        elif norm(quote) not in norm(conv[idx].get("content", "")):
            errs.append(f"{fw}: quote {quote!r} is not in message {idx}")
        if "corrects" in f:
            c = f["corrects"]
            if not isinstance(c, int) or not 0 <= c < k:
                errs.append(f"{fw}: corrects must index an earlier fact")
    traps = row.get("traps")
    if not isinstance(traps, list) or not 1 <= len(traps) <= 4:
        errs.append(f"{where}: traps must be a list of 1-4")
    else:
        for k, t in enumerate(traps):
            if not isinstance(t, dict) or t.get("kind") not in TRAP_KINDS:
                errs.append(f"{where} trap {k}: bad kind")
            elif not str(t.get("text", "")).startswith("The user"):
                errs.append(f"{where} trap {k}: text must start with 'The user'")
    return errs


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv] or sorted((HERE / "raw").glob("*.jsonl"))
    errors: list[str] = []
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    facts = 0
    empty = 0
    for path in files:
        split = path.stem.rsplit("_", 1)[-1]
        if split not in SPLITS:
            errors.append(f"{path.name}: file name must end in _train/_val/_test")
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name}:{n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                errors.append(f"{where}: bad JSON ({e})")
                continue
            errors += check_chat(row, split, where)
            cid = row.get("chat_id") if isinstance(row, dict) else None
            if isinstance(cid, str):
                if cid in seen:
                    errors.append(f"{where}: duplicate chat_id {cid}")
                seen.add(cid)
            counts[split] += 1
            fl = row.get("facts") if isinstance(row, dict) else None
            if isinstance(fl, list):
                facts += len(fl)
                empty += not fl
    for e in errors:
        print(e)
    print(f"{sum(counts.values())} chats {dict(counts)}, {facts} facts, {empty} with nothing")
    print(f"{len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
