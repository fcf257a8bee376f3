"""Which extractor a request gets."""

from __future__ import annotations

from typing import Literal

from service.config import Settings
from service.llm.base import LLMClient
from service.pipeline.extraction.llm import LLMExtractor
from service.pipeline.extraction.rules import RuleExtractor
from service.pipeline.extraction.types import Extractor


class NoLLMForExtraction(RuntimeError):
    pass


def choose(
    name: Literal["rules", "llm"] | None, settings: Settings, llm: LLMClient | None
) -> Extractor:
    """``name`` from the request, else TAILOR_EXTRACTOR; "auto" means the LLM extractor only
    when an external LLM server is configured (the embedded model is too small to extract
    well, and the rules need no model at all)."""
    chosen = name or settings.extractor
    if chosen == "auto":
        chosen = "llm" if settings.llm_base_url else "rules"
    if chosen == "rules":
        return RuleExtractor()
    if llm is None:
        raise NoLLMForExtraction("the llm extractor needs a language model; none is configured")
    return LLMExtractor(llm, deadline_s=settings.llm_deadline_s)
