"""Attribute embeddings: computed once when the text is written and stored with it, so that
selection never re-embeds a user's attributes."""

from __future__ import annotations

from service.inference import ModelRegistry


async def embed_text(models: ModelRegistry | None, text: str) -> bytes | None:
    """The float32 vector as bytes, or None when this deployment runs without an embedder."""
    if models is None or models.embedder is None:
        return None
    vectors = await models.embedder.aencode([text])
    return models.embedder.to_bytes(vectors[0])
