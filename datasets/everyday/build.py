"""Build the everyday corpus files from the writers' raw files (standard library only).

    python3 datasets/everyday/build.py

Writes, next to this file:
- relevance/{train,val,test}.jsonl: one row per prompt, in the format `tailor eval relevance`
  reads: {"id", "profile_id", "prompt", "attributes": [str], "relevant": [int], "domain",
  "kind", "attribute_domains": [str], "source": "tailor-everyday"};
- verification/{train,val,test}.jsonl: one row per case, in the format `tailor eval
  verification` reads: {"id", "conversation_id", "conversation", "attribute", "label",
  "category", "domain", "register", "message_index", "quote", "source": "tailor-everyday"};
- stats.json: the counts the datasheet quotes.
Rows keep the writers' order; ids are stable.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPLITS = ("train", "val", "test")
# The writers named some registers in their own words; one name each here.
REGISTERS = {
    "multi-turn": "multi_turn",
    "emoji/slang": "emoji_slang",
    "slang": "emoji_slang",
    "non-native": "non_native",
    "typos/lowercase": "typos_lowercase",
    "lowercase_typos": "typos_lowercase",
    "lowercase": "typos_lowercase",
    "typos": "typos_lowercase",
    "long_buried": "long",
}


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def build_relevance() -> dict:
    out: dict[str, list[dict]] = defaultdict(list)
    stats: dict = {"profiles": Counter(), "prompts": Counter(), "none_prompts": Counter()}
    fact_domains: Counter = Counter()
    prompt_domains: Counter = Counter()
    kinds: Counter = Counter()
    relevant_per_prompt: Counter = Counter()
    writers: Counter = Counter()
    extra: dict[str, list[dict]] = defaultdict(list)
    for path in sorted((HERE / "relevance" / "extra").glob("*.jsonl")):
        for row in _rows(path):
            extra[row["profile_id"]] += row["prompts"]
    for path in sorted((HERE / "relevance" / "raw").glob("*.jsonl")):
        writer = path.stem.split("_")[0]
        for profile in _rows(path):
            if extra.get(profile["profile_id"]):
                assert profile["split"] != "test", "extra prompts for a test profile"
                profile["prompts"] = profile["prompts"] + extra[profile["profile_id"]]
            split = profile["split"]
            stats["profiles"][split] += 1
            writers[writer] += 1
            texts = [f["text"] for f in profile["facts"]]
            domains = [f["domain"] for f in profile["facts"]]
            fact_domains.update(domains)
            for j, p in enumerate(profile["prompts"]):
                out[split].append(
                    {
                        "id": f"{profile['profile_id']}-q{j + 1:02d}",
                        "profile_id": profile["profile_id"],
                        "prompt": p["prompt"],
                        "attributes": texts,
                        "relevant": sorted(p["relevant"]),
                        "domain": p["domain"],
                        "kind": p["kind"],
                        "attribute_domains": domains,
                        "source": "tailor-everyday",
                    }
                )
                stats["prompts"][split] += 1
                stats["none_prompts"][split] += not p["relevant"]
                prompt_domains[p["domain"]] += 1
                kinds[p["kind"]] += 1
                relevant_per_prompt[len(p["relevant"])] += 1
    for split in SPLITS:
        with (HERE / "relevance" / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            for row in out[split]:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    pairs = {s: sum(len(r["attributes"]) for r in out[s]) for s in SPLITS}
    gold = {s: sum(len(r["relevant"]) for r in out[s]) for s in SPLITS}
    return {
        "profiles": dict(stats["profiles"]),
        "prompts": dict(stats["prompts"]),
        "prompts_with_nothing_relevant": dict(stats["none_prompts"]),
        "pairs": pairs,
        "gold_rate": {s: round(gold[s] / max(1, pairs[s]), 4) for s in SPLITS},
        "facts_per_domain": dict(fact_domains.most_common()),
        "prompts_per_domain": dict(prompt_domains.most_common()),
        "kinds": dict(kinds),
        "relevant_per_prompt": dict(sorted(relevant_per_prompt.items())),
        "profiles_per_writer": dict(writers),
    }


def build_verification() -> dict:
    out: dict[str, list[dict]] = defaultdict(list)
    conversations: Counter = Counter()
    categories: dict[str, Counter] = defaultdict(Counter)
    domains: Counter = Counter()
    registers: Counter = Counter()
    for path in sorted((HERE / "verification" / "raw").glob("*.jsonl")):
        for conv in _rows(path):
            split = conv["split"]
            conversations[split] += 1
            named = conv.get("register") or "unspecified"
            register = REGISTERS.get(named, named)
            registers[register] += 1
            for k, case in enumerate(conv["cases"]):
                out[split].append(
                    {
                        "id": f"{conv['conversation_id']}-{k + 1}",
                        "conversation_id": conv["conversation_id"],
                        "conversation": conv["conversation"],
                        "attribute": case["attribute"],
                        "label": case["label"],
                        "category": case["category"],
                        "domain": conv["domain"],
                        "register": register,
                        "message_index": case.get("message_index"),
                        "quote": case.get("quote"),
                        "source": "tailor-everyday",
                    }
                )
                categories[case["category"]][f"{split}/{case['label']}"] += 1
                domains[conv["domain"]] += 1
    for split in SPLITS:
        with (HERE / "verification" / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            for row in out[split]:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {
        "conversations": dict(conversations),
        "cases": {s: len(out[s]) for s in SPLITS},
        "supported": {s: sum(r["label"] == "supported" for r in out[s]) for s in SPLITS},
        "categories": {c: dict(sorted(v.items())) for c, v in sorted(categories.items())},
        "cases_per_domain": dict(domains.most_common()),
        "registers": dict(registers.most_common()),
    }


def leakage() -> dict:
    """Texts that occur in more than one split (prompts; user messages)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for split in SPLITS:
        for row in _rows(HERE / "relevance" / f"{split}.jsonl"):
            seen["p:" + row["prompt"].strip().lower()].add(split)
        for row in _rows(HERE / "verification" / f"{split}.jsonl"):
            for m in row["conversation"]:
                if m["role"] == "user":
                    seen["m:" + m["content"].strip().lower()].add(split)
    shared = [k for k, v in seen.items() if len(v) > 1]
    return {"texts_in_more_than_one_split": len(shared), "examples": shared[:5]}


def main() -> None:
    stats = {"relevance": build_relevance(), "verification": build_verification()}
    stats["leakage"] = leakage()
    (HERE / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({k: stats[k] for k in ("leakage",)}))
    print(json.dumps(stats["relevance"]["prompts"]), json.dumps(stats["verification"]["cases"]))


if __name__ == "__main__":
    main()
