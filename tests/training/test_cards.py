"""Model cards written at training time say which CPU graph the service runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.training.cards import write_card

EXPORT = {
    "fp16_bytes": 45_600_000,
    "int8_bytes": 58_900_000,
    "fp32_max_abs_diff": 0.0,
    "fp16_max_abs_diff": 0.001,
    "int8_max_abs_diff": 0.02,
    "seconds": 1.0,
}


@pytest.mark.parametrize(
    ("meta", "says", "not_says"),
    [
        ({"threshold": 0.5}, "int8 dynamic-quantized graph", "fp32 graph"),
        ({"threshold": 0.5, "cpu_precision": "fp32"}, '"cpu_precision": "fp32"', "int8 dynamic"),
    ],
)
def test_card_names_the_cpu_graph_the_service_runs(
    tmp_path: Path, meta: dict[str, object], says: str, not_says: str
) -> None:
    metrics = {
        "export": EXPORT,
        "validation": {"f1": 0.8},
        "command": "tailor train verifier",
        "train_config": {"epochs": 2},
        "machine": "x86_64 2 CPUs",
    }
    write_card("verifier", tmp_path, metrics, meta)
    files = (tmp_path / "card.md").read_text().split("## Base model")[0]
    assert says in files and not_says not in files
