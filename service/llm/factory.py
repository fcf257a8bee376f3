"""Which LLM backend the service talks to, chosen from the settings."""

from __future__ import annotations

from service.config import Settings
from service.llm.base import LLMClient
from service.llm.openai_compat import OpenAICompatibleClient


def build_llm(settings: Settings) -> LLMClient | None:
    """The configured backend: an OpenAI-compatible server when TAILOR_LLM_BASE_URL is set,
    else the embedded model (loaded here: blocking, so call it from a thread in a running loop).

    None means no generative model is available (TAILOR_LOAD_LLM=false); callers answer 503 for
    what needs one.
    """
    if settings.llm_base_url:
        return OpenAICompatibleClient.from_settings(settings)
    if not settings.load_llm:
        return None
    # Imported here so that a deployment with a server never loads llama.cpp's library.
    from service.llm.embedded import EmbeddedLLMClient

    return EmbeddedLLMClient.from_settings(settings)
