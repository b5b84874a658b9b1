"""Errors of the coordinator, as plain exceptions: the API turns each into its status code.

The coordinator's logic (`service/coordinator/jobs.py`, `service/coordinator/leases.py`, `service/coordinator/tokens.py`)
raises these and knows nothing of HTTP frameworks; the app maps them to JSON
(`{"detail": ...}`, and for 422 the same `[{"loc", "msg", "type"}]` list FastAPI
uses for its own validation errors, so every 422 names its field the same way).
"""

from __future__ import annotations

from collections.abc import Sequence

from ir.errors import LoomtuneError


class ApiError(LoomtuneError):
    """A request the coordinator refuses; `status` is the HTTP status code."""

    status: int = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    """The request contradicts the current state (a lease no longer held, a finished job)."""

    status = 409


class TooMany(ApiError):
    """A per-owner limit is reached (LOOMTUNE_MAX_ACTIVE_JOBS)."""

    status = 429


class Invalid(ApiError):
    """A validation error naming the field: `loc` as FastAPI spells it, e.g. ("body", "trials")."""

    status = 422

    def __init__(self, loc: Sequence[str | int], msg: str) -> None:
        super().__init__(f"{'.'.join(str(p) for p in loc)}: {msg}")
        self.loc = tuple(loc)
        self.msg = msg

    def errors(self) -> list[dict[str, object]]:
        return [{"loc": list(self.loc), "msg": self.msg, "type": "value_error"}]
