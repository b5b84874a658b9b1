"""API tokens: bearer secrets with a role and an owner, stored only as hashes.

A secret is `lt_` + 43 URL-safe characters (256 random bits); the database keeps
its sha256. A fast hash is enough for a secret of that strength (no
dictionary to guess from) and lets a request find its token by an index
lookup. Jobs belong to the owner, not to the token, so a rotated token (a new
one for the same owner, the old one revoked) keeps its jobs.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.coordinator.errors import Invalid, NotFound
from service.db import models as m
from tuner.database import utc_now

ROLES = ("admin", "client", "worker")
SECRET_PREFIX = "lt_"
ADMIN_TOKEN_OWNER = "admin"
"""The owner of the first admin token, the one from LOOMTUNE_ADMIN_TOKEN."""

OWNER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@+\-]{0,127}$"
_OWNER = re.compile(OWNER_PATTERN)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Caller:
    """Who is asking: the token's id (None for none), role and owner."""

    token_id: int | None
    role: str
    owner: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def check_owner(owner: str, loc: tuple[str, ...] = ("body", "owner")) -> str:
    if not isinstance(owner, str) or not _OWNER.fullmatch(owner):
        raise Invalid(
            loc,
            f"an owner is 1-128 letters, digits or _.@+- starting with a letter or digit, got {owner!r}",
        )
    return owner


def check_role(role: str, loc: tuple[str, ...] = ("body", "role")) -> str:
    if role not in ROLES:
        raise Invalid(loc, f"role must be one of {', '.join(ROLES)}, got {role!r}")
    return role


def create_token(session: Session, role: str, owner: str | None = None) -> tuple[m.ApiToken, str]:
    """A new token and its secret (the only time the secret exists outside the caller)."""
    check_role(role)
    owner = check_owner(owner if owner is not None else role)
    secret = new_secret()
    token = m.ApiToken(
        hashed_secret=hash_secret(secret), role=role, owner=owner, created_at=utc_now()
    )
    session.add(token)
    session.flush()
    return token, secret


def list_tokens(session: Session, *, include_revoked: bool = True) -> list[m.ApiToken]:
    query = select(m.ApiToken).order_by(m.ApiToken.id)
    if not include_revoked:
        query = query.where(m.ApiToken.revoked_at.is_(None))
    return list(session.scalars(query))


def revoke_token(session: Session, token_id: int) -> m.ApiToken:
    """Revoke a token (revoking twice keeps the first time)."""
    token = session.get(m.ApiToken, token_id)
    if token is None:
        raise NotFound(f"token {token_id} not found")
    if token.revoked_at is None:
        token.revoked_at = utc_now()
        session.flush()
    return token


def authenticate_hash(session: Session, hashed: str) -> Caller | None:
    """The caller a secret's hash (`hash_secret`) stands for; None when unknown or revoked."""
    token = session.execute(
        select(m.ApiToken.id, m.ApiToken.role, m.ApiToken.owner, m.ApiToken.revoked_at).where(
            m.ApiToken.hashed_secret == hashed
        )
    ).one_or_none()
    if token is None or token.revoked_at is not None:
        return None
    return Caller(token.id, token.role, token.owner)


class CallerCache:
    """The callers of secrets seen in the last `ttl` seconds, so that a busy worker's requests
    skip the token lookup (a connection, a query: a tenth of a lease's cost).

    Only tokens that authenticated are kept: a new token works at once. A
    revoked token is refused at once by the coordinator that revoked it
    (`forget`), and within `ttl` by every other process on the database
    (another coordinator, `loomtune token revoke`). `ttl` 0 keeps nothing.
    """

    def __init__(
        self, ttl: float, *, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[Caller, float]] = {}
        self._lock = threading.Lock()

    def get(self, hashed: str) -> Caller | None:
        with self._lock:
            entry = self._entries.get(hashed)
            if entry is None:
                return None
            if entry[1] <= self._clock():
                del self._entries[hashed]
                return None
            return entry[0]

    def put(self, hashed: str, caller: Caller) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[hashed] = (caller, self._clock() + self.ttl)

    def forget(self, token_id: int) -> None:
        with self._lock:
            for hashed in [h for h, (c, _) in self._entries.items() if c.token_id == token_id]:
                del self._entries[hashed]


def ensure_admin_token(session: Session, secret: str) -> None:
    """Store LOOMTUNE_ADMIN_TOKEN's hash as an admin token, once (a revoked one stays revoked),
    and revoke the token an earlier value of the variable stored: rotating the variable
    rotates the token.

    Two coordinators starting together on one database both try: the insert
    skips a hash that is already there. (Two started with different values
    revoke each other's: start them with one.)
    """
    from sqlalchemy import update

    from service.db.store import dialect_insert

    hashed = hash_secret(secret)
    session.execute(
        dialect_insert(session, m.ApiToken)
        .values(
            hashed_secret=hashed,
            role="admin",
            owner=ADMIN_TOKEN_OWNER,
            created_at=utc_now(),
            from_env=True,
        )
        .on_conflict_do_nothing()
    )
    session.execute(
        update(m.ApiToken)
        .where(
            m.ApiToken.from_env.is_(True),
            m.ApiToken.hashed_secret != hashed,
            m.ApiToken.revoked_at.is_(None),
        )
        .values(revoked_at=utc_now())
    )
