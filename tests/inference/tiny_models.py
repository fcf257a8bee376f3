"""Builders for two tiny, randomly initialised pair classifiers made from configs (nothing
downloaded), laid out exactly as the training code ships them:

- ``bert``: BertForSequenceClassification, num_labels 1, WordPiece tokenizer with [CLS]/[SEP]
  and token type ids; shipped as ``model.fp16.onnx`` only (the fp32 export is kept outside the
  folder), so loading it exercises the fp16 -> fp32 -> int8 derivation.
- ``roberta``: RobertaForSequenceClassification, num_labels 2, WordLevel tokenizer with the
  RoBERTa post-processor and no token_type_ids input; shipped as fp32 ``model.onnx``.
"""

from __future__ import annotations

import json
import random
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
from onnxruntime.transformers.float16 import convert_float_to_float16
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
)

from service.inference.pair_classifier import Encoded

WORD_TEXT = """
i you we they my your our the a an and or but not no yes is am are was were be been
have has had do does did will would can could should like love adore hate enjoy prefer
want need dog dogs puppy puppies cat cats bird fish horse pet pets animal animals food
pizza pasta tea coffee water wine beer bread cheese meat vegan vegetarian allergic
peanuts nuts milk music violin piano guitar song songs book books movie movies film
sport football tennis run running swim swimming walk city berlin paris london home
house flat garden car bike train work job nurse teacher doctor engineer office school
student study night day morning evening week year today yesterday tomorrow stock market
fell rose price prices money bank weather sunny rain cold hot nice bad good great small
big old new young family mother father sister brother daughter son wife husband friend
friends child children two three four many every often never always sometimes in on at
to from with for of about after before because
"""
WORDS = WORD_TEXT.split()

BERT_MAX_LENGTH = 32
# Far above the usual 0.02: with it, random models score every pair about the same, and a test
# comparing scores could not notice a wrong mask, position or truncation.
INIT_RANGE = 0.4
ROBERTA_MAX_LENGTH = 24

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


@dataclass
class TinyModel:
    arch: str
    dir: Path
    fp32_graph: Path  # the fp32 export (outside ``dir`` for bert)
    torch_model: torch.nn.Module
    num_labels: int
    max_length: int
    uses_token_types: bool

    def reference(self, encoded: Encoded) -> np.ndarray:
        """PyTorch scores for the exact ids the wrapper produced."""
        kwargs = {
            "input_ids": torch.from_numpy(encoded.input_ids),
            "attention_mask": torch.from_numpy(encoded.attention_mask),
        }
        if self.uses_token_types:
            kwargs["token_type_ids"] = torch.from_numpy(encoded.token_type_ids)
        with torch.no_grad():
            logits = self.torch_model(**kwargs).logits
        if self.num_labels == 1:
            return torch.sigmoid(logits[:, 0]).numpy()
        return torch.softmax(logits, dim=-1)[:, 1].numpy()


def _vocab(specials: list[str], extra: list[str]) -> dict[str, int]:
    tokens = [*specials, *WORDS, *extra]
    return {tok: i for i, tok in enumerate(dict.fromkeys(tokens))}


def _bert_tokenizer(path: Path, vocab_size: int) -> int:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    # Letters and ##letters make every word encodable (long unknown words become many pieces),
    # synthetic ##-suffixes fill the vocabulary to its configured size.
    extra = letters + [f"##{c}" for c in letters] + [".", ",", "?", "!", "'"]
    vocab = _vocab(BERT_SPECIALS, extra)
    vocab.update({f"##x{i}": len(vocab) + i for i in range(vocab_size - len(vocab))})
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece()
    # Hugging Face often saves fixed-length padding into tokenizer.json; the wrapper must still
    # pad per batch, so the fixture ships that trap.
    tok.enable_padding(pad_id=vocab["[PAD]"], pad_token="[PAD]", length=BERT_MAX_LENGTH)
    tok.save(str(path))
    return len(vocab)


def _roberta_tokenizer(path: Path) -> int:
    vocab = _vocab(ROBERTA_SPECIALS, [".", ",", "?", "!", "'"])
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.save(str(path))
    return len(vocab)


class _Logits(torch.nn.Module):
    """Plain tensor-in/tensor-out forward for the tracer (HF models return dataclasses)."""

    def __init__(self, model: torch.nn.Module, token_types: bool) -> None:
        super().__init__()
        self.model = model
        self.token_types = token_types

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        names = ["input_ids", "attention_mask"] + (["token_type_ids"] if self.token_types else [])
        return self.model(**dict(zip(names, inputs, strict=True))).logits


def _export(model: torch.nn.Module, path: Path, token_types: bool) -> None:
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_types else [])
    ids = torch.randint(5, 100, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # a padded row, so the tracer cannot drop the mask as all-ones
    sample = (ids, mask) + ((torch.zeros_like(ids),) if token_types else ())
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    axes["logits"] = {0: "batch"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # torch 2.13 defaults to the dynamo exporter, which needs onnxscript (not installed);
        # the TorchScript exporter handles dynamic_axes and these models fine.
        torch.onnx.export(
            _Logits(model, token_types).eval(),
            sample,
            str(path),
            input_names=names,
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    # The exporter restores the wrapper's train/eval mode afterwards, and a restore to train
    # would reach the wrapped model too: make sure the reference stays in eval mode.
    model.eval()


def _card(path: Path, task: str, max_length: int, num_labels: int) -> None:
    card = {
        "task": task,
        "max_length": max_length,
        "threshold": 0.5,
        "num_labels": num_labels,
        "base_model": "tiny-random",  # unknown keys must be ignored
        "trained_at": "2025-01-01T00:00:00Z",
    }
    path.write_text(json.dumps(card))


def build_bert(root: Path) -> TinyModel:
    model_dir = root / "bert"
    model_dir.mkdir()
    vocab_size = _bert_tokenizer(model_dir / "tokenizer.json", 1000)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=1,
        initializer_range=INIT_RANGE,
    )
    model = BertForSequenceClassification(config).eval()
    fp32 = root / "bert-fp32.onnx"
    _export(model, fp32, token_types=True)
    fp16 = convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True)
    onnx.save(fp16, str(model_dir / "model.fp16.onnx"))
    _card(model_dir / "tailor.json", "verify", BERT_MAX_LENGTH, 1)
    return TinyModel("bert", model_dir, fp32, model, 1, BERT_MAX_LENGTH, True)


def build_roberta(root: Path) -> TinyModel:
    model_dir = root / "roberta"
    model_dir.mkdir()
    vocab_size = _roberta_tokenizer(model_dir / "tokenizer.json")
    torch.manual_seed(1)
    config = RobertaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        # RoBERTa positions start after the pad id (1), hence the +2.
        max_position_embeddings=ROBERTA_MAX_LENGTH + 2,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        num_labels=2,
        initializer_range=INIT_RANGE,
    )
    model = RobertaForSequenceClassification(config).eval()
    _export(model, model_dir / "model.onnx", token_types=False)
    _card(model_dir / "tailor.json", "relevance", ROBERTA_MAX_LENGTH, 2)
    graph = model_dir / "model.onnx"
    return TinyModel("roberta", model_dir, graph, model, 2, ROBERTA_MAX_LENGTH, False)


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def mixed_pairs(n: int, seed: int = 0, longest: int = 12) -> list[tuple[str, str]]:
    """Pairs of varied lengths, short to over max_length, deterministic per seed."""
    rng = random.Random(seed)
    return [
        (sentence(rng, rng.randint(1, longest)), sentence(rng, rng.randint(1, longest)))
        for _ in range(n)
    ]
