"""Dependencies of every route: the coordinator's state and the caller's identity.

`Admin`, `Client` and `WorkerRole` are the callers a route accepts: no or an
unknown or revoked token is a 401, a token of another role a 403. Admins may
do what clients and workers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.coordinator.errors import Forbidden, Unauthorized
from service.coordinator.gate import CALLER_KEY
from service.coordinator.metrics import Metrics
from service.coordinator.settings import Settings
from service.coordinator.tokens import Caller, CallerCache, authenticate_hash, hash_secret
from service.db.session import Sessions


@dataclass(frozen=True)
class CoordinatorState:
    settings: Settings
    sessions: Sessions
    metrics: Metrics
    callers: CallerCache


def get_state(request: Request) -> CoordinatorState:
    return request.app.state.loomtune


State = Annotated[CoordinatorState, Depends(get_state)]

_bearer = HTTPBearer(auto_error=False, description="a loomtune API token (`loomtune token create`)")


def lookup_caller(state: CoordinatorState, secret: str) -> Caller | None:
    """The caller a bearer secret stands for (cached for `auth_cache_seconds`); None: unknown or revoked."""
    hashed = hash_secret(secret)
    caller = state.callers.get(hashed)
    if caller is None:
        with state.sessions.read() as session:
            caller = authenticate_hash(session, hashed)
        if caller is not None:
            state.callers.put(hashed, caller)
    return caller


def get_caller(
    request: Request,
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    known = request.scope.get(CALLER_KEY)  # the gate authenticated it before the body was read
    if isinstance(known, Caller):
        return known
    if credentials is None or not credentials.credentials:
        raise Unauthorized("no bearer token (Authorization: Bearer <token>)")
    caller = lookup_caller(state, credentials.credentials)
    if caller is None:
        raise Unauthorized("the bearer token is unknown or revoked")
    return caller


def _requires(*roles: str):
    def check(caller: Annotated[Caller, Depends(get_caller)]) -> Caller:
        if caller.role not in roles and not caller.is_admin:
            raise Forbidden(f"a {caller.role} token cannot do this (needs {' or '.join(roles)})")
        return caller

    return check


Admin = Annotated[Caller, Depends(_requires("admin"))]
Client = Annotated[Caller, Depends(_requires("client"))]
WorkerRole = Annotated[Caller, Depends(_requires("worker"))]
