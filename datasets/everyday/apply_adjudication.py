"""Apply review/relevance_adjudicated*.jsonl to the raw relevance files (standard library only).

    python3 datasets/everyday/apply_adjudication.py

An adjudicated row's id is `<profile_id>-qNN` (NN = 1-based prompt position in the profile);
its `relevant` replaces the prompt's, and `kind` follows (`none` when empty; a prompt that was
`none` and now has facts becomes `indirect`, the writers' most common kind, marked in `why`).
`relevance_adjudicated.jsonl` holds the first round's 100 disagreeing prompts,
`relevance_adjudicated_later.jsonl` those of the third to seventh rounds' blind readings,
`relevance_adjudicated_eighth.jsonl` the eighth round's, `relevance_adjudicated_full.jsonl` and
`relevance_adjudicated_train.jsonl` those of the full second reading (validation and test; train). A round written but not yet built sits in
`relevance/pending/` (none does now); the files there are adjudicated in place, like `relevance/raw/`.
Idempotent: running it again changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    decided = {
        r["id"]: r
        for path in sorted((HERE / "review").glob("relevance_adjudicated*.jsonl"))
        for r in map(json.loads, path.open())
    }
    changed = 0
    raw, pending = HERE / "relevance" / "raw", HERE / "relevance" / "pending"
    for path in sorted(raw.glob("*.jsonl")) + sorted(pending.glob("*.jsonl")):
        rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        for profile in rows:
            for j, prompt in enumerate(profile["prompts"]):
                verdict = decided.get(f"{profile['profile_id']}-q{j + 1:02d}")
                if verdict is None or sorted(prompt["relevant"]) == sorted(verdict["relevant"]):
                    continue
                prompt["relevant"] = sorted(verdict["relevant"])
                if not prompt["relevant"]:
                    prompt["kind"] = "none"
                elif prompt["kind"] == "none":
                    prompt["kind"] = "indirect"
                prompt["why"] = f"{prompt.get('why', '')} [adjudicated: {verdict['note']}]".strip()
                changed += 1
        path.write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    print(f"{changed} prompts changed")


if __name__ == "__main__":
    main()
