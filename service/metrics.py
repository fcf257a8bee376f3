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
TENANT_THROTTLED = Counter(
    "tailor_tenant_throttled_total",
    "Model or LLM requests refused with 429: the tenant had its limit in flight.",
)
SERVER_RESTARTS = Gauge(
    "tailor_server_restarts",
    "Times `tailor serve`'s supervisor restarted the server process after a crash before this one.",
)
USER_ERASURES = Counter("tailor_user_erasures_total", "Users erased through DELETE /v1/users.")

# Inference (service/inference), labelled by model name.
INFERENCE_QUEUE_DEPTH = Gauge(
    "tailor_inference_queue_depth", "Pairs waiting to join a model batch.", ["model"]
)
INFERENCE_BATCH_SIZE = Histogram(
    "tailor_inference_batch_size",
    "Pairs per model run.",
    ["model"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
INFERENCE_BATCH_TOKENS = Histogram(
    "tailor_inference_batch_tokens",
    "Padded tokens per model run (rows x longest pair).",
    ["model"],
    buckets=(64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536),
)
INFERENCE_SECONDS = Histogram(
    "tailor_inference_duration_seconds",
    "Time of one model run (tokenising included), per batch.",
    ["model"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
INFERENCE_ITEMS = Counter("tailor_inference_items_total", "Pairs scored.", ["model"])
INFERENCE_OVERLOADS = Counter(
    "tailor_inference_overload_rejections_total",
    "Submissions refused with 429 because the model's queue was full.",
    ["model"],
)

# LLM calls (service/llm), labelled by backend (the client's name).
LLM_REQUEST_SECONDS = Histogram(
    "tailor_llm_request_duration_seconds",
    "Time of one LLM call, retries and backoff included, whatever its outcome.",
    ["backend"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0),
)
LLM_TOKENS = Counter(
    "tailor_llm_tokens_total", "Tokens reported by the LLM server.", ["backend", "kind"]
)
LLM_ERRORS = Counter(
    "tailor_llm_errors_total", "LLM calls that failed, by error slug.", ["backend", "error"]
)
LLM_RETRIES = Counter(
    "tailor_llm_retries_total",
    "HTTP attempts repeated after a 429, 5xx or connection error.",
    ["backend"],
)
LLM_IN_FLIGHT = Gauge(
    "tailor_llm_requests_in_flight", "HTTP requests to the LLM server in progress.", ["backend"]
)
# The embedded model's child process (service/llm/embedded.py).
LLM_CHILD_RESTARTS = Counter(
    "tailor_llm_child_restarts_total",
    "Times the embedded model's process was started again after it died or hung.",
    ["backend"],
)
LLM_CHILD_EXITS = Counter(
    "tailor_llm_child_exits_total",
    "Unplanned exits of the embedded model's process, by cause (signal name or exit code).",
    ["backend", "cause"],
)
LLM_CHILD_UP = Gauge(
    "tailor_llm_child_up",
    "1 while the embedded model's process is loaded and answering.",
    ["backend"],
)
LLM_STRUCTURED_REPAIRS = Counter(
    "tailor_llm_structured_repairs_total",
    "Structured answers that failed validation and were sent back once, by outcome.",
    ["backend", "outcome"],
)

# Pipeline (service/pipeline).
EXTRACTION_CANDIDATES = Counter(
    "tailor_extraction_candidates_total",
    "Extraction candidates by extractor and verdict (supported, unsupported, ungrounded); "
    "acceptance rate = supported / all.",
    ["extractor", "verdict"],
)
EXTRACTION_ACTIONS = Counter(
    "tailor_extraction_actions_total",
    "What happened to each judged candidate: added, updated, superseded, rejected, not_stored.",
    ["action"],
)
SELECTION_ATTRIBUTES = Counter(
    "tailor_selection_attributes_total",
    "Attributes seen by selection, by outcome (prefiltered_out, scored, selected); "
    "selection rate = selected / (prefiltered_out + scored).",
    ["outcome"],
)
SELECTION_SELECTED = Histogram(
    "tailor_selection_selected_per_request",
    "Attributes selected per selection request.",
    buckets=(0, 1, 2, 3, 4, 5, 6, 8, 12),
)
GENERATIONS = Counter(
    "tailor_generations_total",
    "Replies generated, by variant (personalized, generic) and outcome.",
    ["variant", "outcome"],
)

# PersonaFeedback evaluation runs (service/evaluation, POST /v1/eval and the CLI).
EVAL_RUNS_STARTED = Counter("tailor_eval_runs_started_total", "Evaluation runs started.")
EVAL_RUNS_FINISHED = Counter(
    "tailor_eval_runs_finished_total", "Evaluation runs that finished with results."
)
EVAL_RUNS_FAILED = Counter("tailor_eval_runs_failed_total", "Evaluation runs marked failed.")
EVAL_CASES_SCORED = Counter(
    "tailor_eval_cases_scored_total", "PersonaFeedback cases scored, by judge.", ["judge"]
)

# Background jobs (service/jobs), labelled by job kind.
JOBS_QUEUE_DEPTH = Gauge(
    "tailor_jobs_queue_depth",
    "Queued jobs (due or waiting for a retry), refreshed by each worker poll.",
    ["kind"],
)
JOBS_TOTAL = Counter(
    "tailor_jobs_total",
    "Job attempts that ended, by outcome: succeeded, retried (queued again) or failed (for good).",
    ["kind", "outcome"],
)
JOB_FAILURES = Counter(
    "tailor_job_failures_total",
    "Job attempts that raised, or whose worker stopped renewing its lease.",
    ["kind"],
)
JOB_SECONDS = Histogram(
    "tailor_job_duration_seconds",
    "Time of one job attempt, from claim to its outcome being committed.",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
)
