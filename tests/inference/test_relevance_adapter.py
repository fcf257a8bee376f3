"""The relevance adapter's arrays and card: loading, checks, its logits and the combined score."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from service.inference.relevance_adapter import (
    ADAPTER_FILE,
    AdapterMismatch,
    RelevanceAdapter,
    combine,
)

DIM, RANK, MEMBERS = 6, 2, 3


def write(folder: Path, *, card: dict[str, object] | None = None, **arrays: np.ndarray) -> Path:
    rng = np.random.default_rng(0)
    base = {
        "prompt_u": rng.normal(size=(MEMBERS, DIM, RANK)),
        "prompt_v": rng.normal(size=(MEMBERS, RANK, DIM)),
        "fact_u": rng.normal(size=(MEMBERS, DIM, RANK)),
        "fact_v": rng.normal(size=(MEMBERS, RANK, DIM)),
        "scale": np.array([8.0, 10.0, 12.0]),
        "bias": np.array([-2.0, -3.0, -4.0]),
    }
    np.savez(folder / ADAPTER_FILE, **(base | arrays))
    adapter = {"weight": 0.6, "shortlist": 8, "embedder": "mini", "dim": DIM}
    (folder / "tailor.json").write_text(
        json.dumps({"task": "relevance", "threshold": 0.5, "adapter": adapter | (card or {})})
    )
    return folder


def test_logits_are_the_members_mean_of_scaled_cosines(tmp_path: Path) -> None:
    adapter = RelevanceAdapter.load(write(tmp_path))
    assert adapter is not None and adapter.card.shortlist == 8
    rng = np.random.default_rng(1)
    prompt = rng.normal(size=DIM).astype(np.float32)
    facts = rng.normal(size=(4, DIM)).astype(np.float32)
    expected = np.zeros(4)
    for m in range(MEMBERS):
        q = prompt + prompt @ adapter.prompt_u[m] @ adapter.prompt_v[m]
        a = facts + facts @ adapter.fact_u[m] @ adapter.fact_v[m]
        cos = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
        expected += (adapter.scale[m] * cos + adapter.bias[m]) / MEMBERS
    np.testing.assert_allclose(adapter.logits(prompt, facts), expected, rtol=1e-4, atol=1e-5)


def test_no_adapter_named_is_none(tmp_path: Path) -> None:
    (tmp_path / "tailor.json").write_text(json.dumps({"task": "relevance", "threshold": 0.5}))
    assert RelevanceAdapter.load(tmp_path) is None


@pytest.mark.parametrize(
    ("card", "arrays", "message"),
    [
        ({"weight": 1.5}, {}, "not within"),
        ({"shortlist": 0}, {}, "shortlist"),
        ({"dim": 7}, {}, "the card says 7"),
        ({}, {"scale": np.ones(2)}, "scale has shape"),
        ({"weight": "heavy"}, {}, "adapter is invalid"),
    ],
)
def test_bad_adapters_fail_with_the_reason(
    tmp_path: Path, card: dict[str, object], arrays: dict[str, np.ndarray], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RelevanceAdapter.load(write(tmp_path, card=card, **arrays))


def test_a_missing_array_file_is_named(tmp_path: Path) -> None:
    write(tmp_path)
    (tmp_path / ADAPTER_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=ADAPTER_FILE):
        RelevanceAdapter.load(tmp_path)


def test_another_embedder_is_refused(tmp_path: Path) -> None:
    adapter = RelevanceAdapter.load(write(tmp_path))
    assert adapter is not None
    adapter.check_embedder("mini", DIM)
    with pytest.raises(AdapterMismatch, match="retrain"):
        adapter.check_embedder("other-model", DIM)
    with pytest.raises(AdapterMismatch):
        adapter.check_embedder("mini", DIM + 1)


def test_combine_weights_the_two_logits() -> None:
    a = np.array([2.0, -1.0], np.float32)
    ce = np.array([0.5, 0.9], np.float32)
    np.testing.assert_allclose(combine(a, ce, 0.0), ce, rtol=1e-4)
    np.testing.assert_allclose(combine(a, ce, 1.0), 1 / (1 + np.exp(-a)), rtol=1e-5)
    z = 0.25 * a + 0.75 * np.log(ce / (1 - ce))
    np.testing.assert_allclose(combine(a, ce, 0.25), 1 / (1 + np.exp(-z)), rtol=1e-5)
