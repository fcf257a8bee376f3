"""Deterministic train batches for hand labeling: whole conversations, chosen by persona-set
hash so that a persona set never straddles batches. Run from the repo root:
    python datasets/verification_train/make_batches.py
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "shared" / "data" / "verification" / "spc.jsonl"
OUT = Path(__file__).resolve().parent
CONVERSATIONS_PER_BATCH = 40


def main() -> None:
    by_conv: dict[str, list[dict[str, object]]] = defaultdict(list)
    for line in SRC.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        by_conv[row["id"].rsplit("-", 1)[0]].append(row)
    by_persona: dict[str, list[str]] = defaultdict(list)
    for conv_id, rows in by_conv.items():
        gold = sorted(str(r["attribute"]) for r in rows if r["label"] == "supported")
        key = hashlib.sha1("\n".join(gold).encode()).hexdigest()
        for r in rows:
            r["conversation_id"] = conv_id
            r["persona_key"] = key
        by_persona[key].append(conv_id)
    keys = sorted(by_persona)
    random.Random(7).shuffle(keys)
    # One conversation per persona set, so each batch covers many different personas.
    conv_ids = [by_persona[k][0] for k in keys]
    for i, name in enumerate("abcdefghij"):
        chosen = conv_ids[i * CONVERSATIONS_PER_BATCH : (i + 1) * CONVERSATIONS_PER_BATCH]
        with (OUT / f"batch_{name}.jsonl").open("w", encoding="utf-8") as fh:
            for conv_id in chosen:
                for row in by_conv[conv_id]:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
