"""`tailor train relevance-adapter` on a small written-like corpus with a stand-in embedder and
cross-encoder: it learns a relation plain cosine misses, and writes what the service loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from service.inference.relevance_adapter import RelevanceAdapter
from service.training.relevance_adapter import AdapterConfig, train_relevance_adapter

pytestmark = pytest.mark.slow  # trains (about 20 s on 2 cores)

DIM = 16
TOPICS = 8


def vector(text: str) -> np.ndarray:
    """Prompts about topic t point along axis t; facts of topic t along axis t + TOPICS, so
    plain cosine between a prompt and its relevant fact is zero: only a learned map finds it."""
    kind, topic, rest = text.split(" ", 2)
    v = np.zeros(DIM, np.float32)
    v[int(topic) + (TOPICS if kind == "fact" else 0)] = 1.0
    v += np.random.default_rng(sum(map(ord, rest))).normal(0, 0.05, DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def encode(texts: list[str]) -> np.ndarray:
    return np.stack([vector(t) for t in texts])


def corpus(folder: Path) -> Path:
    rng = np.random.default_rng(3)
    for split, profiles in (("train", 30), ("val", 5), ("test", 2)):
        rows = []
        for p in range(profiles):
            topics = rng.choice(TOPICS, size=6, replace=False)
            facts = [f"fact {t} of {split} profile {p}" for t in topics]
            for q in range(4):
                t = int(topics[q % 6])
                rows.append(
                    {
                        "id": f"{split}{p}-{q}",
                        "profile_id": f"{split}{p}",
                        "prompt": f"prompt {t} {split} {p} {q}",
                        "attributes": facts,
                        "relevant": [facts.index(f"fact {t} of {split} profile {p}")],
                    }
                )
        (folder / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return folder


def test_trains_chooses_on_validation_and_writes_the_adapter(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    corpus(data)
    model = tmp_path / "model"
    model.mkdir()
    (model / "tailor.json").write_text(json.dumps({"task": "relevance", "threshold": 0.9}))
    (model / "metrics.json").write_text(json.dumps({"task": "relevance"}))

    def uninformed(pairs: list[tuple[str, str]]) -> np.ndarray:
        return np.full(len(pairs), 0.5, np.float32)

    result = train_relevance_adapter(
        data,
        model,
        encode,
        ("stand-in", DIM),
        uninformed,
        AdapterConfig(members=2, rank=4, max_epochs=6, batch_size=16, lr=2e-2),
    )
    assert result["validation"]["f1"] > 0.9  # cosine alone scores these pairs at zero
    assert result["weight"] > 0  # the stand-in cross-encoder alone knows nothing
    card = json.loads((model / "tailor.json").read_text())
    assert card["adapter"]["shortlist"] == result["shortlist"] == 6  # the latency budget's
    assert abs(card["threshold"] - result["threshold"]) < 1e-5
    assert "adapter" in json.loads((model / "metrics.json").read_text())
    adapter = RelevanceAdapter.load(model)
    assert adapter is not None and adapter.prompt_u.shape == (2, DIM, 4)
    adapter.check_embedder("stand-in", DIM)
