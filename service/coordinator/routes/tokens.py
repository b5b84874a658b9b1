"""/v1/tokens: create, list and revoke API tokens (admins)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from service.coordinator import tokens as T
from service.coordinator.deps import Admin, State
from service.coordinator.responses import COMMON, responses
from service.coordinator.routes.query import known_query
from service.coordinator.schemas import MAX_ID, TokenCreate, TokenCreated, TokenList, TokenOut
from service.db import models as m
from service.db.session import as_utc, as_utc_or_none

router = APIRouter(
    prefix="/v1/tokens",
    tags=["tokens"],
    responses=responses(*COMMON),
    dependencies=[Depends(known_query)],
)


def token_out(token: m.ApiToken) -> TokenOut:
    return TokenOut(
        id=token.id,
        role=token.role,  # type: ignore[arg-type]
        owner=token.owner,
        created_at=as_utc(token.created_at),
        revoked_at=as_utc_or_none(token.revoked_at),
    )


@router.post("", status_code=201, response_model=TokenCreated, summary="Create a token")
def create_token(body: TokenCreate, caller: Admin, state: State) -> TokenCreated:
    """The secret is in this answer only; the database keeps its hash."""
    with state.sessions.write() as session:
        token, secret = T.create_token(session, body.role, body.owner)
        out = token_out(token)
    return TokenCreated(**out.model_dump(), secret=secret)


@router.get("", response_model=TokenList, summary="List tokens")
def list_tokens(caller: Admin, state: State) -> TokenList:
    with state.sessions.read() as session:
        return TokenList(tokens=[token_out(t) for t in T.list_tokens(session)])


@router.delete(
    "/{token_id}", response_model=TokenOut, summary="Revoke a token", responses=responses(404)
)
def revoke_token(
    token_id: Annotated[int, Path(ge=1, le=MAX_ID)], caller: Admin, state: State
) -> TokenOut:
    """A revoked token is refused (401) from now on; its owner's jobs stay."""
    with state.sessions.write() as session:
        out = token_out(T.revoke_token(session, token_id))
    state.callers.forget(token_id)
    return out
