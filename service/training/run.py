"""`tailor train verifier|relevance|reward`: data → fine-tune → validate → export → card."""

from __future__ import annotations

import json
import logging
import os
import platform
import random
import re
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from service.config import REPO_ROOT
from service.evaluation import personafeedback, relevance, verification
from service.evaluation.metrics import best_f1_threshold
from service.evaluation.persona import reward_query
from service.pipeline.windows import user_windows
from service.training import extractor as extractor_data
from service.training import verifier as verifier_data
from service.training.cards import write_card
from service.training.crossencoder import (
    CrossEncoder,
    PairwiseExample,
    PointExample,
    TrainConfig,
    copy_tokenizer,
    default_base_model,
    export_onnx,
)

log = logging.getLogger("tailor.training")
RELEVANCE_CAP = 6
REWARD_VAL_TOPICS = ("entertain_shows", "shop_home", "travel_transportation")


def _finish(
    task: str,
    encoder: CrossEncoder,
    out: Path,
    probe: Sequence[tuple[str, str]],
    config: TrainConfig,
    meta: dict[str, Any],
    metrics: dict[str, Any],
    cache_dir: Path,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.onnx"):
        old.unlink()
    report = export_onnx(encoder, out, probe, cache_dir)
    copy_tokenizer(encoder.base, out)
    (out / "tailor.json").write_text(
        json.dumps(
            {"task": task, "max_length": config.max_length, "num_labels": 1} | meta, indent=2
        )
        + "\n"
    )
    metrics = metrics | {
        "export": asdict(report),
        "train_config": asdict(config),
        "base_model": str(encoder.base),
        "command": "tailor " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "machine": f"{platform.machine()} {platform.processor() or ''} "
        f"{os.cpu_count()} CPUs".strip(),
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    write_card(task, out, metrics, meta)
    return metrics


def train_verifier(
    data: Path,
    out: Path,
    base: Path | None,
    config: TrainConfig,
    cache_dir: Path,
    datasets_dir: Path = REPO_ROOT / "datasets",
    everyday_repeats: int = 3,
    spc_share: float = 0.5,
    extraction_repeats: int = 1,
    init: Path | None = None,
    new_writers: frozenset[str] = frozenset(),
    replay_share: float = 1.0,
) -> dict[str, Any]:
    """``everyday_repeats``: copies of the everyday corpus's examples (it is what the service
    meets, and a fifth of the examples when taken once); ``spc_share``: the share of the
    hand-checked SPC conversations kept (seeded), so the everyday cases weigh more without
    making training longer; ``extraction_repeats``: copies of the extraction corpus's cases
    (datasets/extraction: every written fact supported by its quote, preferences and dislikes
    among them, and the traps written beside them unsupported).

    Continuing from a shipped model (``init``, its directory): training starts from its
    graph's weights, and takes every example of the everyday rounds it has not seen (written
    by ``new_writers``, the writer code in the case id ``V-AE-018-6``) and a seeded
    ``replay_share`` of all the other examples, so that it learns the new rounds without
    forgetting the old ones."""
    val_rows = verification.load_rows(datasets_dir / "verification_val_checked.jsonl")
    holdout = set((datasets_dir / "verification_val_holdout_conversations.txt").read_text().split())
    checked = sorted((datasets_dir / "verification_train").glob("checked_*.jsonl"))
    rows, spc_counts = verifier_data.training_rows(data, checked, val_rows, holdout)
    counts: dict[str, Any] = dict(spc_counts)
    if spc_share < 1.0:
        conversations = sorted({str(r["conversation_id"]) for r in rows})
        kept = set(
            random.Random(config.seed).sample(conversations, int(len(conversations) * spc_share))
        )
        rows = [r for r in rows if r["conversation_id"] in kept]
        counts["checked_rows_kept_by_spc_share"] = len(rows)
    written = [
        row
        for path in sorted(datasets_dir.glob("verifier_train_written*.jsonl"))
        for row in verifier_data.written_rows(path)
    ]
    counts["written_rows"] = len(written)
    everyday_dir = datasets_dir / "everyday" / "verification"
    everyday = verifier_data.everyday_rows(everyday_dir / "train.jsonl")
    counts["everyday_train_rows"] = len(everyday)
    counts["everyday_repeats"] = everyday_repeats
    counts["spc_share"] = spc_share
    extraction_dir = datasets_dir / "extraction"
    extraction_train = extraction_dir / "verification_train.jsonl"
    extraction = verifier_data.everyday_rows(extraction_train) if extraction_train.exists() else []
    counts["extraction_train_rows"] = len(extraction)
    counts["extraction_repeats"] = extraction_repeats
    fresh = [r for r in everyday if _writer(r["id"]) in new_writers]
    seen = [r for r in everyday if _writer(r["id"]) not in new_writers]
    examples = (
        verifier_data.window_examples(rows)
        + verifier_data.window_examples(written)
        + verifier_data.window_examples(seen) * everyday_repeats
        + verifier_data.window_examples(extraction) * extraction_repeats
        + verifier_data.synthetic_examples(12)
    )
    if replay_share < 1.0:
        examples = random.Random(config.seed).sample(examples, int(len(examples) * replay_share))
    examples += verifier_data.window_examples(fresh) * everyday_repeats
    counts["new_writers"] = sorted(new_writers)
    counts["everyday_train_rows_new"] = len(fresh)
    counts["replay_share"] = replay_share
    positives = sum(e.label for e in examples)
    log.info("verifier: %d window examples (%d positive)", len(examples), positives)
    config.pos_weight = max(1.0, (len(examples) - positives) / max(positives, 1) / 2)
    encoder = CrossEncoder(base or default_base_model(), config.max_length, config.seed)
    if init is not None:
        copied = encoder.load_graph_weights(init / "model.fp16.onnx")
        log.info("verifier: continuing from %s (%d weights)", init, copied)
        counts["continued_from"] = json.loads((init / "metrics.json").read_text())["data"]
    encoder.train(examples, config)

    # The threshold is chosen on both validation sets at once (the written everyday split and
    # the read-checked SPC pairs): it must hold for chat turns and for persona sentences.
    everyday_val = verifier_data.everyday_rows(everyday_dir / "val.jsonl")
    extraction_val_file = extraction_dir / "verification_val.jsonl"
    extraction_val = (
        verifier_data.everyday_rows(extraction_val_file) if extraction_val_file.exists() else []
    )
    calibration = val_rows + everyday_val + extraction_val
    scores, _ = verification.pooled_scores(encoder.predict, calibration)
    gold = np.array([r["supported"] for r in calibration])
    threshold, _ = best_f1_threshold(scores, gold)
    val = verification.evaluate(encoder.predict, val_rows, threshold)
    everyday_validation = verification.evaluate(encoder.predict, everyday_val, threshold)
    extraction_validation = (
        verification.evaluate(encoder.predict, extraction_val, threshold) if extraction_val else {}
    )
    hard_rows = verification.load_rows(datasets_dir / "verifier_hard_negatives.jsonl")
    hard = verification.evaluate(encoder.predict, hard_rows, threshold)
    probe = [
        (r["attribute"], w.text) for r in val_rows[:40] for w in user_windows(r["conversation"])[:2]
    ]
    metrics = {
        "task": "verifier",
        "data": counts
        | {
            "train_rows": len(rows),
            "train_supported": sum(r["supported"] for r in rows),
            "window_examples": len(examples),
            "window_positives": int(positives),
            "validation_rows": len(val_rows),
            # How far the raw file's labels are from a careful reading (why we retrained on
            # hand-checked labels): share of pairs where the source label equals ours.
            "source_label_agreement_validation": round(
                float(np.mean([r["source_label"] == r["label"] for r in val_rows])), 4
            ),
            "source_label_agreement_train": counts["source_label_agreement"],
        },
        "validation": val,
        "everyday_validation": everyday_validation,
        "extraction_validation": extraction_validation,
        "hard_negatives_test": hard,
    }
    # Served from an fp32 CPU graph: int8 weights cost the verifier 0.009 validation F1 for
    # about 25 ms of the extraction job's p95 (docs/verifier-experiments.md).
    meta = {"threshold": threshold, "cpu_precision": "fp32"}
    return _finish("verifier", encoder, out, probe, config, meta, metrics, cache_dir)


def _writer(case_id: str | None) -> str:
    """The writer code of an everyday case id: "V-AE-018-6" → "AE"."""
    parts = (case_id or "").split("-")
    return parts[1] if len(parts) > 2 else ""


def train_extractor(
    data: Path, out: Path, base: Path | None, config: TrainConfig, cache_dir: Path
) -> dict[str, Any]:
    """The learned extractor's clause classifier on the written corpus (datasets/extraction):
    train on train.jsonl, choose the threshold on val.jsonl (best clause F1); test.jsonl is
    for neither."""
    train_rows = extractor_data.load(data / "train.jsonl")
    val_rows = extractor_data.load(data / "val.jsonl")
    examples = extractor_data.examples(train_rows)
    positives = sum(e.label for e in examples)
    log.info("extractor: %d clause examples (%d positive)", len(examples), positives)
    config.pos_weight = max(1.0, (len(examples) - positives) / max(positives, 1) / 2)
    encoder = CrossEncoder(base or default_base_model(), config.max_length, config.seed)
    encoder.train(examples, config)

    labelled = extractor_data.labelled_clauses(val_rows)
    scores = encoder.predict([(c.text, c.context) for c, _ in labelled])
    gold = np.array([y for _, y in labelled])
    threshold, best = best_f1_threshold(scores, gold)
    validation = {
        "clauses": len(labelled),
        "positive_clauses": int(gold.sum()),
        "clause": best.as_dict(),
        "segmenter_coverage": round(extractor_data.coverage(val_rows), 4),
    }
    probe = [(c.text, c.context) for c, _ in labelled[:64]]
    metrics = {
        "task": "extractor",
        "data": {
            "train_chats": len(train_rows),
            "train_facts": sum(len(r["facts"]) for r in train_rows),
            "clause_examples": len(examples),
            "clause_positives": int(positives),
            "segmenter_coverage_train": round(extractor_data.coverage(train_rows), 4),
            "validation_chats": len(val_rows),
        },
        "validation": validation,
    }
    return _finish(
        "extractor", encoder, out, probe, config, {"threshold": threshold}, metrics, cache_dir
    )


def _relevance_split(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], ...]:
    users = sorted({r["user_id"] for r in rows})
    random.Random(13).shuffle(users)
    val_users = set(users[: len(users) // 5])
    train = [r for r in rows if r["user_id"] not in val_users]
    val = [r for r in rows if r["user_id"] in val_users]
    return train, val


_PERSONALENS = re.compile(r"^(?P<domain>[^:]+?) - (?P<key>[^:]+?): (?P<values>.+)$")


def as_statement(attribute: str, rng: random.Random) -> str:
    """A PersonaLens attribute ("Rental Cars - Preferred Rental Company: Avis, Hertz") as the
    kind of third-person statement the service stores ("The user's preferred rental company
    for rental cars is Avis, Hertz."). The model is trained and calibrated on both forms:
    trained on the source form alone it scored every stored statement near zero (0.005 for
    "The user is vegetarian." against a dinner request, threshold 0.99)."""
    match = _PERSONALENS.match(attribute)
    if match is None:
        return attribute
    domain, key, values = (match.group(g).strip() for g in ("domain", "key", "values"))
    templates = (
        f"The user's {key.lower()} for {domain.lower()} is {values}.",
        f"For {domain.lower()}, the user prefers {values}.",
        f"The user likes {values}.",
        f"When it comes to {domain.lower()}, the user's {key.lower()}: {values}.",
    )
    return templates[rng.randrange(len(templates))]


def _relevance_examples(
    rows: list[dict[str, Any]], seed: int, statement_share: float = 0.5
) -> list[PointExample]:
    """All positives; negatives from the task's own domain (the hard ones) plus a few others.
    ``statement_share`` of the attributes are rewritten as third-person statements."""
    rng = random.Random(seed)

    def form(attr: str) -> str:
        return as_statement(attr, rng) if rng.random() < statement_share else attr

    out = []
    for row in rows:
        relevant = set(row["relevant"])
        domain = row["domain"].lower()
        same, other = [], []
        for i, attr in enumerate(row["attributes"]):
            if i in relevant:
                out.append(PointExample(row["prompt"], form(attr), 1.0))
            elif attr.lower().startswith(domain):
                same.append(attr)
            else:
                other.append(attr)
        for attr in rng.sample(same, min(4, len(same))) + rng.sample(other, min(5, len(other))):
            out.append(PointExample(row["prompt"], form(attr), 0.0))
    return out


def as_statement_rows(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The same rows with every attribute in statement form (validation of that form)."""
    rng = random.Random(seed)
    return [r | {"attributes": [as_statement(a, rng) for a in r["attributes"]]} for r in rows]


def _tuned_baselines(rows: list[dict[str, Any]], cap: int) -> dict[str, dict[str, Any]]:
    """BM25 and embedding cosine on ``rows``, each with its best-F1 threshold there (the
    model's own threshold is chosen on the same rows): the baselines every card reports."""
    from service.inference.embedder import Embedder

    embedder = Embedder.load(None)
    baselines = {}
    for name, scores in (
        ("bm25", relevance.bm25_scores(rows)),
        ("embedding", relevance.embedding_scores(rows, embedder.encode)),
    ):
        t = relevance.tune_threshold(scores, rows, cap)
        baselines[name] = relevance.metrics(scores, rows, t, cap)
    return baselines


def train_relevance(
    data: Path, out: Path, base: Path | None, config: TrainConfig, cache_dir: Path
) -> dict[str, Any]:
    rows = relevance.load_rows(data)
    train, val = _relevance_split(rows)
    examples = _relevance_examples(train, config.seed)
    encoder = CrossEncoder(base or default_base_model(), config.max_length, config.seed)
    encoder.train(examples, config)

    # Calibrated on both forms at once: the threshold must hold for stored statements as
    # much as for the source format.
    val_statements = as_statement_rows(val, config.seed)
    both = val + val_statements
    model_scores = relevance.pair_scores(both, encoder.predict)
    threshold = relevance.tune_threshold(model_scores, both, RELEVANCE_CAP)
    baselines = _tuned_baselines(both, RELEVANCE_CAP)
    meta = {
        "threshold": threshold,
        "cap": RELEVANCE_CAP,
        "baseline_thresholds": {k: v["threshold"] for k, v in baselines.items()},
    }
    n = len(val)
    metrics = {
        "task": "relevance",
        "data": {
            "train_rows": len(train),
            "validation_rows": len(val),
            "train_users": len({r["user_id"] for r in train}),
            "validation_users": len({r["user_id"] for r in val}),
            "pair_examples": len(examples),
        },
        "validation": relevance.metrics(model_scores[:n], val, threshold, RELEVANCE_CAP),
        "validation_statements": relevance.metrics(
            model_scores[n:], val_statements, threshold, RELEVANCE_CAP
        ),
        "validation_both": relevance.metrics(model_scores, both, threshold, RELEVANCE_CAP),
        "baselines": baselines,
    }
    probe = [(r["prompt"], a) for r in val[:3] for a in r["attributes"][:20]]
    return _finish("relevance", encoder, out, probe, config, meta, metrics, cache_dir)


def _everyday_examples(rows: list[dict[str, Any]], seed: int) -> list[PointExample]:
    """Every (prompt, fact) of the profile, labelled by the writers (the profile's other facts
    are the hard negatives), plus two facts of other profiles as easy negatives."""
    rng = random.Random(seed)
    pool = sorted({a for r in rows for a in r["attributes"]})
    out = []
    for row in rows:
        relevant = set(row["relevant"])
        own = set(row["attributes"])
        for i, attr in enumerate(row["attributes"]):
            out.append(PointExample(row["prompt"], attr, 1.0 if i in relevant else 0.0))
        foreign = [a for a in rng.sample(pool, 4) if a not in own][:2]
        out += [PointExample(row["prompt"], attr, 0.0) for attr in foreign]
    return out


def train_relevance_everyday(
    data: Path, out: Path, base: Path | None, config: TrainConfig, cache_dir: Path
) -> dict[str, Any]:
    """The default selector: trained on the written everyday corpus (``data`` is its
    relevance/ folder with train/val/test.jsonl), calibrated on its validation split so the
    selection rate matches the gold rate. The test split is not read here."""
    train = relevance.load_rows(data / "train.jsonl")
    val = relevance.load_rows(data / "val.jsonl")
    examples = _everyday_examples(train, config.seed)
    positives = sum(e.label for e in examples)
    config.pos_weight = max(1.0, (len(examples) - positives) / max(positives, 1) / 2)
    encoder = CrossEncoder(base or default_base_model(), config.max_length, config.seed)
    encoder.train(examples, config)

    model_scores = relevance.pair_scores(val, encoder.predict)
    best: tuple[float, int, float] | None = None
    for cap in (3, 4, 5, 6):
        t = relevance.calibrate(model_scores, val, cap)
        f1 = relevance.metrics(model_scores, val, t, cap)["f1"]
        if best is None or f1 > best[0]:
            best = (f1, cap, t)
    assert best is not None
    _, cap, threshold = best
    baselines = _tuned_baselines(val, cap)
    meta = {
        "threshold": threshold,
        "cap": cap,
        "baseline_thresholds": {k: v["threshold"] for k, v in baselines.items()},
    }
    metrics = {
        "task": "relevance",
        "data": {
            "corpus": "datasets/everyday/relevance (written for Tailor)",
            "train_prompts": len(train),
            "validation_prompts": len(val),
            "train_profiles": len({r["profile_id"] for r in train}),
            "validation_profiles": len({r["profile_id"] for r in val}),
            "pair_examples": len(examples),
            "pair_positives": int(positives),
        },
        "validation": relevance.metrics(model_scores, val, threshold, cap),
        "baselines": baselines,
    }
    probe = [(r["prompt"], a) for r in val[:6] for a in r["attributes"]]
    return _finish("relevance", encoder, out, probe, config, meta, metrics, cache_dir)


def topic_of_user(topics_file: Path) -> dict[str, str]:
    """PrefEval record k (0-based) is persona k+1 of pf_prefeval; its id names the topic."""
    lines = [x for x in topics_file.read_text(encoding="utf-8").splitlines() if x.strip()]
    return {str(i + 1): json.loads(x)["id"].split("-")[1] for i, x in enumerate(lines)}


def reward_accuracy(encoder_predict: Any, cases: Sequence[personafeedback.Case]) -> dict[str, Any]:
    pairs = [(reward_query(c.persona, c.question), c.chosen) for c in cases] + [
        (reward_query(c.persona, c.question), c.reject) for c in cases
    ]
    scores = encoder_predict(pairs)
    correct = scores[: len(cases)] > scores[len(cases) :]
    out: dict[str, Any] = {"accuracy": round(float(correct.mean()), 4), "n": len(cases)}
    by: dict[str, dict[str, Any]] = {}
    for key in sorted({c.key for c in cases}):
        idx = [i for i, c in enumerate(cases) if c.key == key]
        by[key] = {"accuracy": round(float(correct[idx].mean()), 4), "n": len(idx)}
    out["by_split_tier"] = by
    return out


def train_reward(
    data: Path, out: Path, base: Path | None, config: TrainConfig, cache_dir: Path, topics: Path
) -> dict[str, Any]:
    dataset = personafeedback.load(data)
    topic = topic_of_user(topics)
    val = [c for c in dataset.cases if topic.get(c.user_id) in REWARD_VAL_TOPICS]
    train = [c for c in dataset.cases if topic.get(c.user_id) not in REWARD_VAL_TOPICS]
    examples = [
        PairwiseExample(reward_query(c.persona, c.question), c.chosen, c.reject) for c in train
    ]
    encoder = CrossEncoder(base or default_base_model(), config.max_length, config.seed)
    started = time.perf_counter()
    encoder.train(examples, config)
    metrics = {
        "task": "reward",
        "data": {
            "train_cases": len(train),
            "validation_cases": len(val),
            "validation_topics": list(REWARD_VAL_TOPICS),
            "train_topics": sorted({topic[c.user_id] for c in train}),
            "load_problems": dataset.problems,
        },
        "validation": reward_accuracy(encoder.predict, val),
        "train_seconds": round(time.perf_counter() - started, 1),
    }
    probe = [(reward_query(c.persona, c.question), c.chosen) for c in val[:60]]
    return _finish("reward", encoder, out, probe, config, {"threshold": 0.5}, metrics, cache_dir)
