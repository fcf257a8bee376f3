"""Request and response models of /v1/eval (PersonaFeedback runs)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.schemas.common import ID_PATTERN, StrictModel, exactly_one_of

# A plain folder name: no separators, no leading dot (so never "." or "..").
DATASET_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"

Judge = Literal["reward", "llm", "embedding", "random"]
Split = Literal["general", "specific"]
Tier = Literal["easy", "medium", "hard"]
Status = Literal["queued", "running", "succeeded", "failed"]


class EvalRequest(StrictModel):
    """Give exactly one of `dataset` and `upload_id`."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("dataset", "upload_id"))

    dataset: str | None = Field(
        default=None,
        pattern=DATASET_PATTERN,
        description="A subfolder of TAILOR_EVAL_DATA_DIR in the PersonaFeedback release layout.",
    )
    upload_id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="An archive from POST /v1/eval/uploads (instead of `dataset`).",
    )
    judge: Judge = Field(default="reward", description="Who picks the better reply.")
    splits: list[Split] | None = Field(default=None, min_length=1, description="Default: all.")
    tiers: list[Tier] | None = Field(default=None, min_length=1, description="Default: all.")
    limit: int | None = Field(
        default=None, ge=1, le=100_000, description="At most this many cases per split/tier."
    )
    seed: int = Field(
        default=0, ge=0, le=2**31 - 1, description="Seeds the random judge and the bootstrap."
    )

    @model_validator(mode="after")
    def one_source(self) -> EvalRequest:
        if (self.dataset is None) == (self.upload_id is None):
            raise ValueError("give exactly one of dataset and upload_id")
        return self


class EvalAccepted(BaseModel):
    run_id: str
    status: Status


class EvalRunOut(BaseModel):
    run_id: str
    status: Status
    params: dict[str, Any]
    progress: dict[str, Any] | None = Field(
        description="done, total, restarts and the last heartbeat while it runs."
    )
    results: dict[str, Any] | None = Field(
        description="The CLI's JSON: accuracy, n, by_split_tier{key: {accuracy, n, ci95}}, "
        "position_consistency, tokens, wall_time_s, judge, problems."
    )
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class EvalRunList(BaseModel):
    items: list[EvalRunOut] = Field(description="Newest first.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at end.")


class UploadOut(BaseModel):
    upload_id: str
    files: list[str] = Field(description="The .jsonl files found, relative to the dataset root.")
