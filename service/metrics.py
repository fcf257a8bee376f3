"""Prometheus metrics, registered once per process on the default registry."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

HTTP_LATENCY = Histogram(
    "tailor_http_request_duration_seconds",
    "HTTP request latency by route template and status.",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
HTTP_IN_FLIGHT = Gauge("tailor_http_requests_in_flight", "HTTP requests being served.")
IDEMPOTENT_REPLAYS = Counter(
    "tailor_idempotent_replays_total", "POSTs answered from a stored Idempotency-Key response."
)
USER_ERASURES = Counter("tailor_user_erasures_total", "Users erased through DELETE /v1/users.")
