"""Language-model access: one ``LLMClient`` protocol, its errors, and the backends behind it."""

from service.llm.base import (
    Completion,
    LLMBadResponse,
    LLMClient,
    LLMError,
    LLMTimeout,
    LLMUnavailable,
    Message,
    complete_structured,
    extract_json_object,
)
from service.llm.openai_compat import OpenAICompatibleClient

__all__ = [
    "Completion",
    "LLMBadResponse",
    "LLMClient",
    "LLMError",
    "LLMTimeout",
    "LLMUnavailable",
    "Message",
    "OpenAICompatibleClient",
    "complete_structured",
    "extract_json_object",
]
