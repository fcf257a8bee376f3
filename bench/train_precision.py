"""Cross-encoder training speed in fp32 and under bfloat16 autocast (`tailor train --precision`).

    .venv/bin/python bench/train_precision.py [--examples 320] [--rounds 2] [--json OUT]

Trains the all-MiniLM-L6-v2 cross-encoder (as `tailor train` does: batch 32, max length 128,
AdamW) on (attribute, user messages) pairs from the everyday verification corpus's training
split, alternating fp32 and bf16 rounds so both see the same machine state, and reports
examples per second for each. Needs the train extra (torch). Only speed: no model is kept.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from common import report

from service.config import REPO_ROOT
from service.training.crossencoder import CrossEncoder, default_base_model

BATCH = 32


def pairs(n: int) -> list[tuple[str, str]]:
    path = REPO_ROOT / "datasets" / "everyday" / "verification" / "train.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines()[:n]:
        row = json.loads(line)
        said = " ".join(m["content"] for m in row["conversation"] if m["role"] == "user")
        out.append((row["attribute"], said))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import torch

    encoder = CrossEncoder(default_base_model(), max_length=128)
    optimizer = torch.optim.AdamW(encoder.model.parameters(), lr=2e-5)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    data = pairs(args.examples)
    rates: dict[str, list[float]] = {"fp32": [], "bf16": []}
    encoder.model.train()
    for _ in range(args.rounds):
        for precision in ("fp32", "bf16"):
            started = time.perf_counter()
            for start in range(0, len(data), BATCH):
                batch = data[start : start + BATCH]
                autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
                with autocast:
                    logits = encoder.logits(batch).float()
                loss = loss_fn(logits, torch.ones(len(batch)))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            rates[precision].append(round(len(data) / (time.perf_counter() - started), 1))
    results = {
        "examples_per_second": rates,
        "bf16_over_fp32": round(
            sum(rates["bf16"]) / len(rates["bf16"]) / (sum(rates["fp32"]) / len(rates["fp32"])), 2
        ),
    }
    report(results, args.json, examples=len(data), batch=BATCH, threads=torch.get_num_threads())


if __name__ == "__main__":
    main()
