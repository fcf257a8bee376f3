"""Which LLM backend the service talks to, chosen from the settings."""

from __future__ import annotations

from service.config import Settings
from service.llm.base import LLMClient
from service.llm.openai_compat import OpenAICompatibleClient


def build_llm(settings: Settings) -> LLMClient | None:
    """The configured backend: an OpenAI-compatible server when TAILOR_LLM_BASE_URL is set.

    None means no generative model is available; callers answer 503 for what needs one.
    """
    if settings.llm_base_url:
        return OpenAICompatibleClient.from_settings(settings)
    return None
