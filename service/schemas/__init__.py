"""Pydantic request and response models: the API contract."""
