"""Relevance models on the held-out PersonaLens users, in both attribute forms.

    .venv/bin/python bench/relevance_forms.py --model models/relevance [--model OTHER_DIR ...]

The held-out users are the training split's validation users (service.training.run); the
statement form rewrites every attribute with the same seeded templates as training
(``as_statement_rows``, seed 13). Each model is scored through its served int8 CPU graph with
its own calibrated threshold and cap (``tailor.json``; 6 when it has none), as ``tailor eval
relevance`` scores it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from service.config import REPO_ROOT, available_cpus
from service.evaluation import relevance
from service.evaluation.batching import score_in_sorted_batches
from service.inference.pair_classifier import PairClassifier
from service.training.run import RELEVANCE_CAP, _relevance_split, as_statement_rows

DATA = REPO_ROOT.parent / "shared" / "data" / "relevance" / "personalens.jsonl"
KEYS = ("precision", "recall", "f1", "selection_rate")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--cache", type=Path, default=Path(".tailor/onnx-cache"))
    args = parser.parse_args()
    _, val = _relevance_split(relevance.load_rows(DATA))
    forms = {"source": val, "statements": as_statement_rows(val, 13)}
    out = {}
    for directory in args.model:
        model = PairClassifier.load(
            directory, provider="cpu", threads=available_cpus(), cache_dir=args.cache
        )

        cap = int(json.loads((directory / "tailor.json").read_text()).get("cap", RELEVANCE_CAP))

        def score(pairs: Sequence[tuple[str, str]], model: PairClassifier = model) -> NDArray[Any]:
            return score_in_sorted_batches(model.score, pairs)

        out[str(directory)] = {
            form: {
                k: v
                for k, v in relevance.metrics(
                    relevance.pair_scores(rows, score), rows, model.threshold, cap
                ).items()
                if k in KEYS
            }
            for form, rows in forms.items()
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
