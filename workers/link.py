"""The worker's HTTP link to the coordinator: the client side of the wire protocol (`workers/protocol.py`).

Requests carry the worker's token; while the coordinator is unreachable
(connection refused, timeouts, 5xx, 429) a call retries with exponential
backoff and jitter, and the link logs one line when it goes down and one when
it is back. A 4xx answer is `Rejected`; a call that gave up is `Unreachable`.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import httpx

from workers import protocol as P
from workers.config import WorkerConfig


class Unreachable(Exception):
    """The coordinator did not answer (or answered 5xx) and the caller did not want to wait."""


class Rejected(Exception):
    """The coordinator answered 4xx: `status` and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Link:
    """HTTP to the coordinator with the worker's token; retries with backoff while it is unreachable.

    Shared by the worker's threads. Its state (up / down) changes are logged
    once each: "unreachable (why); retrying" and "reachable again".
    """

    def __init__(
        self, config: WorkerConfig, stop: threading.Event, log: Callable[[str], None]
    ) -> None:
        self.config = config
        self.base = config.coordinator.rstrip("/")
        self.stop = stop
        self.log = log
        self.http = httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {config.token}"},
            timeout=httpx.Timeout(
                config.request_timeout_seconds, connect=min(3.0, config.request_timeout_seconds)
            ),
            verify=config.verify,
        )
        self._lock = threading.Lock()
        self._down: bool | None = None  # None: not known yet
        self.failures = 0
        """Requests that found the coordinator unreachable (for tests and logs)."""

    def close(self) -> None:
        self.http.close()

    def _went_down(self, why: str) -> None:
        with self._lock:
            self.failures += 1
            if self._down:
                return
            self._down = True
        self.log(
            f"coordinator {self.base} unreachable ({why}); retrying with backoff (up to {self.config.max_backoff_seconds:g} s)"
        )

    def _went_up(self) -> None:
        with self._lock:
            was_down, self._down = self._down, False
        if was_down:
            self.log(f"coordinator {self.base} reachable again")

    def call(
        self,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        retry: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """POST (GET when `body` is None and the path is not a worker action) and the JSON answer.

        With `retry`, waits out an unreachable coordinator (backoff, until the
        worker stops: then `Unreachable`); without, one try. 4xx: `Rejected`.
        """
        delay = self.config.backoff_seconds
        while True:
            try:
                r = (
                    self.http.post(path, json=body, timeout=timeout)
                    if timeout
                    else self.http.post(path, json=body)
                )
            except httpx.TransportError as e:
                why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            else:
                if r.status_code < 400:
                    self._went_up()
                    try:
                        return r.json()
                    except ValueError:
                        raise P.ProtocolError(
                            f"{path}: the coordinator's answer is not JSON"
                        ) from None
                if r.status_code < 500 and r.status_code != 429:
                    self._went_up()
                    raise Rejected(r.status_code, _detail(r))
                why = f"HTTP {r.status_code}: {_detail(r)[:200]}"
            self._went_down(why)
            if not retry or self.stop.is_set():
                raise Unreachable(why)
            if self.stop.wait(delay * random.uniform(0.8, 1.2)):
                raise Unreachable(why)
            delay = min(delay * 2, self.config.max_backoff_seconds)


def _detail(r: httpx.Response) -> str:
    """The API's message: `detail` (a string, or FastAPI's list of {loc, msg})."""
    try:
        detail = r.json().get("detail")
    except (ValueError, AttributeError):
        return r.text.strip()[:500] or r.reason_phrase
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', '')}"
            if isinstance(d, dict)
            else str(d)
            for d in detail
        )
    return str(detail)
