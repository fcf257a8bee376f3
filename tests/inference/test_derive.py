"""The CPU graphs (int8, or fp32 for the embedder): derived once, cached by source hash,
written atomically."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from service.inference import derive
from service.inference.pair_classifier import PairClassifier
from tests.inference.tiny_models import TinyModel, mixed_pairs


@pytest.fixture
def quantize_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Counts real quantisations (the expensive step the cache exists to skip)."""
    import onnxruntime.quantization as quantization

    calls: list[Path] = []
    real = quantization.quantize_dynamic

    def counting(model_input: Any, model_output: Any, **kwargs: Any) -> None:
        calls.append(Path(model_output))
        real(model_input, model_output, **kwargs)

    monkeypatch.setattr(quantization, "quantize_dynamic", counting)
    return calls


def _fp16_left(graph: onnx.GraphProto) -> list[str]:
    """Names of whatever still is, or produces, fp16 in ``graph`` and its subgraphs."""
    half = onnx.TensorProto.FLOAT16
    left = [i.name for i in graph.initializer if i.data_type == half]
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.tensor_type.elem_type == half:
            left.append(value.name)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == half:
                left.append(node.name or node.op_type)
            if attr.type == onnx.AttributeProto.GRAPH:
                left.extend(_fp16_left(attr.g))
            if node.op_type == "Cast" and attr.name == "to" and attr.i == half:
                left.append(node.name or node.op_type)
    return left


def _int8_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.int8.onnx"))


def test_cache_name_is_folder_and_source_hash(model_copy: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = sorted(p.name for p in model_copy.iterdir())
    graph = derive.cpu_graph(model_copy, cache)
    # Nothing may be written into the model folder: it may be read-only in an image.
    assert sorted(p.name for p in model_copy.iterdir()) == before
    source = derive.source_graph(model_copy)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    flavour = "-r7" if derive.int8_saturates() else ""
    assert graph == cache / f"{model_copy.name}-{digest}{flavour}.int8.onnx"
    assert _int8_files(cache) == [graph]
    assert not list(cache.glob(".derive-*")), "scratch files must be cleaned up"


def test_second_load_reuses_the_cached_graph(
    model_copy: Path, tmp_path: Path, quantize_calls: list[Path]
) -> None:
    cache = tmp_path / "cache"
    first = PairClassifier.load(model_copy, threads=1, cache_dir=cache)
    graph = _int8_files(cache)[0]
    stamp = graph.stat().st_mtime_ns
    second = PairClassifier.load(model_copy, threads=1, cache_dir=cache)
    assert len(quantize_calls) == 1
    assert graph.stat().st_mtime_ns == stamp
    pairs = mixed_pairs(8, seed=7)
    np.testing.assert_array_equal(first.score(pairs), second.score(pairs))


def test_changed_source_gets_a_new_cache_entry(
    model_copy: Path, tmp_path: Path, quantize_calls: list[Path]
) -> None:
    cache = tmp_path / "cache"
    old = derive.cpu_graph(model_copy, cache)
    source = derive.source_graph(model_copy)
    model = onnx.load(str(source))
    model.doc_string = "retrained"
    onnx.save(model, str(source))
    new = derive.cpu_graph(model_copy, cache)
    assert new != old and new.is_file() and old.is_file()
    assert len(quantize_calls) == 2


@pytest.mark.parametrize("locked", [True, False], ids=["with-lock", "lock-bypassed"])
def test_concurrent_derivations_leave_one_valid_file(
    model_copy: Path,
    tmp_path: Path,
    quantize_calls: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    locked: bool,
) -> None:
    if not locked:
        # Two processes on a filesystem where flock is a no-op (some network mounts): both
        # derive, and the atomic rename alone must still leave one whole file.
        @contextlib.contextmanager
        def no_lock(path: Path) -> Iterator[None]:
            yield

        monkeypatch.setattr(derive, "_exclusive", no_lock)
    cache = tmp_path / "cache"
    start = threading.Barrier(2)
    results: list[Path] = []
    errors: list[BaseException] = []

    def derive_one() -> None:
        start.wait()
        try:
            results.append(derive.cpu_graph(model_copy, cache))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=derive_one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert len(results) == 2 and results[0] == results[1]
    assert _int8_files(cache) == [results[0]]
    assert not list(cache.glob(".derive-*"))
    if locked:
        assert len(quantize_calls) == 1, "the second thread must wait and reuse, not redo"
    onnx.checker.check_model(str(results[0]))
    session = ort.InferenceSession(str(results[0]), providers=["CPUExecutionProvider"])
    assert {i.name for i in session.get_inputs()} >= {"input_ids", "attention_mask"}


def test_fp16_graph_converts_back_to_fp32(tiny_models: dict[str, TinyModel]) -> None:
    tiny = tiny_models["bert"]
    fp16 = onnx.load(str(tiny.dir / derive.FP16_GRAPH))
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in fp16.graph.initializer)
    fp32 = derive.fp16_to_fp32(fp16)

    assert _fp16_left(fp32.graph) == []
    # Same scores as the original fp32 export, up to the fp16 rounding of the weights.
    path = Path(tiny.fp32_graph).with_name("roundtrip.onnx")
    onnx.save(fp32, str(path))
    roundtrip = PairClassifier.from_graph(tiny.dir, path, threads=1)
    original = PairClassifier.from_graph(tiny.dir, tiny.fp32_graph, threads=1)
    pairs = mixed_pairs(16, seed=8)
    np.testing.assert_allclose(roundtrip.score(pairs), original.score(pairs), atol=5e-3)


def test_converter_handles_constants_casts_and_subgraphs() -> None:
    from onnx import TensorProto, helper, numpy_helper

    # A hand-made fp16 graph with what the generic pass must catch: an fp16 Constant, a Cast to
    # FLOAT16, fp16 value_info, and an If whose branch holds an fp16 initializer.
    half = numpy_helper.from_array(np.array([2.0], np.float16), "c")
    branch_init = numpy_helper.from_array(np.array([1.0], np.float16), "b")
    then_graph = helper.make_graph(
        [helper.make_node("Add", ["y", "b"], ["z_then"])],
        "then",
        [],
        [helper.make_tensor_value_info("z_then", TensorProto.FLOAT16, [1])],
        [branch_init],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["y"], ["z_else"])],
        "else",
        [],
        [helper.make_tensor_value_info("z_else", TensorProto.FLOAT16, [1])],
    )
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("Constant", [], ["c_out"], value=half),
        helper.make_node("Mul", ["x16", "c_out"], ["y"]),
        helper.make_node("If", ["flag"], ["z"], then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Cast", ["z"], ["out"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1])],
        value_info=[helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    converted = derive.fp16_to_fp32(model)
    assert _fp16_left(converted.graph) == []
    session = ort.InferenceSession(
        converted.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    x = np.array([1.5], np.float32)
    assert session.run(None, {"x": x, "flag": np.array(True)})[0].tolist() == [4.0]
    assert session.run(None, {"x": x, "flag": np.array(False)})[0].tolist() == [3.0]


def test_quantisation_options_are_the_measured_ones() -> None:
    # Guard the choice documented in derive.py (measured on all-MiniLM-L6-v2): changing it
    # should be a deliberate, re-measured decision.
    assert derive.QUANT_OPTIONS == {
        "per_channel": True,
        "reduce_range": False,
        "op_types_to_quantize": ["MatMul"],
    }
    assert derive.quant_options(saturates=True)["reduce_range"] is True
    assert derive.quant_options(saturates=False) == derive.QUANT_OPTIONS


def test_cpus_without_vnni_are_told_apart() -> None:
    avx2 = "processor : 0\nflags : fpu sse4_2 avx avx2 fma\n"
    assert derive.int8_saturates(avx2)
    assert not derive.int8_saturates(avx2.replace("avx2", "avx2 avx512_vnni"))
    assert not derive.int8_saturates(avx2.replace("avx2", "avx2 avx_vnni"))
    assert not derive.int8_saturates("processor : 0\nFeatures : fp asimd asimddp\n")


def test_source_prefers_fp32_when_both_are_shipped(model_copy: Path) -> None:
    if not (model_copy / derive.FP32_GRAPH).exists():
        (model_copy / derive.FP32_GRAPH).write_bytes(b"placeholder")
    assert derive.source_graph(model_copy).name == derive.FP32_GRAPH


def test_an_fp32_cpu_graph_is_derived_without_quantising(
    tiny: TinyModel, model_copy: Path, tmp_path: Path, quantize_calls: list[Path]
) -> None:
    """Precision fp32 (the embedder's): an fp16 source is converted back and cached under its
    own name; an fp32 source is used where it lies."""
    cache = tmp_path / "cache"
    graph = derive.cpu_graph(model_copy, cache, precision="fp32")
    assert quantize_calls == []
    source = derive.source_graph(model_copy)
    if source.name == derive.FP32_GRAPH:
        assert graph == source
        assert not cache.exists() or not list(cache.glob("*.onnx"))
        return
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    assert graph == cache / f"{model_copy.name}-{digest}.fp32.onnx"
    assert _fp16_left(onnx.load(str(graph)).graph) == []
    assert derive.cpu_graph(model_copy, cache, precision="fp32") == graph  # cached
    # The int8 graph of the same source is another cache entry.
    assert derive.cpu_graph(model_copy, cache) != graph
    assert len(quantize_calls) == 1
    served = PairClassifier.from_graph(model_copy, graph, threads=1)
    original = PairClassifier.from_graph(model_copy, tiny.fp32_graph, threads=1)
    pairs = mixed_pairs(8, seed=3)
    np.testing.assert_allclose(served.score(pairs), original.score(pairs), atol=5e-3)


def test_an_unknown_precision_is_refused(model_copy: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="precision"):
        derive.cpu_graph(model_copy, tmp_path, precision="int4")  # type: ignore[arg-type]
