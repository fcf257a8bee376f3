"""Second reading of the extraction corpus: how far a blind second reader's facts are from the
writers' gold.

    python3 datasets/extraction/agreement.py sample --n 150     # writes review/sample.jsonl
    (a second reader writes review/second_reading.jsonl: {"chat_id", "facts": [{"text",
     "message_index", "quote"}]} for every sampled chat, without seeing the gold)
    .venv/bin/python datasets/extraction/agreement.py score    # writes review/agreement.json

A later writing round is read the same way under its own name, sampled from its writers' chats
in every split (built first, so that its rows are in train/val/test.jsonl):

    python3 datasets/extraction/agreement.py sample --name round2 --writers W8,W9 --per-writer 10
    (second reading in review/round2_second_reading.jsonl)
    .venv/bin/python datasets/extraction/agreement.py score --name round2

Facts are compared the way `tailor eval extraction` compares an extractor with gold: both in
the neutral form, all-MiniLM-L6-v2 cosine >= 0.55, greedy one-to-one. Reported: the second
reader's precision / recall / F1 against the writers (F1 is symmetric in who is "gold"),
agreement on whether a chat has anything to store (with Cohen's kappa), and every unmatched
fact for reading.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REVIEW = HERE / "review"


def _rows(split: str) -> list[dict]:
    path = HERE / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _file(name: str | None, base: str) -> Path:
    """review/<base> for the first reading, review/<name>_<base> for a later round's."""
    return REVIEW / (f"{name}_{base}" if name else base)


def sample(n: int, seed: int, name: str | None, writers: list[str], per_writer: int) -> None:
    rng = random.Random(seed)
    if writers:
        rows = _rows("train") + _rows("val") + _rows("test")
        picked = []
        for writer in writers:
            own = [r for r in rows if r["id"].split("-")[0] == writer]
            picked += rng.sample(own, min(per_writer, len(own)))
    else:
        rows = _rows("val") + _rows("test")
        picked = rng.sample(rows, min(n, len(rows)))
    REVIEW.mkdir(exist_ok=True)
    path = _file(name, "sample.jsonl")
    with path.open("w", encoding="utf-8") as out:
        for r in picked:
            out.write(
                json.dumps(
                    {"chat_id": r["id"], "conversation": r["conversation"]}, ensure_ascii=False
                )
                + "\n"
            )
    print(f"{len(picked)} chats -> {path}")


def score(name: str | None) -> None:
    sys.path.insert(0, str(HERE.parents[1]))
    import numpy as np

    from service.config import Settings
    from service.evaluation.extraction import DEFAULT_THRESHOLD, greedy_match, neutral
    from service.inference.embedder import Embedder

    gold = {r["id"]: r for r in _rows("train") + _rows("val") + _rows("test")}
    second = [
        json.loads(line)
        for line in _file(name, "second_reading.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    embedder = Embedder.load(Settings().embedder_path)
    matched = n_second = n_gold = 0
    both_empty = both_some = only_gold = only_second = 0
    unmatched = []
    for r in second:
        g = [f["text"] for f in gold[r["chat_id"]]["facts"]]
        s = [f["text"] for f in r["facts"]]
        n_gold += len(g)
        n_second += len(s)
        both_empty += not g and not s
        both_some += bool(g) and bool(s)
        only_gold += bool(g) and not s
        only_second += not g and bool(s)
        if g and s:
            a = embedder.encode([neutral(t, "third") for t in s])
            b = embedder.encode([neutral(t, "third") for t in g])
            pairs = greedy_match((a @ b.T).astype(np.float32), DEFAULT_THRESHOLD)
            matched += len(pairs)
            used_s = {i for i, _ in pairs}
            used_g = {j for _, j in pairs}
        else:
            used_s, used_g = set(), set()
        unmatched += [
            {"chat_id": r["chat_id"], "who": "second", "text": t}
            for i, t in enumerate(s)
            if i not in used_s
        ]
        unmatched += [
            {"chat_id": r["chat_id"], "who": "writer", "text": t}
            for j, t in enumerate(g)
            if j not in used_g
        ]
    p = matched / n_second if n_second else 0.0
    rec = matched / n_gold if n_gold else 0.0
    f1 = 2 * p * rec / (p + rec) if p + rec else 0.0
    chats = len(second)
    observed = (both_empty + both_some) / chats
    p_some_g = (both_some + only_gold) / chats
    p_some_s = (both_some + only_second) / chats
    expected = p_some_g * p_some_s + (1 - p_some_g) * (1 - p_some_s)
    kappa = (observed - expected) / (1 - expected) if expected < 1 else 1.0
    result = {
        "chats": chats,
        "writer_facts": n_gold,
        "second_reader_facts": n_second,
        "matched": matched,
        "precision_vs_writer": round(p, 4),
        "recall_vs_writer": round(rec, 4),
        "f1": round(f1, 4),
        "anything_to_store": {
            "both_empty": both_empty,
            "both_some": both_some,
            "only_writer": only_gold,
            "only_second": only_second,
            "agreement": round(observed, 4),
            "kappa": round(kappa, 4),
        },
        "unmatched": unmatched,
    }
    _file(name, "agreement.json").write_text(
        json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    )
    print(json.dumps({k: v for k, v in result.items() if k != "unmatched"}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--n", type=int, default=150)
    s.add_argument("--seed", type=int, default=11)
    s.add_argument("--name", help="a later round's name: review/<name>_sample.jsonl")
    s.add_argument("--writers", default="", help="that round's writers, comma-separated")
    s.add_argument("--per-writer", type=int, default=10)
    sc = sub.add_parser("score")
    sc.add_argument("--name", help="a later round's name, as given to sample")
    args = parser.parse_args()
    if args.cmd == "sample":
        writers = [w for w in args.writers.split(",") if w]
        sample(args.n, args.seed, args.name, writers, args.per_writer)
    else:
        score(args.name)


if __name__ == "__main__":
    main()
