"""Derive the CPU graph of a shipped model, once, and cache it on disk.

The training side ships ``model.fp16.onnx`` (the GPU graph) or, for custom deployments, an fp32
``model.onnx``. On CPU fp16 kernels are slow or missing, so the CPU graph is derived here: back to
fp32 when needed, then (precision ``int8``, the cross-encoders) dynamically quantised to int8
weights, or left fp32 (precision ``fp32``, the embedder: its vectors are compared by cosine
against thresholds and against vectors stored earlier, and int8 moved those cosines by 0.01 on
average; see models/embedder/card.md). Deriving costs seconds per model, so the result is cached
under a name that changes whenever the source graph changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

if TYPE_CHECKING:
    import onnx

# onnx is imported where a graph is derived, not with this module: a server whose CPU graphs are
# already cached never needs it (its import alone costs about 11 MB of resident memory).

log = logging.getLogger("tailor.inference")

FP32_GRAPH = "model.onnx"
FP16_GRAPH = "model.fp16.onnx"

Precision = Literal["int8", "fp32"]
PRECISIONS: tuple[Precision, ...] = ("int8", "fp32")


def card_precision(path: Path, raw: Mapping[str, Any], default: Precision) -> Precision:
    """A model card's ``cpu_precision`` (``default`` when absent), refused unless known."""
    precision = raw.get("cpu_precision", default)
    if precision not in PRECISIONS:
        raise ValueError(f"{path}: cpu_precision {precision!r} is not one of {list(PRECISIONS)}")
    return cast(Precision, precision)


# Chosen by measurement against the fp32 graph, over per_channel x reduce_range x op types, on
# the shipped verifier (5,423 windows of its validation and hard-negative sets) and on
# all-MiniLM-L6-v2 itself. Per-channel weight scales are what matters: per-tensor flipped 32-35
# of 563 verdicts at the shipped threshold, per-channel 5-8, with a mean |score change| of
# 0.0023 instead of 0.0068; reduce_range (7-bit, for pre-VNNI CPUs) ruined per-tensor results.
# Among per-channel variants the differences were within noise; MatMul-only with the full int8
# range had the lowest mean and max error on the verifier and matched the rest on MiniLM.
# Gemm (pooler and classification head, which torch exports as Gemm) stays fp32: ORT has no
# dynamic integer Gemm, and naming only MatMul keeps the head fp32 should that change.
QUANT_OPTIONS: dict[str, Any] = {
    "per_channel": True,
    "reduce_range": False,
    "op_types_to_quantize": ["MatMul"],
}
# ... on a CPU with VNNI. x86 CPUs without it (AVX2 only, e.g. some AMD EPYC boxes) run ONNX
# Runtime's u8s8 kernels, whose 16-bit intermediate sums saturate with full-range int8 weights:
# there the tiny test models' int8 scores lost their correlation with torch (roberta: mean
# |d| 0.126, correlation 0.78), and 7-bit weights (reduce_range) brought them back (mean 0.023).
# On the shipped models the two were within noise there (flips at the threshold on 1,533
# validation pairs: relevance 27 vs 23, verifier 1 vs 3, reward 25 vs 25). Such CPUs get
# 7-bit weights, cached under their own name, so a data directory moved between machines
# derives the graph that suits each.
_VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def int8_saturates(cpuinfo: str | None = None) -> bool:
    """True on an x86 CPU whose int8 kernels saturate (AVX2 without VNNI)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return "avx2" in flags and not flags.intersection(_VNNI_FLAGS)


def quant_options(saturates: bool | None = None) -> dict[str, Any]:
    saturates = int8_saturates() if saturates is None else saturates
    return QUANT_OPTIONS | {"reduce_range": saturates}


# TensorProto.FLOAT16 and TensorProto.FLOAT: element type numbers fixed by the ONNX standard.
_FLOAT16 = 10
_FLOAT = 1


def source_graph(model_dir: Path) -> Path:
    """The graph the CPU graph is derived from: fp32 when shipped (no fp16 rounding), else fp16."""
    for name in (FP32_GRAPH, FP16_GRAPH):
        path = model_dir / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"{model_dir} holds neither {FP32_GRAPH} nor {FP16_GRAPH}")


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def cached_path(model_dir: Path, cache_dir: Path, precision: Precision = "int8") -> Path:
    """Where the CPU graph for ``model_dir``'s current source graph lives in the cache."""
    digest = file_digest(source_graph(model_dir))[:16]
    flavour = "-r7" if precision == "int8" and int8_saturates() else ""
    return cache_dir / f"{model_dir.name}-{digest}{flavour}.{precision}.onnx"


def cpu_graph(model_dir: Path, cache_dir: Path, *, precision: Precision = "int8") -> Path:
    """Path of the CPU graph for ``model_dir`` (int8, or fp32), deriving and caching it when
    missing. An fp32 graph shipped as such is used where it lies.

    Safe when several processes (or threads) start at once: an exclusive lock makes one of them
    derive while the others wait and then reuse its file, and the file only ever appears whole
    (written under a temporary name, then renamed), so a reader never sees a partial graph.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"CPU graph precision {precision!r} is not one of {PRECISIONS}")
    model_dir = Path(model_dir)
    cache_dir = Path(cache_dir)
    if precision == "fp32" and source_graph(model_dir).name == FP32_GRAPH:
        return source_graph(model_dir)
    target = cached_path(model_dir, cache_dir, precision)
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(target.with_name(target.name + ".lock")):
        if target.is_file():  # another process derived it while this one waited
            return target
        _derive(source_graph(model_dir), target, quantize=precision == "int8")
    return target


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    # flock locks belong to the open file description, so this also serialises threads of one
    # process as long as each opens the file itself (which this does).
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _derive(source: Path, target: Path, *, quantize: bool = True) -> None:
    log.info("deriving CPU graph %s from %s", target.name, source)
    # The scratch directory sits beside the target so the final rename stays on one filesystem
    # (os.replace is only atomic there).
    scratch = Path(tempfile.mkdtemp(prefix=".derive-", dir=target.parent))
    try:
        # The quantiser writes a shape-inferred copy beside its input, so the input must live in
        # the scratch directory too: the model folder may be read-only (baked into an image), and
        # concurrent derivations would otherwise collide on that one file.
        fp32 = scratch / "model.fp32.onnx"
        if source.name == FP16_GRAPH:
            import onnx

            onnx.save(fp16_to_fp32(onnx.load(str(source))), str(fp32))
        else:
            shutil.copyfile(source, fp32)
        out = scratch / target.name
        if quantize:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(fp32, out, weight_type=QuantType.QInt8, **quant_options())
        else:
            os.replace(fp32, out)
        os.replace(out, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("cached CPU graph at %s", target)


def fp16_to_fp32(model: onnx.ModelProto) -> onnx.ModelProto:
    """Undo ``convert_float_to_float16``: every fp16 tensor, constant, cast and type becomes fp32.

    Generic over architectures: it only rewrites types, never the graph's structure, so the Cast
    nodes the converter inserted stay (as fp32 -> fp32 casts, which ORT's optimiser removes).
    """
    import onnx

    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    _graph_to_fp32(converted.graph)
    for function in converted.functions:
        for node in function.node:
            _node_to_fp32(node)
    onnx.checker.check_model(converted)
    return converted


def _graph_to_fp32(graph: onnx.GraphProto) -> None:
    for init in graph.initializer:
        _tensor_to_fp32(init)
    for sparse in graph.sparse_initializer:
        _tensor_to_fp32(sparse.values)
    for node in graph.node:
        _node_to_fp32(node)
    for value in (*graph.input, *graph.output, *graph.value_info):
        _type_to_fp32(value.type)


def _node_to_fp32(node: onnx.NodeProto) -> None:
    import onnx

    standard = node.domain in ("", "ai.onnx")
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR:
            _tensor_to_fp32(attr.t)
        elif attr.type == onnx.AttributeProto.TENSORS:
            for tensor in attr.tensors:
                _tensor_to_fp32(tensor)
        elif attr.type == onnx.AttributeProto.GRAPH:
            _graph_to_fp32(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for sub in attr.graphs:
                _graph_to_fp32(sub)
        # Cast's "to", and "dtype" on the generator ops (RandomNormal, EyeLike, ...), name the
        # element type the node produces; left at fp16 they would feed fp16 into fp32 ops.
        elif (
            standard
            and attr.type == onnx.AttributeProto.INT
            and attr.name in ("to", "dtype")
            and attr.i == _FLOAT16
        ):
            attr.i = _FLOAT


def _tensor_to_fp32(tensor: onnx.TensorProto) -> None:
    if tensor.data_type != _FLOAT16:
        return
    from onnx import numpy_helper

    array = numpy_helper.to_array(tensor).astype(np.float32)
    tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))


def _type_to_fp32(type_proto: onnx.TypeProto) -> None:
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        if type_proto.tensor_type.elem_type == _FLOAT16:
            type_proto.tensor_type.elem_type = _FLOAT
    elif kind == "sparse_tensor_type":
        if type_proto.sparse_tensor_type.elem_type == _FLOAT16:
            type_proto.sparse_tensor_type.elem_type = _FLOAT
    elif kind == "sequence_type":
        _type_to_fp32(type_proto.sequence_type.elem_type)
    elif kind == "optional_type":
        _type_to_fp32(type_proto.optional_type.elem_type)
    elif kind == "map_type":
        _type_to_fp32(type_proto.map_type.value_type)
