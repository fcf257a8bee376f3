"""ONNX sequence-pair classifier (verifier, relevance, reward), independent of the architecture.

A model directory, as the training code writes it::

    model.fp16.onnx   shipped graph: fp16 weights, fp32 I/O (or model.onnx: plain fp32)
    tokenizer.json    Hugging Face fast-tokenizer file
    tailor.json       {"task", "max_length", "threshold", "num_labels", ...}

Inputs are ``input_ids``, ``attention_mask`` and, for BERT-style graphs only, ``token_type_ids``
(int64 [batch, seq]); the output ``logits`` is float32 [batch, num_labels], num_labels 1
(score = sigmoid) or 2 (score = softmax[:, 1]).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray
from tokenizers import Encoding, Tokenizer

from service.config import available_cpus
from service.inference import derive

log = logging.getLogger("tailor.inference")

Pair = tuple[str, str]
Provider = Literal["cpu", "cuda"]
Int64Array = NDArray[np.int64]
Float32Array = NDArray[np.float32]

CARD_FILE = "tailor.json"
TOKENIZER_FILE = "tokenizer.json"
KNOWN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Tried in order when tokenizer.json carries no padding section (BERT-style, then RoBERTa-style).
PAD_TOKENS = ("[PAD]", "<pad>")


@dataclass(frozen=True, slots=True)
class ModelCard:
    """The keys of tailor.json this service relies on; the training side may add others."""

    task: str
    max_length: int
    threshold: float
    num_labels: int
    # Most items a selection keeps (relevance); None when the model is not used to select.
    cap: int | None = None
    # The graph run on CPU, derived from the shipped one: int8 weights unless the card asks
    # for fp32 (a model whose decisions int8 moves more than its speed is worth).
    cpu_precision: derive.Precision = "int8"

    @classmethod
    def read(cls, path: Path) -> ModelCard:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a JSON object")
        fields = (("task", str), ("max_length", int), ("threshold", float), ("num_labels", int))
        card = cls(**{key: _card_value(path, raw, key, convert) for key, convert in fields})
        if raw.get("cap") is not None:
            cap = _card_value(path, raw, "cap", int)
            if cap < 1:
                raise ValueError(f"{path}: cap must be at least 1, not {cap}")
            card = dataclasses.replace(card, cap=cap)
        precision = derive.card_precision(path, raw, "int8")
        card = dataclasses.replace(card, cpu_precision=precision)
        if card.num_labels not in (1, 2):
            raise ValueError(f"{path}: num_labels must be 1 or 2, not {card.num_labels}")
        if card.max_length < 4:
            raise ValueError(f"{path}: max_length {card.max_length} is too small")
        return card


def _card_value(path: Path, raw: dict[str, Any], key: str, convert: type) -> Any:
    if raw.get(key) is None:
        raise ValueError(f"{path}: {key} is missing")
    try:
        return convert(raw[key])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {key} is invalid ({exc})") from exc


@dataclass(frozen=True, slots=True)
class Encoded:
    """One padded batch: int64 [rows, longest] arrays, plus each row's unpadded length."""

    input_ids: Int64Array
    attention_mask: Int64Array
    token_type_ids: Int64Array
    lengths: Int64Array

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def tokens(self) -> int:
        """Padded size of the batch (rows x longest): what the model's cost follows."""
        return int(self.input_ids.shape[0] * self.input_ids.shape[1])


class PairClassifier:
    """Scores (text, text) pairs in [0, 1]. Thread-safe: ``run`` may be called concurrently."""

    def __init__(
        self,
        *,
        name: str,
        card: ModelCard,
        tokenizer: Tokenizer,
        session: Any,
        provider: Provider,
        use_io_binding: bool = False,
    ) -> None:
        self.name = name
        self.card = card
        self.provider = provider
        self._session = session
        self._use_io_binding = use_io_binding
        # Where bound inputs and outputs live. On CPU binding saves nothing much, but it is the
        # same code path, so it is exercised by tests on machines without a GPU.
        self._device = "cuda" if provider == "cuda" else "cpu"
        self._feeds = [i.name for i in session.get_inputs()]
        unknown = [n for n in self._feeds if n not in KNOWN_INPUTS]
        if unknown or "input_ids" not in self._feeds:
            raise ValueError(f"{name}: graph inputs {self._feeds} are not {list(KNOWN_INPUTS)}")
        outputs = [o.name for o in session.get_outputs()]
        self._output = "logits" if "logits" in outputs else outputs[0]
        self.pad_id = pad_id(tokenizer)
        # Truncation settings live on the tokenizer object and changing them is not thread-safe,
        # so each strategy gets its own copy, configured once here and only read afterwards.
        tokenizer.no_padding()
        self._only_second = Tokenizer.from_str(tokenizer.to_str())
        self._only_second.enable_truncation(card.max_length, strategy="only_second")
        self._longest_first = Tokenizer.from_str(tokenizer.to_str())
        self._longest_first.enable_truncation(card.max_length, strategy="longest_first")

    @classmethod
    def load(
        cls,
        model_dir: Path,
        *,
        provider: Provider = "cpu",
        threads: int | None = None,
        cache_dir: Path,
        use_io_binding: bool = False,
    ) -> PairClassifier:
        """Load a model directory. ``cpu`` runs the graph derived (and cached in ``cache_dir``)
        from the shipped one, int8 unless the card's ``cpu_precision`` says fp32; ``cuda`` runs
        the shipped fp16 graph on the GPU."""
        model_dir = Path(model_dir)
        # Read first: a bad card should fail before seconds are spent deriving a graph.
        card = ModelCard.read(model_dir / CARD_FILE)
        session, provider = open_session(
            model_dir,
            provider,
            threads or available_cpus(),
            cpu_graph=lambda: derive.cpu_graph(
                model_dir, Path(cache_dir), precision=card.cpu_precision
            ),
        )
        return cls._build(model_dir, card, session, provider, use_io_binding)

    @classmethod
    def from_graph(
        cls, model_dir: Path, graph: Path, *, threads: int | None = None
    ) -> PairClassifier:
        """Run one given graph file on CPU, as is: e.g. the fp32 export, to compare the derived
        int8 graph against it."""
        model_dir = Path(model_dir)
        card = ModelCard.read(model_dir / CARD_FILE)
        session = _cpu_session(Path(graph), threads or available_cpus())
        return cls._build(model_dir, card, session, "cpu", use_io_binding=False)

    @classmethod
    def _build(
        cls,
        model_dir: Path,
        card: ModelCard,
        session: Any,
        provider: Provider,
        use_io_binding: bool,
    ) -> PairClassifier:
        classifier = cls(
            name=model_dir.name,
            card=card,
            tokenizer=Tokenizer.from_file(str(model_dir / TOKENIZER_FILE)),
            session=session,
            provider=provider,
            use_io_binding=use_io_binding,
        )
        classifier._check_labels()
        log.info(
            "loaded %s (%s, task=%s, max_length=%d, inputs=%s)",
            classifier.name,
            provider,
            card.task,
            card.max_length,
            ",".join(classifier._feeds),
        )
        return classifier

    def _check_labels(self) -> None:
        for out in self._session.get_outputs():
            labels = out.shape[-1]
            if (
                out.name == self._output
                and isinstance(labels, int)
                and labels != self.card.num_labels
            ):
                raise ValueError(
                    f"{self.name}: graph has {labels} labels, "
                    f"{CARD_FILE} says {self.card.num_labels}"
                )

    @property
    def threshold(self) -> float:
        return self.card.threshold

    @property
    def max_length(self) -> int:
        return self.card.max_length

    @property
    def task(self) -> str:
        return self.card.task

    @property
    def input_names(self) -> list[str]:
        return list(self._feeds)

    def _encode_one(self, pair: Pair) -> Encoding:
        try:
            return self._only_second.encode(pair[0], pair[1])
        except Exception:
            # only_second refuses when the first text alone leaves no room for the second; the
            # pair is still scored, both texts shortened.
            return self._longest_first.encode(pair[0], pair[1])

    def _encode(self, pairs: Sequence[Pair]) -> list[Encoding]:
        try:
            return self._only_second.encode_batch_fast(list(pairs))
        except Exception:
            # One over-long first text fails the whole batch call; redo item by item.
            return [self._encode_one(pair) for pair in pairs]

    def count_tokens(self, pair: Pair) -> int:
        """Tokens the pair takes after truncation, special tokens included."""
        return len(self._encode_one(pair).ids)

    def token_counts(self, pairs: Sequence[Pair]) -> list[int]:
        return [len(e.ids) for e in self._encode(pairs)]

    def tokenize(self, pairs: Sequence[Pair]) -> Encoded:
        """Encode and pad to the longest pair of this batch (never to max_length)."""
        encodings = self._encode(pairs)
        rows = len(encodings)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=rows)
        width = int(lengths.max()) if rows else 0
        ids = np.full((rows, width), self.pad_id, dtype=np.int64)
        mask = np.zeros((rows, width), dtype=np.int64)
        types = np.zeros((rows, width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
            types[row, :n] = enc.type_ids
        return Encoded(ids, mask, types, lengths)

    def run(self, encoded: Encoded) -> Float32Array:
        """Scores in [0, 1] (float32, one per row) for an encoded batch."""
        if len(encoded) == 0:
            return np.empty(0, dtype=np.float32)
        arrays = {
            "input_ids": encoded.input_ids,
            "attention_mask": encoded.attention_mask,
            "token_type_ids": encoded.token_type_ids,
        }
        # Only what the graph declares: RoBERTa-style graphs have no token_type_ids and ORT
        # rejects unknown feeds.
        feed = {name: arrays[name] for name in self._feeds}
        if self._use_io_binding:
            logits = self._run_bound(feed)
        else:
            logits = self._session.run([self._output], feed)[0]
        return logits_to_scores(np.asarray(logits, dtype=np.float32))

    def _run_bound(self, feed: dict[str, Int64Array]) -> Any:
        # On CUDA: inputs are copied to the device up front and the output stays there until one
        # copy back, instead of ORT staging each through pageable host memory inside run().
        binding = self._session.io_binding()
        device_inputs = []
        for name, array in feed.items():
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), self._device, 0)
            device_inputs.append(value)  # the binding does not own it: keep it alive until run
            binding.bind_ortvalue_input(name, value)
        binding.bind_output(self._output, self._device, 0)
        self._session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]

    def score(self, pairs: Sequence[Pair]) -> Float32Array:
        """Tokenise and run, synchronously (blocks: from async code go through the batcher)."""
        return self.run(self.tokenize(pairs))


def logits_to_scores(logits: Float32Array) -> Float32Array:
    if logits.ndim == 2 and logits.shape[1] == 1:
        z = logits[:, 0]
    elif logits.ndim == 2 and logits.shape[1] == 2:
        # softmax(l)[1] == sigmoid(l1 - l0): one subtraction, and no exp() that can overflow.
        z = logits[:, 1] - logits[:, 0]
    else:
        raise ValueError(f"expected logits [batch, 1] or [batch, 2], got {logits.shape}")
    # sigmoid(z) written as exp(-log(1 + e^-z)) stays finite and warning-free for any z.
    return np.exp(-np.logaddexp(np.float32(0.0), -z)).astype(np.float32)


def pad_id(tokenizer: Tokenizer) -> int:
    # RoBERTa derives position ids from input_ids != pad id, so the pad id must be the model's.
    padding = tokenizer.padding
    if padding and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    for token in PAD_TOKENS:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    return 0


def _cpu_session(graph: Path, threads: int) -> Any:
    return ort.InferenceSession(
        str(graph), session_options(threads), providers=["CPUExecutionProvider"]
    )


def open_session(
    model_dir: Path,
    provider: Provider,
    threads: int,
    *,
    cpu_graph: Callable[[], Path],
    cpu_session: Callable[[Path, int], Any] = _cpu_session,
) -> tuple[Any, Provider]:
    """The session a model runs in, and where: the shipped fp16 graph on CUDA when asked for
    and usable, else (logged by cuda_session) ``cpu_graph()`` on the CPU. ``cpu_graph`` derives
    or finds the CPU graph only when it is needed."""
    if provider == "cuda":
        session = cuda_session(model_dir, threads)
        if session is not None:
            return session, "cuda"
    return cpu_session(cpu_graph(), threads), "cpu"


def session_options(threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    # The batcher already runs as many batches at once as the cores hold
    # (TAILOR_BATCH_WORKERS), so inter-op parallelism would only add threads competing for them.
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


def cuda_session(model_dir: Path, threads: int) -> Any | None:
    """A CUDA session over the shipped graph, or None (logged) when CUDA cannot be used."""
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        log.error(
            "%s: TAILOR_ONNX_PROVIDER=cuda but this onnxruntime build has no "
            "CUDAExecutionProvider (available: %s); install onnxruntime-gpu instead of "
            "onnxruntime. Falling back to the int8 CPU graph.",
            model_dir.name,
            ", ".join(available),
        )
        return None
    graph = model_dir / derive.FP16_GRAPH
    if not graph.is_file():
        graph = derive.source_graph(model_dir)
    session = ort.InferenceSession(
        str(graph),
        session_options(threads),
        providers=["CUDAExecutionProvider", "CPUExecutionProvider"],
    )
    # ORT silently drops to CPU when the CUDA/cuDNN libraries fail to load; an fp16 graph on
    # CPU is far slower than the int8 one, so treat that as CUDA being unavailable.
    if session.get_providers()[0] != "CUDAExecutionProvider":
        log.error(
            "%s: CUDAExecutionProvider failed to initialise (CUDA or cuDNN libraries missing?); "
            "falling back to the int8 CPU graph.",
            model_dir.name,
        )
        return None
    return session
