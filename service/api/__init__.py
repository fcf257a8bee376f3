"""HTTP layer: thin routers, dependencies, error model and middleware."""
