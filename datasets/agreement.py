"""Agreement between the source labels and the hand labels of verification_val_checked.jsonl.

Reports overall agreement (share of rows where ``label == source_label``) and, per ``kind``, the
share of rows hand-labeled ``supported``:
  * user_fact (= every source-``supported`` row): how many the user actually states or implies;
  * partner_fact: how many are also true of the user by their own words;
  * other_user_fact: how many happen to be true of this user.

Usage:
  python3 datasets/agreement.py [datasets/verification_val_checked.jsonl]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def pct(num: int, den: int) -> str:
    return f"{num}/{den} = {100 * num / den:.1f}%" if den else "n/a"


def main() -> None:
    default = Path(__file__).with_name("verification_val_checked.jsonl")
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]

    agree = sum(1 for r in rows if r["label"] == r["source_label"])
    convs = {r["conversation_id"] for r in rows}
    print(f"rows: {len(rows)} in {len(convs)} conversations")
    print(f"source labels: {dict(Counter(r['source_label'] for r in rows))}")
    print(f"hand labels:   {dict(Counter(r['label'] for r in rows))}")
    print(f"overall agreement (hand label == source label): {pct(agree, len(rows))}")

    print("hand-labeled supported, per kind:")
    for kind in ("user_fact", "partner_fact", "other_user_fact"):
        sub = [r for r in rows if r["kind"] == kind]
        sup = sum(1 for r in sub if r["label"] == "supported")
        print(f"  {kind:16s} {pct(sup, len(sub))}")

    src_sup = [r for r in rows if r["source_label"] == "supported"]
    src_uns = [r for r in rows if r["source_label"] == "unsupported"]
    kept = sum(1 for r in src_sup if r["label"] == "supported")
    flipped = sum(1 for r in src_uns if r["label"] == "supported")
    print(f"source-supported hand-labeled supported:   {pct(kept, len(src_sup))}")
    print(f"source-unsupported hand-labeled supported: {pct(flipped, len(src_uns))}")

    hand_sup = [r for r in rows if r["label"] == "supported"]
    from_partner = sum(1 for r in hand_sup if r["kind"] != "user_fact")
    share = pct(from_partner, len(hand_sup))
    print(f"hand-supported rows whose source kind is not user_fact: {share}")
    clear = [r for r in rows if not r["note"].startswith("borderline")]
    clear_agree = sum(1 for r in clear if r["label"] == r["source_label"])
    print(f"rows marked borderline in the note: {len(rows) - len(clear)}")
    print(f"agreement without the borderline rows: {pct(clear_agree, len(clear))}")


if __name__ == "__main__":
    main()
