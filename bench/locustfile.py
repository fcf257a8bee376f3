"""A mixed chat-turn workload for Locust, over many end users of one tenant.

    locust -f bench/locustfile.py --headless -u 16 -r 4 -t 60s --host http://127.0.0.1:8000

(``bench/load_test.sh`` runs it and can start a local server first.) Each Locust user is a
product backend's worker serving random end users out of a pool: chat turns (``POST
/v1/turns``, which queue an extraction job), selections (``POST /v1/select``), attribute writes
(single and ``:batch``), reads (``GET .../attributes``) and polls of the jobs its turns queued
(``GET /v1/jobs/{id}``). Settings, from the environment:

- ``TAILOR_API_KEY`` (required): the tenant's bearer key;
- ``TAILOR_LOAD_USERS`` (1000): end users (``load-user-0`` ...) the requests are spread over;
- ``TAILOR_LOAD_RATE`` (1.0): requests per second per Locust user (``constant_throughput``),
  so the target rate is ``-u`` times this;
- ``TAILOR_LOAD_WEIGHTS`` (``turn=4,select=3,write=2,batch=1,list=1,job=2``): the mix;
- ``TAILOR_LOAD_MAX_TOKENS`` (64): ``max_tokens`` of each turn's reply;
- ``TAILOR_LOAD_BATCH`` (5): items per batch write;
- ``TAILOR_LOAD_SUMMARY`` (unset): also write the summary below as JSON to this file.

Requests are named by route template (``/v1/users/[id]/attributes``), so Locust's table has
one row per route. At the end a summary is printed: per route and in all, requests, requests/s,
p50/p95/p99 ms (Locust's own percentiles) and the answers by status; any status but 2xx (and a
connection error, counted as ``error:<type>``) fails its request.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter, defaultdict, deque
from typing import Any

from locust import HttpUser, constant_throughput, events, task
from locust.env import Environment

API_KEY = os.environ.get("TAILOR_API_KEY", "")
USERS = int(os.environ.get("TAILOR_LOAD_USERS", "1000"))
RATE = float(os.environ.get("TAILOR_LOAD_RATE", "1.0"))
MAX_TOKENS = int(os.environ.get("TAILOR_LOAD_MAX_TOKENS", "64"))
BATCH = int(os.environ.get("TAILOR_LOAD_BATCH", "5"))
SUMMARY = os.environ.get("TAILOR_LOAD_SUMMARY")
DEFAULT_WEIGHTS = "turn=4,select=3,write=2,batch=1,list=1,job=2"


def weights() -> dict[str, int]:
    spec = os.environ.get("TAILOR_LOAD_WEIGHTS", DEFAULT_WEIGHTS)
    out = {name: 0 for name in ("turn", "select", "write", "batch", "list", "job")}
    for part in spec.split(","):
        name, _, value = part.partition("=")
        if name.strip() not in out:
            raise SystemExit(f"TAILOR_LOAD_WEIGHTS: unknown task {name!r} (know {sorted(out)})")
        out[name.strip()] = int(value)
    return out


WEIGHTS = weights()

FACTS = (
    "I work as a nurse on night shifts.",
    "I'm vegetarian and I cook most evenings.",
    "I live in Lyon with my two cats.",
    "I'm training for my first marathon in the spring.",
    "I have a peanut allergy.",
    "I play the cello in an amateur orchestra.",
    "My daughter just started primary school.",
    "I'm learning Japanese for a trip next year.",
)
QUESTIONS = (
    "Any tips for sleeping better?",
    "What should I cook tonight?",
    "Can you suggest a weekend activity?",
    "How do I keep motivated this week?",
    "What's a good gift for a friend?",
    "How should I plan my holidays?",
    "Any ideas for a quick lunch?",
    "How can I make my mornings less rushed?",
)
STATEMENTS = (
    "Works night shifts as a nurse",
    "Is vegetarian",
    "Lives in Lyon",
    "Has two cats",
    "Is training for a marathon",
    "Is allergic to peanuts",
    "Plays the cello",
    "Is learning Japanese",
    "Prefers short answers",
    "Likes hiking in the mountains",
)

# Answers by status, per route name and in all (Locust's own table has no status breakdown).
STATUSES: dict[str, Counter[str]] = defaultdict(Counter)


@events.request.add_listener
def _count_status(
    name: str, response: Any, exception: BaseException | None, **_kwargs: Any
) -> None:
    code = getattr(response, "status_code", 0) if response is not None else 0
    status = str(code) if code else f"error:{type(exception).__name__}"
    STATUSES[name][status] += 1


class ChatBackend(HttpUser):
    wait_time = constant_throughput(RATE)

    def on_start(self) -> None:
        if not API_KEY:
            raise SystemExit("set TAILOR_API_KEY to the tenant's API key")
        self.client.headers["Authorization"] = f"Bearer {API_KEY}"
        self.jobs: deque[str] = deque(maxlen=50)
        self.n = 0

    def end_user(self) -> str:
        return f"load-user-{random.randrange(USERS)}"

    def post(self, path: str, name: str, body: dict[str, Any]) -> Any:
        with self.client.post(path, json=body, name=name, catch_response=True) as r:
            if 200 <= r.status_code < 300:
                r.success()
                return r.json()
            r.failure(f"{r.status_code} {r.text[:200]}")
            return None

    @task(WEIGHTS["turn"])
    def turn(self) -> None:
        messages = [
            {"role": "user", "content": f"{random.choice(FACTS)} {random.choice(QUESTIONS)}"}
        ]
        body = {"user_id": self.end_user(), "messages": messages, "max_tokens": MAX_TOKENS}
        answer = self.post("/v1/turns", "/v1/turns", body)
        if answer and answer.get("job_id"):
            self.jobs.append(answer["job_id"])

    @task(WEIGHTS["select"])
    def select(self) -> None:
        body = {"prompt": random.choice(QUESTIONS), "user_id": self.end_user()}
        self.post("/v1/select", "/v1/select", body)

    @task(WEIGHTS["write"])
    def write(self) -> None:
        self.n += 1
        text = f"{random.choice(STATEMENTS)} ({self.n})"
        self.post(
            f"/v1/users/{self.end_user()}/attributes",
            "/v1/users/[id]/attributes",
            {"text": text},
        )

    @task(WEIGHTS["batch"])
    def batch(self) -> None:
        self.n += 1
        items = [{"text": f"{s} ({self.n})"} for s in random.sample(STATEMENTS, BATCH)]
        self.post(
            f"/v1/users/{self.end_user()}/attributes:batch",
            "/v1/users/[id]/attributes:batch",
            {"items": items},
        )

    @task(WEIGHTS["list"])
    def list_attributes(self) -> None:
        # A user nobody wrote to yet is a 404: expected, not a failure.
        with self.client.get(
            f"/v1/users/{self.end_user()}/attributes",
            name="/v1/users/[id]/attributes (GET)",
            catch_response=True,
        ) as r:
            if r.status_code in (200, 404):
                r.success()
            else:
                r.failure(f"{r.status_code} {r.text[:200]}")

    @task(WEIGHTS["job"])
    def poll_job(self) -> None:
        if not self.jobs:
            return
        job_id = random.choice(self.jobs)
        with self.client.get(f"/v1/jobs/{job_id}", name="/v1/jobs/[id]", catch_response=True) as r:
            if r.status_code == 200:
                r.success()
                if r.json().get("status") in ("succeeded", "failed"):
                    self.jobs.remove(job_id)
            else:
                r.failure(f"{r.status_code} {r.text[:200]}")


@events.quitting.add_listener
def _summary(environment: Environment, **_kwargs: Any) -> None:
    stats = environment.stats
    if stats is None:
        return
    rows: dict[str, dict[str, Any]] = {}
    entries = sorted(stats.entries.values(), key=lambda e: e.name)
    for entry in [*entries, stats.total]:
        name = entry.name if entry is not stats.total else "all"
        statuses = (
            STATUSES.get(entry.name, Counter())
            if name != "all"
            else sum(STATUSES.values(), Counter())
        )
        rows[name] = {
            "requests": entry.num_requests,
            "failures": entry.num_failures,
            "requests_per_s": round(entry.total_rps, 2),
            "p50_ms": entry.get_response_time_percentile(0.50),
            "p95_ms": entry.get_response_time_percentile(0.95),
            "p99_ms": entry.get_response_time_percentile(0.99),
            "statuses": dict(sorted(statuses.items())),
        }
    print("\nTailor load summary (p50/p95/p99 ms; answers by status)")
    for name, r in rows.items():
        print(
            f"  {name:36} {r['requests']:6} req {r['requests_per_s']:7.2f}/s "
            f"{r['p50_ms']:>6}/{r['p95_ms']:>6}/{r['p99_ms']:>6} ms  {r['statuses']}"
        )
    if SUMMARY:
        with open(SUMMARY, "w") as f:
            json.dump(rows, f, indent=2)
