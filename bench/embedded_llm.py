"""Embedded LLM generation speed: through the service's supervised child process, and the
same llama.cpp build called in a process of its own with nothing around it (the in-process
way the service used to run it), on this machine's CPU.

    .venv/bin/python bench/embedded_llm.py [--runs 5] [--tokens 128] [--threads 1]

Each run generates ``--tokens`` tokens greedily for the prompt of docs/embedded-llm.md (the
end-of-turn token cannot end it early: the story prompt runs long). The direct measurement
runs in a subprocess so that a native crash (llama.cpp's AMX path on Sapphire Rapids) is
reported as such rather than ending the bench. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from common import cpu_model

from service.llm.embedded import EmbeddedLLMClient, default_model_path, describe_exit

PROMPT = "Write a long story about people who enjoy hiking in the mountains."

DIRECT = """
import json, sys, time, llama_cpp
model, threads, tokens, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = llama_cpp.Llama(model_path=model, n_ctx=2048, n_threads=threads,
                      n_threads_batch=threads, seed=1234, verbose=False)
rates = []
for _ in range(runs):
    llm.reset()
    started = time.perf_counter()
    out = llm.create_chat_completion([{"role": "user", "content": sys.argv[5]}],
                                     max_tokens=tokens, temperature=0.0)
    rates.append(out["usage"]["completion_tokens"] / (time.perf_counter() - started))
print(json.dumps(rates))
"""


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        [],
    )
    return sorted(f for f in flags if f.startswith(("amx", "avx512f", "avx2")))


async def through_child(runs: int, tokens: int, threads: int) -> dict[str, object]:
    client = EmbeddedLLMClient(default_model_path(), threads=threads, deadline_s=120.0)
    try:
        await client.start()
        rates = []
        for _ in range(runs):
            started = time.perf_counter()
            done = await client.complete(
                [{"role": "user", "content": PROMPT}], max_tokens=tokens, temperature=0.0
            )
            rates.append(done.completion_tokens / (time.perf_counter() - started))
        return {"tok_per_s": [round(r, 1) for r in rates], "system_info": client.system_info}
    finally:
        await client.aclose()


def direct(runs: int, tokens: int, threads: int) -> dict[str, object]:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            DIRECT,
            str(default_model_path()),
            str(threads),
            str(tokens),
            str(runs),
            PROMPT,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        return {"crashed": describe_exit(proc.returncode)}
    return {"tok_per_s": [round(r, 1) for r in json.loads(proc.stdout.splitlines()[-1])]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    report = {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "threads": args.threads,
        "tokens": args.tokens,
        "child_process": asyncio.run(through_child(args.runs, args.tokens, args.threads)),
        "direct_in_one_process": direct(args.runs, args.tokens, args.threads),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
