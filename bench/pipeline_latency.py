"""Latency of POST /v1/select and POST /v1/turns against a real `tailor serve` process.

    .venv/bin/python bench/pipeline_latency.py [--llm instant|embedded] [--requests 100]
        [--attributes 60] [--json OUT]

The server runs on its embedded defaults (a fresh SQLite file, the shipped models). With
``--llm instant`` it talks to a local OpenAI-compatible stub that answers at once, so the
figures are Tailor's own time (selection, HTTP, database, job enqueue) without LLM time; with
``--llm embedded`` the embedded model writes each reply (``max_tokens`` 64 by default).
A user is seeded with ``--attributes`` PersonaLens attributes (the relevance dev data), and
each request uses a prompt from the same file; requests are sequential (one caller). Turns
queue their extraction job, which the in-process worker runs meanwhile, as in production.
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from common import free_port, percentiles, report, start_tailor, wait_ready
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "relevance" / "personalens.jsonl"


def instant_llm(port: int) -> uvicorn.Server:
    async def chat(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse(
            {
                "id": "x",
                "object": "chat.completion",
                "model": "instant",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "Sure."},
                     "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )  # fmt: skip

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning", lifespan="off"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llm", choices=["instant", "embedded"], default="instant")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--attributes", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    rows = [json.loads(x) for x in DATA.read_text().splitlines() if x.strip()]
    attributes = rows[0]["attributes"][: args.attributes]
    prompts = [r["prompt"] for r in rows if r["user_id"] == rows[0]["user_id"]]
    prompts = [prompts[i % len(prompts)] for i in range(args.requests)]

    data_dir = Path(tempfile.mkdtemp(prefix="tailor-bench-"))
    settings: dict[str, str] = {}
    llm_server = None
    if args.llm == "instant":
        llm_port = free_port()
        llm_server = instant_llm(llm_port)
        settings["TAILOR_LLM_BASE_URL"] = f"http://127.0.0.1:{llm_port}/v1"
        settings["TAILOR_EXTRACTOR"] = "rules"
    server, base, key = start_tailor(data_dir, **settings)
    headers = {"Authorization": f"Bearer {key}"}
    results: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
            wait_ready(client, server, data_dir)
            for text in attributes:
                client.post("/v1/users/bench/attributes", json={"text": text}).raise_for_status()

            def timed(path: str, body: dict[str, Any]) -> float:
                started = time.perf_counter()
                r = client.post(path, json=body)
                elapsed = time.perf_counter() - started
                r.raise_for_status()
                return elapsed

            for p in prompts[:3]:  # warm-up
                timed("/v1/select", {"prompt": p, "user_id": "bench"})
            select = [timed("/v1/select", {"prompt": p, "user_id": "bench"}) for p in prompts]
            results["select"] = percentiles(select)
            turns = [
                timed(
                    "/v1/turns",
                    {
                        "user_id": "bench",
                        "messages": [{"role": "user", "content": f"I work as a nurse. {p}"}],
                        "max_tokens": args.max_tokens,
                    },
                )
                for p in prompts
            ]
            results["turns"] = percentiles(turns)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        if llm_server is not None:
            llm_server.should_exit = True
    report(
        results,
        args.json,
        llm=args.llm,
        attributes_per_user=len(attributes),
        max_tokens=args.max_tokens,
    )


if __name__ == "__main__":
    main()
