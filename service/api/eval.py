"""/v1/eval: PersonaFeedback evaluation runs, their reports and uploaded datasets."""

from __future__ import annotations

import asyncio
import base64
from typing import Annotated, Any, Literal

from fastapi import APIRouter, BackgroundTasks, File, Path, Query, Request, UploadFile
from fastapi.responses import Response
from starlette.convertors import StringConvertor, register_url_convertor

from service.api.deps import IDEMPOTENT, CallerDep, SessionDep, StateDep
from service.api.errors import ProblemError, not_found
from service.api.idempotent import remember
from service.api.responses import PROBLEMS
from service.evaluation import report, uploads
from service.evaluation.worker import dataset_dir
from service.schemas.common import ID_PATTERN
from service.schemas.eval import EvalAccepted, EvalRequest, EvalRunList, EvalRunOut, UploadOut
from service.state import AppState
from service.store import evalruns
from service.store.models import EvalRun

router = APIRouter(prefix="/v1/eval", tags=["evaluation"])
RunId = Annotated[str, Path(pattern=ID_PATTERN, description="The id POST /v1/eval answered.")]
UPLOAD_PATH = "/v1/eval/uploads"


class _RunIdSegment(StringConvertor):
    """A path segment other than `uploads`, so that GET /v1/eval/uploads is the upload
    route's 405 (Allow: POST) rather than a malformed run id's 422. Any other malformed id
    still reaches its route and gets the 422 naming path.run_id."""

    regex = "(?!uploads(?:/|$))[^/]+"


register_url_convertor("eval_run_id", _RunIdSegment())


def _unavailable(detail: str) -> ProblemError:
    return ProblemError(503, detail, slug="judge-unavailable")


def _check_judge(state: AppState, judge: str) -> None:
    """503 now rather than a run that fails later for want of its model."""
    models = state.models
    if judge == "reward" and (models is None or not models.has("reward")):
        raise _unavailable("the reward model is not loaded in this deployment")
    if judge == "embedding" and (models is None or models.embedder is None):
        raise _unavailable("the embedder is not loaded in this deployment")
    if judge == "llm" and state.llm is None:
        raise _unavailable("no LLM backend is configured (TAILOR_LLM_BASE_URL) for the llm judge")


def _check_data(state: AppState, tenant_id: str, body: EvalRequest) -> None:
    settings = state.settings
    if body.upload_id is not None:
        if uploads.upload_root(settings.eval_uploads_dir, tenant_id, body.upload_id) is None:
            raise ProblemError(
                422,
                f"upload_id: no upload {body.upload_id}",
                slug="validation-error",
                errors=[{"field": "body.upload_id", "message": "no such upload"}],
            )
        return
    name = body.dataset or ""
    root = dataset_dir(settings, name)
    if root is None or not root.is_dir():
        # Same answer for a name that escapes the folder and one that does not exist, so the
        # answer says nothing about the server's file system.
        raise ProblemError(
            422,
            f"dataset: no dataset {name!r} in the evaluation data directory",
            slug="validation-error",
            errors=[{"field": "body.dataset", "message": "no such dataset"}],
        )


@router.post(
    "",
    status_code=202,
    response_model=EvalAccepted,
    responses=PROBLEMS | {503: {"description": "The judge's model or LLM is not available."}},
    dependencies=IDEMPOTENT,
)
async def start_run(
    body: EvalRequest,
    state: StateDep,
    session: SessionDep,
    caller: CallerDep,
    response: Response,
    background: BackgroundTasks,
    request: Request,
) -> EvalAccepted:
    """Start a run of `judge` over a dataset (by name) or an uploaded archive; poll
    GET /v1/eval/{run_id}."""
    _check_judge(state, body.judge)
    _check_data(state, caller.tenant_id, body)
    run = await evalruns.create(session, caller.tenant_id, body.model_dump(exclude_none=True))
    worker = state.eval_worker
    if worker is not None:
        # Background tasks run after the request's transaction has committed, so the worker
        # always finds the row.
        background.add_task(worker.submit, caller.tenant_id, run.id)
    # Without a worker here (TAILOR_EVAL_WORKER=false) a replica whose worker is on takes the
    # queued run when it next looks (TAILOR_EVAL_POLL_S).
    response.headers["Location"] = f"/v1/eval/{run.id}"
    accepted = EvalAccepted(run_id=run.id, status="queued")
    await remember(session, request, 202, accepted)
    return accepted


@router.post(
    "/uploads",
    status_code=201,
    response_model=UploadOut,
    responses=PROBLEMS | {415: {"description": "Not a .zip or .tar.gz archive."}},
)
async def upload(
    state: StateDep,
    caller: CallerDep,
    file: Annotated[UploadFile, File(description="A .zip or .tar.gz in the release layout.")],
) -> UploadOut:
    """Upload a PersonaFeedback-layout archive; name it in POST /v1/eval as `upload_id`."""
    settings = state.settings
    data = await file.read()
    limits = uploads.UploadLimits(
        max_members=settings.eval_upload_max_members,
        max_uncompressed_bytes=settings.eval_upload_max_uncompressed_bytes,
        max_ratio=settings.eval_upload_max_ratio,
    )
    # UploadRejected (413/415/422) becomes its problem in api/pipeline_errors.py.
    stored = await asyncio.to_thread(
        uploads.store, data, settings.eval_uploads_dir, caller.tenant_id, limits
    )
    return UploadOut(upload_id=stored.upload_id, files=stored.files)


async def _run(session: SessionDep, caller: CallerDep, run_id: RunId) -> EvalRun:
    run = await evalruns.get(session, caller.tenant_id, run_id)
    if run is None:
        raise not_found("evaluation run")
    return run


def _out(run: EvalRun) -> EvalRunOut:
    return EvalRunOut(
        run_id=run.id,
        status=run.status,
        params=run.params,
        progress=run.progress,
        results=run.results,
        error=run.error,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


@router.get("", response_model=EvalRunList, responses=PROBLEMS)
async def list_runs(
    session: SessionDep,
    caller: CallerDep,
    status: Annotated[
        Literal["queued", "running", "succeeded", "failed"] | None,
        Query(description="Only runs in this status; all of them when left out."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
) -> EvalRunList:
    """The tenant's evaluation runs, newest first, each as GET /v1/eval/{run_id} answers it.
    `limit` and `cursor` paginate."""
    rows = await evalruns.list_runs(
        session,
        caller.tenant_id,
        statuses=None if status is None else (status,),
        before_id=cursor,
        limit=limit + 1,
    )
    page = rows[:limit]
    return EvalRunList(
        items=[_out(run) for run in page],
        next_cursor=page[-1].id if len(rows) > limit else None,
    )


@router.get("/{run_id:eval_run_id}", response_model=EvalRunOut, responses=PROBLEMS)
async def get_run(session: SessionDep, caller: CallerDep, run_id: RunId) -> EvalRunOut:
    """Status (queued, running, succeeded, failed), progress and results."""
    return _out(await _run(session, caller, run_id))


def _finished(run: EvalRun) -> dict[str, Any]:
    if run.status != "succeeded" or run.results is None:
        raise ProblemError(
            409,
            f"run {run.id} is {run.status}; its report exists once it succeeded",
            slug="conflict",
        )
    return {"run_id": run.id, "params": run.params, "results": run.results}


@router.get(
    "/{run_id:eval_run_id}/chart.png",
    responses=PROBLEMS
    | {
        200: {"content": {"image/png": {}}, "description": "The chart."},
        503: {"description": "This install has no matplotlib (the `reports` extra)."},
    },
    response_class=Response,
)
async def get_chart(session: SessionDep, caller: CallerDep, run_id: RunId) -> Response:
    """Accuracy by split/tier with 95% intervals, beside the published reference figures."""
    doc = _finished(await _run(session, caller, run_id))
    try:
        png = await asyncio.to_thread(report.chart_png, doc["results"])
    except report.ChartUnavailable as exc:
        raise ProblemError(503, str(exc), slug="chart-unavailable") from None
    return Response(png, media_type="image/png")


@router.get(
    "/{run_id:eval_run_id}/report",
    responses=PROBLEMS | {200: {"content": {"text/markdown": {}}, "description": "Report."}},
    response_class=Response,
)
async def get_report(session: SessionDep, caller: CallerDep, run_id: RunId) -> Response:
    """A Markdown report with its chart embedded (a data: URI; also at chart.png)."""
    doc = _finished(await _run(session, caller, run_id))
    try:
        png = await asyncio.to_thread(report.chart_png, doc["results"])
    except report.ChartUnavailable as exc:  # the figures stand without their chart
        text = report.markdown(doc, chart_url=None) + f"\nNo chart: {exc}.\n"
        return Response(text, media_type="text/markdown; charset=utf-8")
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    text = report.markdown(doc, chart_url=uri)
    text += f"\nChart alone: `/v1/eval/{run_id}/chart.png`\n"
    return Response(text, media_type="text/markdown; charset=utf-8")
