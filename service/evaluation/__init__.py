"""Dataset loaders, judges, metrics and reports."""
