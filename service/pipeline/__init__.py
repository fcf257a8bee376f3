"""The personalization pipeline: plain async code with no FastAPI imports."""
