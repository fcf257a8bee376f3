"""Every /v1 operation the client calls: a name, its method and its path as openapi.yaml
spells it. Both clients build their requests from this table only, and a test checks that it
holds exactly the /v1 operations of openapi.yaml."""

from __future__ import annotations

from urllib.parse import quote

OPERATIONS: dict[str, tuple[str, str]] = {
    "attributes.list": ("GET", "/v1/users/{user_id}/attributes"),
    "attributes.create": ("POST", "/v1/users/{user_id}/attributes"),
    "attributes.create_batch": ("POST", "/v1/users/{user_id}/attributes:batch"),
    "attributes.get": ("GET", "/v1/users/{user_id}/attributes/{attribute_id}"),
    "attributes.update": ("PATCH", "/v1/users/{user_id}/attributes/{attribute_id}"),
    "attributes.delete": ("DELETE", "/v1/users/{user_id}/attributes/{attribute_id}"),
    "attributes.history": ("GET", "/v1/users/{user_id}/attributes/{attribute_id}/history"),
    "users.erase": ("DELETE", "/v1/users/{user_id}"),
    "users.export": ("GET", "/v1/users/{user_id}/export"),
    "extract": ("POST", "/v1/extract"),
    "verify": ("POST", "/v1/verify"),
    "select": ("POST", "/v1/select"),
    "generate": ("POST", "/v1/generate"),
    "turn": ("POST", "/v1/turns"),
    "jobs.get": ("GET", "/v1/jobs/{job_id}"),
    "jobs.list": ("GET", "/v1/users/{user_id}/jobs"),
    "eval.list": ("GET", "/v1/eval"),
    "eval.start": ("POST", "/v1/eval"),
    "eval.upload": ("POST", "/v1/eval/uploads"),
    "eval.get": ("GET", "/v1/eval/{run_id}"),
    "eval.report": ("GET", "/v1/eval/{run_id}/report"),
    "eval.chart": ("GET", "/v1/eval/{run_id}/chart.png"),
}


def route(name: str, **params: str) -> tuple[str, str]:
    """The method and the path of operation ``name`` with ``params`` filled in (each escaped
    as one path segment; ``:`` and ``@``, which user ids may hold, are kept as they are)."""
    method, template = OPERATIONS[name]
    return method, template.format(**{k: quote(str(v), safe=":@") for k, v in params.items()})
