"""Tailor: a personalization REST microservice."""

__version__ = "0.1.0"
