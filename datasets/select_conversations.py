"""Deterministically select whole conversations of verification/spc.jsonl for hand labeling.

Held-apart unit: a *persona group*. Synthetic-Persona-Chat persona sets recur with small
variations (two sets often share 3-4 of their 4-5 sentences), so grouping by the exact sorted
persona set (``persona_key``) is not enough to keep a validation split free of personas seen in
training. A persona group is a connected component of conversations whose User 1 persona sets
(the ``supported`` attributes in the source file) share at least one sentence.

Selection: shuffle the persona groups with ``random.Random(seed)``; walk them in that order and,
from each, take up to ``--per-group`` whole conversations (also chosen with the same RNG) until at
least ``--target-rows`` rows are selected. Every row of a chosen conversation is kept.

Outputs (both deterministic):
  * ``--out``: the unlabeled rows, one per line, with ``conversation_id``, ``persona_key`` and
    ``persona_group`` added and ``label`` renamed to ``source_label``.
  * ``--holdout-out``: every conversation id of the chosen persona groups (labeled or not), one per
    line. Exclude all of them from training to keep the split clean.

Usage:
  python3 datasets/select_conversations.py \\
      --src /work/shared/data/verification/spc.jsonl --seed 13 --target-rows 360 --per-group 3 \\
      --out /tmp/verification_val_unlabeled.jsonl \\
      --holdout-out datasets/verification_val_holdout_conversations.txt
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections import defaultdict
from pathlib import Path


def conversation_id(row_id: str) -> str:
    """``spc-valid-0123-v04`` -> ``spc-valid-0123`` (the ``-vNN`` suffix numbers the pair)."""
    return row_id.rsplit("-", 1)[0]


def persona_key(supported_attributes: list[str]) -> str:
    """sha1 of the conversation's source-``supported`` attributes, sorted and joined by newlines.

    Same definition as ``datasets/verification_train/make_batches.py`` so the keys can be joined.
    """
    payload = "\n".join(sorted(supported_attributes))
    return hashlib.sha1(payload.encode("utf-8"), usedforsecurity=False).hexdigest()


def load(src: Path) -> dict[str, list[dict]]:
    convs: dict[str, list[dict]] = defaultdict(list)
    with src.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            convs[conversation_id(row["id"])].append(row)
    return dict(convs)


def persona_groups(convs: dict[str, list[dict]]) -> dict[str, str]:
    """Map conversation id -> persona group id (union-find over shared User 1 sentences)."""
    parent = {cid: cid for cid in convs}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_owner: dict[str, str] = {}
    for cid in sorted(convs):
        for row in convs[cid]:
            if row["label"] != "supported":
                continue
            owner = first_owner.setdefault(row["attribute"], cid)
            ra, rb = find(owner), find(cid)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

    members: dict[str, list[str]] = defaultdict(list)
    for cid in convs:
        members[find(cid)].append(cid)
    group_of: dict[str, str] = {}
    for cids in members.values():
        sentences = sorted(
            {r["attribute"] for c in cids for r in convs[c] if r["label"] == "supported"}
        )
        payload = json.dumps(sentences, ensure_ascii=False).encode("utf-8")
        gid = hashlib.sha1(payload, usedforsecurity=False).hexdigest()
        for c in cids:
            group_of[c] = gid[:12]
    return group_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=Path("/work/shared/data/verification/spc.jsonl"))
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--target-rows", type=int, default=360)
    ap.add_argument("--per-group", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--holdout-out", type=Path, required=True)
    args = ap.parse_args()

    convs = load(args.src)
    group_of = persona_groups(convs)
    members: dict[str, list[str]] = defaultdict(list)
    for cid in sorted(convs):
        members[group_of[cid]].append(cid)

    rng = random.Random(args.seed)  # noqa: S311 - reproducible sampling, not security
    group_order = sorted(members)
    rng.shuffle(group_order)

    chosen: list[str] = []
    chosen_groups: list[str] = []
    n_rows = 0
    for gid in group_order:
        if n_rows >= args.target_rows:
            break
        cids = list(members[gid])
        rng.shuffle(cids)
        chosen_groups.append(gid)
        for cid in cids[: args.per_group]:
            chosen.append(cid)
            n_rows += len(convs[cid])

    with args.out.open("w", encoding="utf-8") as fh:
        for cid in sorted(chosen):
            rows = sorted(convs[cid], key=lambda r: r["id"])
            pkey = persona_key([r["attribute"] for r in rows if r["label"] == "supported"])
            for r in rows:
                out = {
                    "id": r["id"],
                    "conversation_id": cid,
                    "persona_key": pkey,
                    "persona_group": group_of[cid],
                    "conversation": r["conversation"],
                    "attribute": r["attribute"],
                    "source_label": r["label"],
                    "kind": r["kind"],
                }
                fh.write(json.dumps(out, ensure_ascii=False) + "\n")

    holdout = sorted(c for g in chosen_groups for c in members[g])
    args.holdout_out.write_text("".join(c + "\n" for c in holdout), encoding="utf-8")
    print(
        f"groups={len(members)} chosen_groups={len(chosen_groups)} "
        f"conversations={len(chosen)} rows={n_rows} holdout_conversations={len(holdout)}"
    )
    for gid in chosen_groups:
        picked = sorted(c for c in chosen if group_of[c] == gid)
        print(f"  group {gid}: {len(members[gid])} conversations, picked {', '.join(picked)}")


if __name__ == "__main__":
    main()
