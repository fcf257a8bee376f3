"""`tailor eval <benchmark>`: the figures other tools read (keys fixed in DESIGN.md)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from service.config import Settings
from service.evaluation import relevance, verification
from service.evaluation.batching import Pair, score_in_sorted_batches


def _classifier(settings: Settings, name: str, model_dir: Path | None) -> Any:
    from service.inference import cache_dir
    from service.inference.pair_classifier import PairClassifier

    return PairClassifier.load(
        model_dir or settings.models_dir / name,
        provider=settings.onnx_provider,
        threads=settings.onnx_intra_op_threads,
        cache_dir=cache_dir(settings),
    )


def _batched(classifier: Any) -> Any:
    """Score many pairs in length-sorted batches (the way the micro-batcher would)."""

    def score(pairs: list[tuple[str, str]]) -> np.ndarray:
        return score_in_sorted_batches(classifier.score, pairs)

    return score


def _threaded(score: Callable[[list[Pair]], np.ndarray]) -> Callable[[list[Pair]], Any]:
    """An offline model's ``score`` as the judges call it: awaited, run in a worker thread."""

    async def threaded(pairs: list[Pair]) -> np.ndarray:
        return await asyncio.to_thread(score, pairs)

    return threaded


def eval_verification(settings: Settings, data: Path, model_dir: Path | None) -> dict[str, Any]:
    classifier = _classifier(settings, "verifier", model_dir)
    rows = verification.load_rows(data)
    result = verification.evaluate(_batched(classifier), rows, classifier.threshold)
    return {"benchmark": "verification"} | result


def eval_relevance(
    settings: Settings, data: Path, model_dir: Path | None, *, pad_to: int | None = None
) -> dict[str, Any]:
    """The relevance model as the service selects: with its adapter (when its card names one)
    choosing the shortlist and sharing the final score, else the cross-encoder on every fact.
    ``pad_to`` first pads each profile with other profiles' facts (a long-lived user)."""
    return eval_relevance_rows(settings, relevance.load_rows(data), model_dir, pad_to=pad_to)


def eval_relevance_rows(
    settings: Settings,
    rows: list[dict[str, Any]],
    model_dir: Path | None,
    *,
    pad_to: int | None = None,
) -> dict[str, Any]:
    """``eval_relevance`` on rows already loaded (``relevance.load_rows``'s format)."""
    from service.inference import cache_dir
    from service.inference.embedder import Embedder
    from service.inference.relevance_adapter import RelevanceAdapter

    directory = model_dir or settings.models_dir / "relevance"
    classifier = _classifier(settings, "relevance", directory)
    config = json.loads((directory / "tailor.json").read_text(encoding="utf-8"))
    cap = int(config.get("cap", 6))
    if pad_to is not None:
        rows = relevance.pad_rows(rows, pad_to, seed=13)
    embedder = Embedder.load(settings.embedder_dir, cache_dir=cache_dir(settings))
    adapter = RelevanceAdapter.load(directory)
    if adapter is None:
        scores = relevance.pair_scores(rows, _batched(classifier))
    else:
        adapter.check_embedder(embedder.card.base_model, embedder.dim)
        vectors = relevance.Vectors.of(rows, embedder.encode)
        scores = relevance.shortlist_scores(
            adapter,
            rows,
            vectors,
            _batched(classifier),
            adapter.card.weight,
            adapter.card.shortlist,
        )
    result = relevance.metrics(scores, rows, classifier.threshold, cap, by_kind=True)
    if adapter is not None:
        result["adapter"] = {"weight": adapter.card.weight, "shortlist": adapter.card.shortlist}
    if pad_to is not None:
        result["padded_to"] = pad_to
    thresholds = config.get("baseline_thresholds", {})
    baselines = {}
    for name, base_scores in (
        ("bm25", relevance.bm25_scores(rows)),
        ("embedding", relevance.embedding_scores(rows, embedder.encode)),
    ):
        # Thresholds were tuned on the validation users at training time, like the model's;
        # without a stored one, tune on these rows and say so.
        t = thresholds.get(name)
        tuned_here = t is None
        if t is None:
            t = relevance.tune_threshold(base_scores, rows, cap)
        baselines[name] = relevance.metrics(base_scores, rows, float(t), cap) | {
            "threshold_tuned_on_these_rows": tuned_here
        }
    return {"benchmark": "relevance"} | result | {"baselines": baselines}


class _Verified:
    """An extractor followed by the verifier, as the service runs it: grounded candidates
    scored against the window of the message they quote, kept at or over the threshold."""

    def __init__(self, inner: Any, classifier: Any) -> None:
        self.inner = inner
        self.classifier = classifier
        self.name = f"{inner.name}+verifier"

    async def extract(self, conversation: Any) -> list[Any]:
        import asyncio

        from service.pipeline.extraction import grounded
        from service.pipeline.verify import candidate_pairs

        candidates = grounded(conversation, await self.inner.extract(conversation))
        pairs = candidate_pairs(conversation, candidates)
        if not pairs:
            return []
        scores = await asyncio.to_thread(self.classifier.score, pairs)
        return [
            c for c, s in zip(candidates, scores, strict=True) if s >= self.classifier.threshold
        ]


class _Memo:
    """Runs the inner extractor once per conversation and replays its answer, so the same
    candidates can be scored with and without the verifier (an LLM is slow and sampled)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: dict[str, list[Any]] = {}

    async def extract(self, conversation: Any) -> list[Any]:
        import json

        key = json.dumps(conversation, sort_keys=True)
        if key not in self.seen:
            self.seen[key] = list(await self.inner.extract(conversation))
        return self.seen[key]


class _Tolerant:
    """Counts a failed LLM call as an empty answer for that conversation instead of ending the
    whole evaluation (the count is reported as ``llm_errors``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.errors: list[str] = []

    async def extract(self, conversation: Any) -> list[Any]:
        from service.llm.base import LLMError

        try:
            return list(await self.inner.extract(conversation))
        except LLMError as exc:
            self.errors.append(exc.slug)
            return []


def _learned(settings: Settings, model_dir: Path | None) -> Any:
    """The learned extractor over a PairClassifier loaded here (no micro-batcher)."""
    import asyncio

    from service.pipeline.extraction.learned import LearnedExtractor

    classifier = _classifier(settings, "extractor", model_dir)
    batched = _batched(classifier)

    async def score(pairs: Any) -> Any:
        return await asyncio.to_thread(batched, list(pairs))

    return LearnedExtractor(score, classifier.threshold)


def eval_extraction(
    settings: Settings,
    data: Path,
    *,
    extractor: str = "rules",
    verify: bool = False,
    limit: int | None = None,
    concurrency: int = 1,
    model_dir: Path | None = None,
) -> dict[str, Any]:
    """An extractor against gold attributes (see docs/extraction.md for matching); with
    ``verify`` the verifier filters its candidates as in the service. ``extractor`` may name
    several, comma-separated ("rules,learned,llm"): each is run on the same rows and reported
    side by side under ``extractors``. ``model_dir``: the extractor model for "learned"."""
    import asyncio

    from service.evaluation import extraction
    from service.inference.embedder import Embedder
    from service.llm.factory import build_llm
    from service.pipeline.extraction import RuleExtractor
    from service.pipeline.extraction.llm import LLMExtractor

    rows = extraction.load_rows(data)[:limit]
    embedder = Embedder.load(settings.embedder_path, threads=settings.onnx_intra_op_threads)
    verifier = _classifier(settings, "verifier", None) if verify else None

    async def run(name: str) -> dict[str, Any]:
        llm = build_llm(settings) if name == "llm" else None
        try:
            if name == "llm":
                if llm is None:
                    raise SystemExit("no LLM: set TAILOR_LLM_BASE_URL or install the embedded one")
                chosen: Any = LLMExtractor(llm, deadline_s=settings.llm_deadline_s)
            elif name == "learned":
                chosen = _learned(settings, model_dir)
            elif name == "rules":
                chosen = RuleExtractor()
            else:
                raise SystemExit(f"unknown extractor {name!r}: rules, learned or llm")
            tolerant = _Tolerant(chosen)
            memo = _Memo(tolerant)
            unverified = await extraction.evaluate(memo, rows, embedder, concurrency=concurrency)
            extra = {
                "llm_errors": len(tolerant.errors),
                "llm_error_kinds": dict(Counter(tolerant.errors)),
            }
            if verifier is None:
                return unverified | extra
            verified = _Verified(memo, verifier)
            result = await extraction.evaluate(verified, rows, embedder, concurrency=concurrency)
            # The extractor's own figures on the same candidates, before the verifier.
            keys = (
                "precision", "recall", "f1", "partner_leak_rate", "n", "predictions",
                "ungrounded", "candidates_per_conversation", "nothing_stored_rate",
            )  # fmt: skip
            return result | extra | {"unverified": {k: unverified[k] for k in keys}}
        finally:
            if llm is not None:
                await llm.aclose()

    names = [n.strip() for n in extractor.split(",") if n.strip()]
    head = {"benchmark": "extraction", "verified": verify}
    if len(names) == 1:
        return head | {"extractor": names[0]} | asyncio.run(run(names[0]))
    results = {name: asyncio.run(run(name)) for name in names}
    table = {
        name: {k: r[k] for k in ("precision", "recall", "f1", "partner_leak_rate")}
        | {"nothing_stored_rate": r.get("nothing_stored_rate")}
        for name, r in results.items()
    }
    return head | {"extractor": ",".join(names), "table": table, "extractors": results}


def eval_personafeedback(
    settings: Settings,
    data: Path,
    judge: str,
    *,
    selection: Any = None,
    seed: int = 0,
    model_dir: Path | None = None,
    topics: Path | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """A judge on a PersonaFeedback-layout directory: the same runner as POST /v1/eval.

    ``topics`` (prefeval_implicit.jsonl) splits the figures into the reward model's held-out
    topics and the topics it was trained on (``by_group``), since pf_prefeval's users include
    its training users.
    """
    import asyncio

    from tqdm import tqdm

    from service.evaluation import runner
    from service.evaluation.judges import build_judge
    from service.llm.factory import build_llm

    dataset = runner.select_cases(data, selection or runner.Selection())
    groups = None
    if topics is not None:
        # Imported here: the training module pulls in torch.
        from service.training.run import REWARD_VAL_TOPICS, topic_of_user

        topic = topic_of_user(topics)
        held = {user for user, t in topic.items() if t in REWARD_VAL_TOPICS}
        groups = {"held_out_topics": held, "trained_topics": set(topic) - held}

    async def main() -> dict[str, Any]:
        reward_score = encode = llm = None
        if judge == "reward":
            reward_score = _threaded(_classifier(settings, "reward", model_dir).score)
        elif judge == "embedding":
            from service.inference.embedder import Embedder

            embedder = Embedder.load(settings.embedder_path, threads=settings.onnx_intra_op_threads)
            encode = embedder.aencode
        elif judge == "llm":
            llm = build_llm(settings)
        scorer = build_judge(
            judge,
            seed=seed,
            reward_score=reward_score,
            encode=encode,
            llm=llm,
            llm_concurrency=settings.eval_llm_concurrency,
        )
        bar = tqdm(total=len(dataset.cases), unit="case", disable=not show_progress)

        async def progress(done: int, total: int) -> None:
            bar.update(done - bar.n)

        try:
            return await runner.run(
                dataset.cases,
                scorer,
                seed=seed,
                problems=dataset.problems,
                groups=groups,
                progress=progress,
            )
        finally:
            bar.close()
            if llm is not None:
                await llm.aclose()

    result = asyncio.run(main())
    return {"benchmark": "personafeedback", "data": str(data)} | result
