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
    """

    database_url: str | None = None
    admin_token: str | None = None
    lease_seconds: float = 60.0
    heartbeat_seconds: float = 10.0
    max_trials: int = 100_000
    auth_cache_seconds: float = 1.0

    def __post_init__(self) -> None:
        for name in ("lease_seconds", "heartbeat_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise SettingsError(f"{name} must be a positive number of seconds, got {value!r}")
        value = self.auth_cache_seconds
        if not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= 3600:
            raise SettingsError(f"auth_cache_seconds must be between 0 and 3600 s, got {value!r}")
        if (
            not isinstance(self.max_trials, int)
            or isinstance(self.max_trials, bool)
            or self.max_trials < 1
        ):
            raise SettingsError(f"max_trials must be a positive integer, got {self.max_trials!r}")
        if self.admin_token is not None and len(self.admin_token) < 16:
            raise SettingsError(f"{ADMIN_TOKEN_ENV} must be at least 16 characters")

    @property
    def alive_seconds(self) -> float:
        """A worker counts as alive while its last heartbeat is younger than this, in s."""
        return self.lease_seconds

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from the environment; keyword arguments (flags) win over it."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        if env.get(ADMIN_TOKEN_ENV, "").strip():
            values["admin_token"] = env[ADMIN_TOKEN_ENV].strip()
        for key, name, parse in (
            (LEASE_SECONDS_ENV, "lease_seconds", float),
            (HEARTBEAT_SECONDS_ENV, "heartbeat_seconds", float),
            (MAX_TRIALS_ENV, "max_trials", int),
            (AUTH_CACHE_SECONDS_ENV, "auth_cache_seconds", float),
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
                f"{e} (check the environment: {LEASE_SECONDS_ENV}, {HEARTBEAT_SECONDS_ENV}, {MAX_TRIALS_ENV}, {AUTH_CACHE_SECONDS_ENV})"
            ) from None
