"""Relevance models on the held-out PersonaLens users, in both attribute forms.

    .venv/bin/python bench/relevance_forms.py --model models/relevance [--model OTHER_DIR ...]

The held-out users are the training split's validation users (service.training.run); the
statement form rewrites every attribute with the same seeded templates as training
(``as_statement_rows``, seed 13). Each model is scored as the service selects and as ``tailor
eval relevance`` scores it (``service.evaluation.commands.eval_relevance_rows``): its adapter's
shortlist and combined score when its folder has one, its served CPU graph, its own calibrated
threshold and cap (``tailor.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from service.config import REPO_ROOT, Settings
from service.evaluation import relevance
from service.evaluation.commands import eval_relevance_rows
from service.training.run import _relevance_split, as_statement_rows

DATA = REPO_ROOT.parent / "shared" / "data" / "relevance" / "personalens.jsonl"
KEYS = ("precision", "recall", "f1", "selection_rate", "gold_rate")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, action="append", required=True)
    args = parser.parse_args()
    _, val = _relevance_split(relevance.load_rows(DATA))
    forms = {"source": val, "statements": as_statement_rows(val, 13)}
    settings = Settings()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for directory in args.model:
        out[str(directory)] = {
            form: {
                k: v
                for k, v in eval_relevance_rows(settings, rows, directory.resolve()).items()
                if k in KEYS
            }
            for form, rows in forms.items()
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
