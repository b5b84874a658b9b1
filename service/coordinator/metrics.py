"""Prometheus metrics of a coordinator (`GET /metrics`); every name starts with `loomtune_`.

Gauges of what is in the database (jobs by status, candidates pending and
leased, workers alive, records and failures by status) are read at scrape
time, so every coordinator on one database reports the same numbers; counters
of what this process handled (results, leases) and the measurements per
second over the last minute are kept in memory.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from datetime import timedelta

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from service.coordinator.jobs import JOB_STATUSES
from service.coordinator.settings import Settings
from service.db import models as m
from service.db.session import Sessions
from tuner.database import STATUSES, utc_now

RATE_WINDOW_S = 60.0
"""Measurements per second are averaged over this window, in s."""


class _Rate:
    """Events per second over the last `window` seconds (thread-safe)."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._events: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()
        self._started = time.monotonic()

    def add(self, count: int) -> None:
        with self._lock:
            self._events.append((time.monotonic(), count))

    def per_second(self) -> float:
        now = time.monotonic()
        with self._lock:
            while self._events and self._events[0][0] < now - self.window:
                self._events.popleft()
            total = sum(c for _, c in self._events)
        return total / max(min(self.window, now - self._started), 1.0)


class _DatabaseCollector(Collector):
    def __init__(self, sessions: Sessions, settings: Settings, rate: _Rate) -> None:
        self.sessions = sessions
        self.settings = settings
        self.rate = rate

    def collect(self) -> Iterator[Metric]:
        rate = GaugeMetricFamily(
            "loomtune_measurements_per_second",
            f"Results accepted per second by this process over the last {RATE_WINDOW_S:.0f} s",
        )
        rate.add_metric([], self.rate.per_second())
        yield rate
        up = GaugeMetricFamily(
            "loomtune_database_up", "Whether the last scrape could read the database"
        )
        try:
            families = list(self._from_database())
        except SQLAlchemyError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _from_database(self) -> Iterator[Metric]:
        now = utc_now()
        with self.sessions.read() as s:
            jobs = dict(  # a model job counts once, not once per task
                s.execute(
                    select(m.Job.status, func.count())
                    .where(m.Job.parent_id.is_(None))
                    .group_by(m.Job.status)
                ).all()
            )
            leased = s.scalar(
                select(func.count()).where(
                    m.Candidate.status == "leased", m.Candidate.lease_expires_at >= now
                )
            )
            expired = s.scalar(
                select(func.count()).where(
                    m.Candidate.status == "leased", m.Candidate.lease_expires_at < now
                )
            )
            pending = s.scalar(select(func.count()).where(m.Candidate.status == "pending"))
            alive = s.scalar(
                select(func.count()).where(
                    m.Worker.last_heartbeat >= now - timedelta(seconds=self.settings.alive_seconds)
                )
            )
            workers = s.scalar(select(func.count()).select_from(m.Worker))
            records = dict(
                s.execute(select(m.Record.status, func.count()).group_by(m.Record.status)).all()
            )
        family = GaugeMetricFamily("loomtune_jobs", "Jobs by status", labels=["status"])
        for status in JOB_STATUSES:
            family.add_metric([status], jobs.get(status, 0))
        yield family
        family = GaugeMetricFamily(
            "loomtune_candidates",
            "Candidates waiting for a worker (pending, expired leases included) and leased",
            labels=["status"],
        )
        family.add_metric(["pending"], (pending or 0) + (expired or 0))
        family.add_metric(["leased"], leased or 0)
        yield family
        family = GaugeMetricFamily(
            "loomtune_workers_alive", "Workers that heartbeated within the lease time"
        )
        family.add_metric([], alive or 0)
        yield family
        family = GaugeMetricFamily("loomtune_workers_registered", "Workers ever registered")
        family.add_metric([], workers or 0)
        yield family
        family = GaugeMetricFamily(
            "loomtune_records", "Measurements stored, by status", labels=["status"]
        )
        for status in STATUSES:
            family.add_metric([status], records.get(status, 0))
        yield family
        family = GaugeMetricFamily(
            "loomtune_failures", "Failed measurements stored, by status", labels=["status"]
        )
        for status in STATUSES:
            if status != "ok":
                family.add_metric([status], records.get(status, 0))
        yield family


class Metrics:
    """One coordinator's registry (not the global one: several apps live in one test process)."""

    def __init__(self, sessions: Sessions, settings: Settings) -> None:
        self.registry = CollectorRegistry()
        self.rate = _Rate(RATE_WINDOW_S)
        self.results = Counter(
            "loomtune_results",
            "Results accepted by this process, by status",
            ["status"],
            registry=self.registry,
        )
        for status in STATUSES:
            self.results.labels(status)  # every status shows, at 0, before the first result
        self.rejected_results = Counter(
            "loomtune_results_rejected",
            "Result posts refused because the lease was no longer held",
            registry=self.registry,
        )
        self.leased = Counter(
            "loomtune_candidates_leased",
            "Candidates handed out by this process",
            registry=self.registry,
        )
        self.registry.register(_DatabaseCollector(sessions, settings, self.rate))

    def accepted(self, statuses: list[str]) -> None:
        for status in statuses:
            self.results.labels(status).inc()
        self.rate.add(len(statuses))
