"""Fine-tune → export → serve, on a tiny randomly initialised BERT (no download): the trained
model learns a separable task, and the shipped fp16 graph and the derived int8 graph give the
PyTorch scores back through the same PairClassifier the service uses."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

from service.inference.pair_classifier import PairClassifier
from service.training.crossencoder import (
    CrossEncoder,
    PairwiseExample,
    PointExample,
    TrainConfig,
    copy_tokenizer,
    export_onnx,
)
from tests.inference.tiny_models import WORDS, _bert_tokenizer


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("tiny-base")
    vocab_size = _bert_tokenizer(base / "tokenizer.json", 600)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(base / "tokenizer.json"),
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    tokenizer.save_pretrained(str(base))
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(str(base))
    return base


def _examples(n: int, seed: int) -> list[PointExample]:
    rng = random.Random(seed)
    words = [w for w in WORDS if w not in {"dog", "dogs"}]
    out = []
    for i in range(n):
        filler = " ".join(rng.choice(words) for _ in range(rng.randint(3, 8)))
        positive = i % 2 == 0
        text = f"{filler} dog" if positive else filler
        out.append(PointExample("does the user have a pet", text, 1.0 if positive else 0.0))
    return out


def test_pointwise_training_learns_and_exports(tiny_base: Path, tmp_path: Path) -> None:
    encoder = CrossEncoder(tiny_base, max_length=32)
    train = _examples(320, seed=1)
    encoder.train(train, TrainConfig(epochs=8, batch_size=16, lr=3e-3, max_length=32))
    test = _examples(40, seed=2)
    scores = encoder.predict([(e.a, e.b) for e in test])
    gold = np.array([e.label for e in test]) > 0.5
    assert ((scores > 0.5) == gold).mean() >= 0.9

    out = tmp_path / "verifier"
    probe = [(e.a, e.b) for e in test]
    report = export_onnx(encoder, out, probe, tmp_path / "cache")
    copy_tokenizer(tiny_base, out)
    (out / "tailor.json").write_text(
        json.dumps({"task": "verifier", "max_length": 32, "threshold": 0.5, "num_labels": 1})
    )
    assert sorted(p.name for p in out.glob("*.onnx")) == ["model.fp16.onnx"]
    assert report.fp32_max_abs_diff < 1e-4
    assert report.fp16_max_abs_diff < 2e-2
    assert report.int8_max_abs_diff < 0.25

    served = PairClassifier.load(out, provider="cpu", threads=1, cache_dir=tmp_path / "cache")
    assert np.abs(served.score(probe) - scores).max() < 0.25
    assert ((served.score(probe) > 0.5) == gold).mean() >= 0.85


def test_pairwise_training_ranks_chosen_first(tiny_base: Path) -> None:
    encoder = CrossEncoder(tiny_base, max_length=32)
    pairs = [PairwiseExample("user loves dogs", f"{e.b} dog", e.b) for e in _examples(120, seed=3)]
    encoder.train(pairs, TrainConfig(epochs=4, batch_size=16, lr=2e-3, max_length=32))
    held = [PairwiseExample("user loves dogs", f"{e.b} dog", e.b) for e in _examples(30, seed=4)]
    chosen = encoder.predict([(p.a, p.chosen) for p in held])
    rejected = encoder.predict([(p.a, p.rejected) for p in held])
    assert (chosen > rejected).mean() >= 0.9


def test_training_continues_from_a_shipped_graph(tiny_base: Path, tmp_path: Path) -> None:
    trained = CrossEncoder(tiny_base, max_length=32)
    trained.train(_examples(320, seed=5), TrainConfig(epochs=8, batch_size=16, lr=3e-3))
    probe = [(e.a, e.b) for e in _examples(24, seed=6)]
    export_onnx(trained, tmp_path / "shipped", probe, tmp_path / "cache")

    fresh = CrossEncoder(tiny_base, max_length=32, seed=99)
    before = fresh.predict(probe)
    # Every weight comes back from the fp16 graph: the named ones and the exporter's
    # transposed MatMul constants.
    copied = fresh.load_graph_weights(tmp_path / "shipped" / "model.fp16.onnx")
    assert copied == len([k for k in fresh.model.state_dict() if not k.endswith("position_ids")])
    after = fresh.predict(probe)
    expected = trained.predict(probe)
    assert np.abs(after - expected).max() < 2e-2
    assert np.abs(before - expected).max() > 0.2
