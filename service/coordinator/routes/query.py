"""Query strings are checked like bodies: an unknown or repeated parameter is a 422 naming it.

FastAPI ignores query parameters a route does not declare and keeps the last of a repeated
one, so `?limt=5` or `?op=a&op=b` silently meant something else than the caller wrote.
Routers other than /v1/schedules (whose `op=` takes the operator's parameters as further
query parameters) depend on `known_query`.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from service.coordinator.errors import Invalid

_DECLARED: dict[int, frozenset[str]] = {}
"""Per route (by identity): the query parameters it declares."""


def known_query(request: Request) -> None:
    """Refuse a query parameter the route does not declare, or one given twice."""
    if not request.query_params:
        return
    route = request.scope.get("route")
    declared = _DECLARED.get(id(route))
    if declared is None:
        declared = _DECLARED.setdefault(id(route), frozenset(_query_names(route.dependant)))
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        if name not in declared:
            takes = ", ".join(sorted(declared)) or "none"
            raise Invalid(("query", name), f"unknown query parameter (this route takes: {takes})")
        if name in seen:
            raise Invalid(("query", name), "given more than once")
        seen.add(name)


def _query_names(dependant: Any) -> set[str]:
    """The query parameters of a route's dependency tree (FastAPI's `Dependant`)."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names
