"""The statuses each route really answers besides its success, for the OpenAPI schema.

Every /v1/ route can be 401 (no or an unknown token: the gate, `gate.py`), 403
(a token of another role, or a quarantined worker), 413 (a body beyond
LOOMTUNE_MAX_BODY_BYTES) and 503 (the database is away); routes add what they
do themselves (404, 409, 422, 429). All are `{"detail": ...}`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorOut(BaseModel):
    """An error: a sentence, or for 422 the list of `{loc, msg, type}` naming each field."""

    detail: str | list[dict[str, Any]]


_WHY = {
    401: "no bearer token, or one unknown or revoked",
    403: "a token of another role or owner, or a quarantined worker",
    404: "no such resource",
    409: "the request contradicts the current state",
    413: "the body is larger than LOOMTUNE_MAX_BODY_BYTES",
    422: "a field is invalid (the list names it)",
    429: "the owner already has LOOMTUNE_MAX_ACTIVE_JOBS queued or running jobs",
    503: "the database is unavailable; retry later",
}

COMMON = (401, 403, 413, 422, 503)


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these statuses (each `ErrorOut`)."""
    return {code: {"model": ErrorOut, "description": _WHY[code]} for code in codes}
