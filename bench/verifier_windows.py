"""How the verifier's input form changes its verdicts on extraction candidates.

    .venv/bin/python bench/verifier_windows.py [--rows 60]

For the first ``--rows`` conversations of each extraction dev file, the rule extractor's
grounded candidates are scored by the shipped verifier (int8 CPU graph, the served one) in three
forms, and the share judged supported is printed for each:
1. the candidate as stored (third person) against the whole cited message (window);
2. its first-person form against the whole message;
3. its first-person form against the message cut around the quote (what the service does,
   service.pipeline.verify.candidate_pairs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from service.config import REPO_ROOT, available_cpus
from service.evaluation.batching import score_in_sorted_batches
from service.inference.pair_classifier import PairClassifier
from service.pipeline.extraction import RuleExtractor, grounded
from service.pipeline.verify import candidate_pairs, first_person
from service.pipeline.windows import user_windows

DATA = REPO_ROOT.parent / "shared" / "data" / "extraction"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=60)
    parser.add_argument("--cache", type=Path, default=Path(".tailor/onnx-cache"))
    args = parser.parse_args()
    verifier = PairClassifier.load(
        REPO_ROOT / "models" / "verifier",
        provider="cpu",
        threads=available_cpus(),
        cache_dir=args.cache,
    )
    extractor = RuleExtractor()
    results = {}
    for name in ("spc", "prefeval_implicit"):
        lines = (DATA / f"{name}.jsonl").read_text().splitlines()[: args.rows]
        forms: dict[str, list[tuple[str, str]]] = {"third_message": [], "first_message": []}
        quote: list[tuple[str, str]] = []
        for line in lines:
            conversation = json.loads(line)["conversation"]
            windows = {w.message_index: w.text for w in user_windows(conversation)}
            candidates = grounded(conversation, extractor.extract_sync(conversation))
            for c in candidates:
                forms["third_message"].append((c.text, windows[c.message_index]))
                forms["first_message"].append((first_person(c.text), windows[c.message_index]))
            quote += candidate_pairs(conversation, candidates)
        forms["first_quote"] = quote
        results[name] = {"rows": len(lines), "candidates": len(quote)} | {
            form: round(
                float(
                    np.mean(score_in_sorted_batches(verifier.score, pairs) >= verifier.threshold)
                ),
                3,
            )
            for form, pairs in forms.items()
        }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
