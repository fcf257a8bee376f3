"""Settings defaults that depend on the machine."""

from __future__ import annotations

import pytest

from service.config import Settings, available_cpus, serving_threads


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 1), (3, 2), (4, 2), (16, 8)])
def test_serving_threads_are_half_the_cpus_rounded_up(cpus: int, threads: int) -> None:
    assert serving_threads(cpus) == threads


def test_the_onnx_threads_default_to_the_serving_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAILOR_ONNX_INTRA_OP_THREADS", raising=False)
    assert Settings().onnx_intra_op_threads == serving_threads(available_cpus())
    monkeypatch.setenv("TAILOR_ONNX_INTRA_OP_THREADS", "3")
    assert Settings().onnx_intra_op_threads == 3
