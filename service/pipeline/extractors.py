"""Which extractor a request gets, and the extraction use case that runs it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from service.config import Settings
from service.inference import ModelRegistry
from service.llm.base import LLMClient
from service.pipeline import extract as extraction
from service.pipeline.budget import Budget
from service.pipeline.extract import Judged
from service.pipeline.extraction.learned import LearnedExtractor
from service.pipeline.extraction.llm import LLMExtractor
from service.pipeline.extraction.rules import RuleExtractor
from service.pipeline.extraction.types import Extractor

EXTRACTOR_MODEL = "extractor"


class NoLLMForExtraction(RuntimeError):
    pass


def choose(
    name: Literal["rules", "learned", "llm"] | None,
    settings: Settings,
    llm: LLMClient | None,
    models: ModelRegistry | None,
    budget: Budget,
) -> Extractor:
    """``name`` from the request, else TAILOR_EXTRACTOR; "auto" means the LLM extractor only
    when an external LLM server is configured (the embedded model is too small to extract
    well), else the learned extractor when its model is loaded, else the rules.

    The learned extractor's model work is charged to ``budget``. Raises ModelNotLoaded for
    "learned" without models/extractor and NoLLMForExtraction for "llm" without a language
    model.
    """
    chosen = name or settings.extractor
    if chosen == "auto":
        if settings.llm_base_url:
            chosen = "llm"
        elif models is not None and models.has(EXTRACTOR_MODEL):
            chosen = "learned"
        else:
            chosen = "rules"
    if chosen == "rules":
        return RuleExtractor()
    if chosen == "learned":
        if models is None:
            models = ModelRegistry()
        models.get(EXTRACTOR_MODEL)  # ModelNotLoaded when absent
        return LearnedExtractor(
            budget.scorer(models, EXTRACTOR_MODEL, "conversation"),
            models.classifier(EXTRACTOR_MODEL).threshold,
        )
    if llm is None:
        raise NoLLMForExtraction("the llm extractor needs a language model; none is configured")
    return LLMExtractor(llm, deadline_s=settings.llm_deadline_s)


async def extract_and_judge(
    conversation: Sequence[Mapping[str, str]],
    name: Literal["rules", "learned", "llm"] | None,
    settings: Settings,
    llm: LLMClient | None,
    models: ModelRegistry,
    budget: Budget,
) -> list[Judged]:
    """The model half of extraction, as ``POST /v1/extract`` and the per-turn job both run it:
    the chosen extractor's candidates, grounded, verified and embedded (no writes; the caller
    stores them with ``extract.store`` in its transaction)."""
    extractor = choose(name, settings, llm, models, budget)
    return await extraction.judge(conversation, extractor, models, budget=budget)
