"""Verifier throughput and latency: PyTorch fp32 one request at a time (the naive baseline),
ONNX fp32 one request at a time, and ONNX int8 behind the shared micro-batcher.

    .venv/bin/python bench/verifier_throughput.py [--requests 320] [--callers 32]
        [--provider cpu|cuda] [--json OUT]

Each request is one (attribute, window) pair taken from the hand-checked validation
conversations (real lengths: median ~40 tokens). "batch 1" = one caller sending requests
back to back; "32 callers" = that many concurrent callers sharing the model. Prints a Markdown
table and, with --json, writes the raw figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import onnx

from service.config import REPO_ROOT, available_cpus
from service.evaluation.verification import load_rows
from service.inference.batcher import MicroBatcher
from service.inference.derive import cpu_graph, fp16_to_fp32
from service.inference.pair_classifier import PairClassifier
from service.pipeline.windows import user_windows

Pair = tuple[str, str]


def workload(n: int) -> list[Pair]:
    rows = load_rows(REPO_ROOT / "datasets" / "verification_val_checked.jsonl")
    pairs = [(r["attribute"], w.text) for r in rows for w in user_windows(r["conversation"])]
    return [pairs[i % len(pairs)] for i in range(n)]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


async def drive(
    call: Callable[[Pair], Awaitable[object]], pairs: list[Pair], callers: int
) -> dict[str, float]:
    latencies: list[float] = []
    queue = list(reversed(pairs))

    async def caller() -> None:
        while queue:
            pair = queue.pop()
            started = time.perf_counter()
            await call(pair)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    wall = time.perf_counter() - started
    return {
        "pairs_per_s": round(len(pairs) / wall, 1),
        "p50_ms": round(percentile(latencies, 50) * 1000, 2),
        "p95_ms": round(percentile(latencies, 95) * 1000, 2),
        "n": len(pairs),
    }


def one_at_a_time(score: Callable[[list[Pair]], object]) -> Callable[[Pair], Awaitable[object]]:
    """A service with no batching: each request runs the model on its own pair, in turn."""
    lock = threading.Lock()

    def run(pair: Pair) -> object:
        with lock:
            return score([pair])

    async def call(pair: Pair) -> object:
        return await asyncio.to_thread(run, pair)

    return call


def torch_scorer(model_dir: Path, threads: int) -> Callable[[list[Pair]], object]:
    """The verifier's architecture in PyTorch fp32: the base checkpoint with a one-logit head.
    Only fp16 ONNX weights ship, so this times the same computation, not the same scores."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from service.training.crossencoder import default_base_model

    torch.set_num_threads(threads)
    model = AutoModelForSequenceClassification.from_pretrained(
        str(default_base_model()), num_labels=1, local_files_only=True
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)

    def score(pairs: list[Pair]) -> object:
        enc = tokenizer(
            [p[0] for p in pairs],
            [p[1] for p in pairs],
            truncation=True,
            max_length=128,
            padding=True,
            return_tensors="pt",
        )
        with torch.inference_mode():
            return torch.sigmoid(model(**enc).logits).numpy()

    return score


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--callers", type=int, default=32)
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "verifier"))
    parser.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--json")
    args = parser.parse_args()
    model_dir = Path(args.model)
    threads = available_cpus()
    cache = Path(tempfile.gettempdir()) / "tailor-bench-cache"
    pairs = workload(args.requests)
    results: dict[str, dict[str, dict[str, float]]] = {}

    # An fp32 ONNX directory beside the shipped fp16 one, for the (b) row.
    fp32_dir = cache / "verifier-fp32"
    fp32_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tailor.json"):
        (fp32_dir / name).write_bytes((model_dir / name).read_bytes())
    onnx.save(fp16_to_fp32(onnx.load(str(model_dir / "model.fp16.onnx"))), fp32_dir / "model.onnx")
    cpu_graph(model_dir, cache)  # derive the int8 graph outside the timed part

    configs: list[tuple[str, Callable[[], Callable[[Pair], Awaitable[object]]]]] = []
    if args.provider == "cpu":
        configs.append(
            (
                "(a) PyTorch fp32, one request at a time",
                lambda: one_at_a_time(torch_scorer(model_dir, threads)),
            )
        )
        onnx32 = PairClassifier.from_graph(fp32_dir, fp32_dir / "model.onnx", threads=threads)
        configs.append(
            ("(b) ONNX fp32, one request at a time", lambda: one_at_a_time(onnx32.score))
        )
    classifier = PairClassifier.load(
        model_dir, provider=args.provider, threads=threads, cache_dir=cache
    )
    label = (
        "(c) ONNX int8, micro-batched"
        if args.provider == "cpu"
        else "(c) ONNX fp16 CUDA, micro-batched"
    )
    batcher = MicroBatcher(classifier, name="bench")
    await batcher.start()

    async def batched(pair: Pair) -> object:
        return await batcher.submit([pair])

    configs.append((label, lambda: batched))

    if args.provider == "cpu":
        # The same batcher over the fp32 graph: what int8 buys on top of batching.
        batcher32 = MicroBatcher(onnx32, name="bench-fp32")
        await batcher32.start()

        async def batched32(pair: Pair) -> object:
            return await batcher32.submit([pair])

        configs.append(("(d) ONNX fp32, micro-batched", lambda: batched32))

    for name, make in configs:
        call = make()
        await call(pairs[0])  # warm-up
        results[name] = {
            "batch 1": await drive(call, pairs[: max(32, args.requests // 4)], 1),
            f"{args.callers} callers": await drive(call, pairs, args.callers),
        }
    await batcher.aclose()
    if args.provider == "cpu":
        await batcher32.aclose()

    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs ({threads} used), "
        f"{platform.python_implementation()} {platform.python_version()}"
    )
    print(f"machine: {machine}; provider: {args.provider}; requests: {args.requests}")
    print(
        f"| configuration | batch 1 pairs/s | p50 ms | p95 ms | {args.callers} callers pairs/s "
        "| p50 ms | p95 ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        one, many = r["batch 1"], r[f"{args.callers} callers"]
        print(
            f"| {name} | {one['pairs_per_s']} | {one['p50_ms']} | {one['p95_ms']} | "
            f"{many['pairs_per_s']} | {many['p50_ms']} | {many['p95_ms']} |"
        )
    baseline = next(iter(results.values()))[f"{args.callers} callers"]["pairs_per_s"]
    best = results[label][f"{args.callers} callers"]["pairs_per_s"]
    print(
        f"speed-up of (c) over the first row under {args.callers} callers: {best / baseline:.1f}x"
    )
    if args.json:
        report = json.dumps({"machine": machine, "results": results}, indent=2)
        await asyncio.to_thread(Path(args.json).write_text, report)


if __name__ == "__main__":
    asyncio.run(main())
