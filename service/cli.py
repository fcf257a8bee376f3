"""The ``tailor`` command."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import yaml

from service.config import Settings, get_settings


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from service.app import create_app
    from service.store.migrate import upgrade_from_settings

    if settings.should_auto_migrate():
        upgrade_from_settings(settings)
    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level=settings.log_level,
        proxy_headers=True,
    )
    return 0


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
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, max_length=args.max_length
    )
    base = Path(args.base) if args.base else None
    out = Path(args.out)
    cache = cache_dir(settings)
    if args.task == "extractor":
        metrics = run.train_extractor(Path(args.data), out, base, config, cache)
    elif args.task == "verifier":
        metrics = run.train_verifier(Path(args.data), out, base, config, cache)
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


def _eval(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from service.evaluation import commands

    model = Path(args.model) if args.model else None
    if args.benchmark == "verification":
        result = commands.eval_verification(settings, Path(args.data), model)
    elif args.benchmark == "relevance":
        result = commands.eval_relevance(settings, Path(args.data), model)
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
    train.add_argument("task", choices=["verifier", "relevance", "reward", "extractor"])
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
    train.add_argument("--epochs", type=int, default=2)
    train.add_argument("--batch-size", type=int, default=16)
    train.add_argument("--lr", type=float, default=4e-5)
    train.add_argument("--max-length", type=int, default=128)
    train.set_defaults(func=_train)

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
    args = build_parser().parse_args(argv)
    code: int = args.func(args, get_settings())
    return code


if __name__ == "__main__":
    sys.exit(main())
