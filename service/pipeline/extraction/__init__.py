"""Attribute extraction: conversation -> candidate facts about the user, each with a grounded
quote. Every extractor (rules here; LLM-backed ones elsewhere) returns the same Candidate, and
every candidate passes quote_is_grounded before the verifier sees it."""

from service.pipeline.extraction.rules import RuleExtractor
from service.pipeline.extraction.types import (
    CATEGORIES,
    Candidate,
    Extractor,
    grounded,
    quote_is_grounded,
)

__all__ = ["CATEGORIES", "Candidate", "Extractor", "RuleExtractor", "grounded", "quote_is_grounded"]
