"""The coordinator's settings: one frozen record, read from the environment once at start.

Flags first, then the environment (DESIGN.md "Configuration"); a bad value is
refused when the coordinator starts, never at the first request.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ir.errors import LoomtuneError

ADMIN_TOKEN_ENV = "LOOMTUNE_ADMIN_TOKEN"
LEASE_SECONDS_ENV = "LOOMTUNE_LEASE_SECONDS"
HEARTBEAT_SECONDS_ENV = "LOOMTUNE_HEARTBEAT_SECONDS"
MAX_TRIALS_ENV = "LOOMTUNE_MAX_TRIALS"
AUTH_CACHE_SECONDS_ENV = "LOOMTUNE_AUTH_CACHE_SECONDS"
MAX_BODY_BYTES_ENV = "LOOMTUNE_MAX_BODY_BYTES"
MAX_ACTIVE_JOBS_ENV = "LOOMTUNE_MAX_ACTIVE_JOBS"
METRICS_TOKEN_ENV = "LOOMTUNE_METRICS_TOKEN"

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""4 MiB: the largest body a worker or client sends is a post of results (at most 1024,
each a few hundred bytes and a message the daemon cuts at 100 000 characters; the daemon
splits a post the coordinator finds too large) or a custom workload definition (a few
KiB); 4 MiB is ten times a full post of typical results and bounds what one request can
make the coordinator hold (about 10x its size once parsed)."""
MIN_SECRET_CHARS = 16
MIN_SECRET_DISTINCT = 10
"""An operator's secret (LOOMTUNE_ADMIN_TOKEN, LOOMTUNE_METRICS_TOKEN) has at least 16
characters of which at least 10 differ: 128 bits for 22 random URL-safe characters,
and `aaaaaaaaaaaaaaaa` or `abababababababab` are refused."""


class SettingsError(LoomtuneError):
    """A setting (flag or environment variable) the coordinator cannot start with."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What the coordinator runs with.

    Attributes:
        database_url: the tuning database (None: `LOOMTUNE_DATABASE_URL`, else the embedded file).
        admin_token: the secret of the first admin token (`LOOMTUNE_ADMIN_TOKEN`), if any.
        lease_seconds: a worker holds a lease this long, in s, past its last
            heartbeat (or lease); then its candidates go to another worker.
        heartbeat_seconds: how often a worker is told to heartbeat, in s.
        max_trials: the largest budget a job may ask for.
        auth_cache_seconds: how long a coordinator trusts a token it has looked
            up, in s (0: never); a token revoked elsewhere (another coordinator,
            `loomtune token revoke`) is refused here after at most this long.
        max_body_bytes: the largest request body, checked before it is read (413 beyond).
        max_active_jobs: queued and running jobs one owner may have at once (429 beyond).
        metrics_token: the bearer secret /metrics asks for; None: /metrics is open.
    """

    database_url: str | None = None
    admin_token: str | None = None
    lease_seconds: float = 60.0
    heartbeat_seconds: float = 10.0
    max_trials: int = 100_000
    auth_cache_seconds: float = 1.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_active_jobs: int = 32
    metrics_token: str | None = None

    def __post_init__(self) -> None:
        for name in ("lease_seconds", "heartbeat_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise SettingsError(f"{name} must be a positive number of seconds, got {value!r}")
        value = self.auth_cache_seconds
        if not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= 3600:
            raise SettingsError(f"auth_cache_seconds must be between 0 and 3600 s, got {value!r}")
        for name, limit in (
            ("max_trials", None),
            ("max_body_bytes", 1 << 30),
            ("max_active_jobs", 1 << 20),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SettingsError(f"{name} must be a positive integer, got {value!r}")
            if limit is not None and value > limit:
                raise SettingsError(f"{name} must be at most {limit}, got {value!r}")
        check_secret(ADMIN_TOKEN_ENV, self.admin_token)
        check_secret(METRICS_TOKEN_ENV, self.metrics_token)

    @property
    def alive_seconds(self) -> float:
        """A worker counts as alive while its last heartbeat is younger than this, in s."""
        return self.lease_seconds

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from the environment; keyword arguments (flags) win over it."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for key, name in ((ADMIN_TOKEN_ENV, "admin_token"), (METRICS_TOKEN_ENV, "metrics_token")):
            if env.get(key, "").strip():
                values[name] = env[key].strip()
        for key, name, parse in (
            (LEASE_SECONDS_ENV, "lease_seconds", float),
            (HEARTBEAT_SECONDS_ENV, "heartbeat_seconds", float),
            (MAX_TRIALS_ENV, "max_trials", int),
            (AUTH_CACHE_SECONDS_ENV, "auth_cache_seconds", float),
            (MAX_BODY_BYTES_ENV, "max_body_bytes", int),
            (MAX_ACTIVE_JOBS_ENV, "max_active_jobs", int),
        ):
            text = env.get(key, "").strip()
            if not text:
                continue
            try:
                values[name] = parse(text)
            except ValueError:
                raise SettingsError(
                    f"{key} must be a {'number' if parse is float else 'whole number'}, got {text!r}"
                ) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return Settings(**values)  # type: ignore[arg-type]
        except SettingsError as e:
            raise SettingsError(
                f"{e} (check the environment: {LEASE_SECONDS_ENV}, {HEARTBEAT_SECONDS_ENV}, {MAX_TRIALS_ENV}, "
                f"{AUTH_CACHE_SECONDS_ENV}, {MAX_BODY_BYTES_ENV}, {MAX_ACTIVE_JOBS_ENV}, {ADMIN_TOKEN_ENV}, "
                f"{METRICS_TOKEN_ENV})"
            ) from None


def check_secret(env_name: str, secret: str | None) -> None:
    """Refuse an operator's secret too short or too repetitive to be 128 bits of entropy."""
    if secret is None:
        return
    if len(secret) < MIN_SECRET_CHARS or len(set(secret)) < MIN_SECRET_DISTINCT:
        raise SettingsError(
            f"{env_name} must be at least {MIN_SECRET_CHARS} characters with at least "
            f"{MIN_SECRET_DISTINCT} different ones (e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`)"
        )
