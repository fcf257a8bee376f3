"""Dataset names resolve only to direct subfolders of the evaluation data directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.config import Settings
from service.evaluation.worker import DataGone, dataset_dir, resolve_data


def test_dataset_dir_stays_inside(tmp_path: Path) -> None:
    base = tmp_path / "eval"
    (base / "pf").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    os.symlink(tmp_path / "secret", base / "link")
    settings = Settings(data_dir=tmp_path, eval_data_dir=base)
    assert dataset_dir(settings, "pf") == (base / "pf").resolve()
    for name in ("", ".", "..", "../secret", "pf/..", "/etc", "a\\b", "link"):
        assert dataset_dir(settings, name) is None, name
    with pytest.raises(DataGone):
        resolve_data(settings, "t", {"dataset": "missing"})
    with pytest.raises(DataGone):
        resolve_data(settings, "t", {"upload_id": "0" * 32})
    assert Settings(data_dir=tmp_path).eval_data_root == tmp_path / "eval"
