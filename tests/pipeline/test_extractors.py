"""Which extractor a request gets: the request's choice, else TAILOR_EXTRACTOR; "auto" prefers
an LLM server, then the learned extractor's model, then the rules."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from service.config import Settings
from service.inference import ModelNotLoaded, ModelRegistry
from service.pipeline.budget import Budget
from service.pipeline.extraction.learned import LearnedExtractor
from service.pipeline.extraction.llm import LLMExtractor
from service.pipeline.extraction.rules import RuleExtractor
from service.pipeline.extractors import NoLLMForExtraction, choose
from tests.pipeline.extraction.test_llm import ScriptedLLM

BUDGET = Budget(max_pairs=1024, max_tokens=10_000)


class _Model:
    threshold = 0.4

    def score(self, pairs: Sequence[tuple[str, str]]) -> NDArray[np.float32]:
        return np.zeros(len(pairs), dtype=np.float32)


class _Batcher:
    async def submit(self, pairs: Sequence[tuple[str, str]]) -> NDArray[np.float32]:
        return np.zeros(len(pairs), dtype=np.float32)


def with_extractor() -> ModelRegistry:
    registry = ModelRegistry()
    registry.classifiers["extractor"] = _Model()  # type: ignore[assignment]
    registry.batchers["extractor"] = _Batcher()  # type: ignore[assignment]
    return registry


def test_auto_is_learned_when_its_model_is_loaded() -> None:
    chosen = choose(None, Settings(extractor="auto"), None, with_extractor(), BUDGET)
    assert isinstance(chosen, LearnedExtractor)
    assert chosen.threshold == 0.4


def test_auto_is_rules_without_the_model() -> None:
    assert isinstance(
        choose(None, Settings(extractor="auto"), None, ModelRegistry(), BUDGET), RuleExtractor
    )
    assert isinstance(choose(None, Settings(extractor="auto"), None, None, BUDGET), RuleExtractor)


def test_auto_is_llm_with_an_llm_server() -> None:
    settings = Settings(extractor="auto", llm_base_url="http://127.0.0.1:9/v1")
    llm = ScriptedLLM()
    assert isinstance(choose(None, settings, llm, with_extractor(), BUDGET), LLMExtractor)  # type: ignore[arg-type]


def test_the_request_overrides_the_setting() -> None:
    settings = Settings(extractor="learned")
    assert isinstance(choose("rules", settings, None, with_extractor(), BUDGET), RuleExtractor)


def test_learned_without_its_model_is_refused() -> None:
    with pytest.raises(ModelNotLoaded):
        choose("learned", Settings(), None, ModelRegistry(), BUDGET)


def test_llm_without_a_model_is_refused() -> None:
    with pytest.raises(NoLLMForExtraction):
        choose("llm", Settings(), None, with_extractor(), BUDGET)
