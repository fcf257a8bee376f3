"""Build the extraction corpus's split files and statistics from the raw writer files.

    python3 datasets/extraction/build.py

raw/<writer>_<split>.jsonl (one chat per line, see GUIDELINE.md) ->
- train.jsonl, val.jsonl, test.jsonl: rows in the format `tailor eval extraction` reads
  ({id, source, conversation, gold_attributes, gold_person: "third", partner_attributes: []}),
  keeping the full `facts` and `traps` for training and for reading;
- verification_<split>.jsonl: the same chats as verifier cases, in the format
  `tailor eval verification` and the verifier's training read (every fact `supported` with its
  quote; every trap `unsupported`; `category` is the fact's kind or the trap's kind);
- stats.json: counts per split, domain, register, category, kind, messages, traps.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPLITS = ("train", "val", "test")


def rows_of(split: str) -> list[dict]:
    out = []
    for path in sorted((HERE / "raw").glob(f"*_{split}.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                chat = json.loads(line)
                out.append(
                    {
                        "id": chat["chat_id"],
                        "source": "tailor_extraction",
                        "domain": chat["domain"],
                        "register": chat["register"],
                        "conversation": chat["conversation"],
                        "gold_attributes": [f["text"] for f in chat["facts"]],
                        "gold_person": "third",
                        "partner_attributes": [],
                        "facts": chat["facts"],
                        "traps": chat["traps"],
                        "templated": bool(chat.get("templated", False)),
                    }
                )
    return out


def verification_cases(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        cases = [
            {"attribute": f["text"], "label": "supported", "category": f["kind"],
             "message_index": f["message_index"], "quote": f["quote"]}
            for f in r["facts"]
        ] + [
            {"attribute": t["text"], "label": "unsupported", "category": t["kind"],
             "message_index": None, "quote": None}
            for t in r["traps"]
        ]
        for k, case in enumerate(cases, 1):
            out.append(
                {"id": f"{r['id']}-{k}", "conversation_id": r["id"],
                 "conversation": r["conversation"], **case, "domain": r["domain"],
                 "register": r["register"], "source": "tailor-extraction"}
            )
    return out


def main() -> None:
    stats: dict = {"splits": {}}
    for split in SPLITS:
        rows = rows_of(split)
        (HERE / f"{split}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
        cases = verification_cases(rows)
        (HERE / f"verification_{split}.jsonl").write_text(
            "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), encoding="utf-8"
        )
        facts = [f for r in rows for f in r["facts"]]
        stats["splits"][split] = {
            "chats": len(rows),
            "facts": len(facts),
            "nothing_to_store": sum(not r["facts"] for r in rows),
            "traps": sum(len(r["traps"]) for r in rows),
            "templated_chats": sum(r["templated"] for r in rows),
            "messages": sum(len(r["conversation"]) for r in rows),
            "user_words": sum(
                len(m["content"].split())
                for r in rows
                for m in r["conversation"]
                if m["role"] == "user"
            ),
            "writers": dict(Counter(r["id"].split("-")[0] for r in rows)),
        }
    every = [r for s in SPLITS for r in rows_of(s)]
    facts = [f for r in every for f in r["facts"]]
    stats["total"] = {
        "chats": len(every),
        "facts": len(facts),
        "nothing_to_store": sum(not r["facts"] for r in every),
        "templated_share": round(sum(r["templated"] for r in every) / max(len(every), 1), 4),
        "facts_per_chat_with_facts": round(
            len(facts) / max(sum(bool(r["facts"]) for r in every), 1), 2
        ),
    }
    stats["domains"] = dict(Counter(r["domain"] for r in every).most_common())
    stats["registers"] = dict(Counter(r["register"] for r in every).most_common())
    stats["messages_per_chat"] = dict(sorted(Counter(len(r["conversation"]) for r in every).items()))
    stats["fact_categories"] = dict(Counter(f["category"] for f in facts).most_common())
    stats["fact_kinds"] = dict(Counter(f["kind"] for f in facts).most_common())
    stats["trap_kinds"] = dict(
        Counter(t["kind"] for r in every for t in r["traps"]).most_common()
    )
    (HERE / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(stats["total"]), json.dumps({s: v["chats"] for s, v in stats["splits"].items()}))


if __name__ == "__main__":
    main()
