"""Persistence: SQLAlchemy models and tenant-scoped repositories. Only this package speaks SQL."""
