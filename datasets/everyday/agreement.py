"""Agreement between the writers' labels and the blind second reading (standard library only).

    python3 datasets/everyday/agreement.py

Reads review/{verification,relevance}_second.jsonl (the second reader saw only the
conversation and the attribute, or the prompt and the facts) and the built split files.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent


# Later writing rounds, each read blind by a fresh reader: (key in agreement.json, blind sample,
# reading, the writers' labels at sampling time where some were adjudicated since).
LATER_VERIFICATION_ROUNDS = [
    # writers I-K: 168 new cases
    ("verification_second_round", "verification_blind_3.jsonl", "verification_third_reading.jsonl",
     None),
    # writers N-R: 300 new cases; two adjudicated to the reader's label afterwards
    ("verification_third_round", "verification_blind_4.jsonl", "verification_fourth_reading.jsonl",
     "verification_fourth_first.jsonl"),
    # writers S-W: 300 new cases; one adjudicated
    ("verification_fourth_round", "verification_blind_5.jsonl", "verification_fifth_reading.jsonl",
     "verification_fifth_first.jsonl"),
    # writers Z1-Z5: 300 new cases; two adjudicated
    ("verification_fifth_round", "verification_blind_6.jsonl", "verification_sixth_reading.jsonl",
     "verification_sixth_first.jsonl"),
    # writers AA-AD (terse facts next to a request): 300 new cases; none adjudicated
    ("verification_sixth_round", "verification_blind_7.jsonl", "verification_seventh_reading.jsonl",
     "verification_seventh_first.jsonl"),
    # writers AE-AH (hard categories, long and multi-turn): 1,406 new cases; none adjudicated
    ("verification_seventh_round", "verification_blind_8.jsonl",
     "verification_eighth_reading.jsonl", "verification_eighth_first.jsonl"),
    # writers AI-AL: 1,644 new cases; read twice, the second time by a reader that opened
    # nothing but the guideline
    ("verification_eighth_round", "verification_blind_9.jsonl", "verification_ninth_reading.jsonl",
     "verification_ninth_first.jsonl"),
    ("verification_eighth_round_strict", "verification_blind_9b.jsonl",
     "verification_ninth_reading_b.jsonl", "verification_ninth_first_b.jsonl"),
    # writers AM-AP: 1,074 new cases; read by a reader that opened nothing but the guideline
    ("verification_ninth_round", "verification_blind_10.jsonl",
     "verification_tenth_reading.jsonl", "verification_tenth_first.jsonl"),
    # writers AQ-AT: 1,076 new cases; read by a reader that opened nothing but the guideline
    ("verification_tenth_round", "verification_blind_11.jsonl",
     "verification_eleventh_reading.jsonl", "verification_eleventh_first.jsonl"),
    # writers AU-AX (the other speaker's own facts): 1,107 new cases; read by a reader that
    # opened nothing but the guideline
    ("verification_eleventh_round", "verification_blind_12.jsonl",
     "verification_twelfth_reading.jsonl", "verification_twelfth_first.jsonl"),
]  # fmt: skip
LATER_RELEVANCE_ROUNDS = [
    # writers L-M: 160 of the 448 prompts added to existing profiles
    ("relevance_second_round", "relevance_blind_extra.jsonl", "relevance_extra_reading.jsonl"),
    # writers X-Y: 160 prompts of 80 new profiles
    ("relevance_third_round", "relevance_blind_3.jsonl", "relevance_third_round_reading.jsonl"),
    # writers RA-RB: 160 prompts of 80 new profiles
    ("relevance_fourth_round", "relevance_blind_4.jsonl", "relevance_fourth_round_reading.jsonl"),
    # writers RC-RF: 200 prompts of 160 new profiles
    ("relevance_fifth_round", "relevance_blind_5.jsonl", "relevance_fifth_round_reading.jsonl"),
    # writers RG-RJ: 200 prompts of 160 new profiles
    ("relevance_sixth_round", "relevance_blind_6.jsonl", "relevance_sixth_round_reading.jsonl"),
    # writers RK-RN: 200 prompts of 160 new profiles (plain, short facts; ordinary people)
    ("relevance_seventh_round", "relevance_blind_7.jsonl", "relevance_seventh_round_reading.jsonl"),
    # writers RO-RS: 200 prompts of 160 new profiles
    ("relevance_eighth_round", "relevance_blind_8.jsonl", "relevance_eighth_round_reading.jsonl"),
    # every validation and test prompt no earlier sample had read: 3,336 prompts, all rounds
    ("relevance_full_reading", "relevance_blind_full.jsonl", "relevance_full_reading.jsonl"),
    # every training prompt no earlier sample had read: 8,157 prompts, all rounds
    ("relevance_train_reading", "relevance_blind_train.jsonl", "relevance_train_reading.jsonl"),
]


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _kappa(pairs: list[tuple[bool, bool]]) -> float:
    n = len(pairs)
    po = sum(a == b for a, b in pairs) / n
    pa = sum(a for a, _ in pairs) / n
    pb = sum(b for _, b in pairs) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    return (po - pe) / (1 - pe) if pe < 1 else 1.0


def _as_built(sampled: dict) -> dict:
    """A blind sample's row (prompt, facts) in the built corpus's shape."""
    return {"prompt": sampled["prompt"], "attributes": sampled["facts"]}


def _relevance_agreement(firsts: dict, blind: dict, readings: list[dict]) -> dict:
    pairs, exact, empty_agree, empty_n, compared = [], 0, 0, 0, 0
    for r in readings:
        row = firsts.get(r["id"])
        if row is None or row["prompt"] != blind[r["id"]]["prompt"]:
            continue
        compared += 1
        a, b = set(row["relevant"]), set(r["relevant"])
        exact += a == b
        pairs += [(i in a, i in b) for i in range(len(row["attributes"]))]
        if not a:
            empty_n += 1
            empty_agree += not b
    tp = sum(a and b for a, b in pairs)
    return {
        "prompts": compared,
        "facts": len(pairs),
        "fact_agreement": round(sum(a == b for a, b in pairs) / len(pairs), 4),
        "cohen_kappa": round(_kappa(pairs), 4),
        "f1_between_readers": round(
            2 * tp / (sum(a for a, _ in pairs) + sum(b for _, b in pairs)), 4
        ),
        "exact_same_set": round(exact / compared, 4),
        "nothing_applies_agreement": round(empty_agree / empty_n, 4) if empty_n else None,
        "corpus_selected": sum(a for a, _ in pairs),
        "reader_selected": sum(b for _, b in pairs),
    }


def _verification_round(
    first: dict, blind_name: str, reading_name: str, written: str | None = None
) -> dict:
    """A blind reading of a writing round's cases against the writers' labels. Cases are
    matched by their conversation and attribute, not by id (writer J renumbered some
    conversations after its sample was drawn); ``written`` holds the writers' labels as they
    were at sampling time, where some were adjudicated since."""
    by_text = {(json.dumps(r["conversation"]), r["attribute"]): r for r in first.values()}
    blind = {r["id"]: r for r in _rows(HERE / "review" / blind_name)}
    at_sampling = (
        {r["id"]: r["label"] for r in _rows(HERE / "review" / written)} if written else {}
    )
    matched = []
    for r in _rows(HERE / "review" / reading_name):
        b = blind[r["id"]]
        row = by_text.get((json.dumps(b["conversation"]), b["attribute"]))
        if row is not None:
            # keyed by the sample's id: a round sampled before it was built numbers its
            # cases from 0, the built rows from 1
            label = at_sampling.get(r["id"], row["label"])
            matched.append((row, label == "supported", r["label"] == "supported"))
    pairs = [(a, b) for _, a, b in matched]
    by_cat: Counter = Counter()
    agree_cat: Counter = Counter()
    for row, a, b in matched:
        by_cat[row["category"]] += 1
        agree_cat[row["category"]] += a == b
    return {
        "n": len(pairs),
        "cases_changed_since_sampling": len(blind) - len(pairs),
        "agreement": round(sum(a == b for a, b in pairs) / len(pairs), 4),
        "cohen_kappa": round(_kappa(pairs), 4),
        "by_category": {c: round(agree_cat[c] / by_cat[c], 3) for c in sorted(by_cat)},
        "disagreements": [row["id"] for row, a, b in matched if a != b],
    }


def main() -> None:
    first = {
        r["id"]: r
        for s in ("train", "val", "test")
        for r in _rows(HERE / "verification" / f"{s}.jsonl")
    }
    # The first round: 324 cases, 27 per category, read blind.
    ver = _verification_round(first, "verification_blind.jsonl", "verification_second.jsonl")
    firsts = {
        r["id"]: r
        for s in ("train", "val", "test")
        for r in _rows(HERE / "relevance" / f"{s}.jsonl")
    }
    # The writers' labels as first written (before the adjudication and the relabel) for the
    # sampled prompts; writers reworked 13 prompts after the sample was drawn, and only rows
    # whose prompt and facts are still what the second reader saw are compared.
    blind = {r["id"]: r for r in _rows(HERE / "review" / "relevance_blind.jsonl")}
    first_written = {
        r["id"]: firsts[r["id"]] | {"relevant": r["relevant"]}
        for r in _rows(HERE / "review" / "relevance_first.jsonl")
        if r["id"] in firsts and firsts[r["id"]]["attributes"] == blind[r["id"]]["facts"]
    }
    rel = _relevance_agreement(
        first_written, blind, _rows(HERE / "review" / "relevance_second.jsonl")
    )
    rel["prompts_changed_since_sampling"] = len(blind) - rel["prompts"]
    out = {"verification": ver, "relevance": rel}
    third = HERE / "review" / "relevance_third.jsonl"
    if third.is_file():
        # A fresh blind reading of 200 other prompts, after the guideline's clarifications and
        # the relabel: an independent check of the final labels.
        blind2 = {r["id"]: r for r in _rows(HERE / "review" / "relevance_blind_2.jsonl")}
        out["relevance_final"] = _relevance_agreement(firsts, blind2, _rows(third))
    for key, blind_name, reading_name, written in LATER_VERIFICATION_ROUNDS:
        if (HERE / "review" / reading_name).is_file():
            out[key] = _verification_round(first, blind_name, reading_name, written=written)
    for key, blind_name, reading_name in LATER_RELEVANCE_ROUNDS:
        if (HERE / "review" / reading_name).is_file():
            sample = {r["id"]: r for r in _rows(HERE / "review" / blind_name)}
            # The writers' labels as first written, where the round kept them: the built
            # labels of its disagreeing prompts were adjudicated afterwards.
            written = HERE / "review" / f"{key}_first.jsonl"
            labels = firsts
            if written.is_file():
                # A round not built yet (relevance/pending/) has no built rows: its sample
                # holds the prompt and facts as written.
                labels = firsts | {
                    r["id"]: firsts.get(r["id"], _as_built(sample[r["id"]]))
                    | {"relevant": r["relevant"]}
                    for r in _rows(written)
                }
            out[key] = _relevance_agreement(labels, sample, _rows(HERE / "review" / reading_name))
    (HERE / "review" / "agreement.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
