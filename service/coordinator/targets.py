"""Targets at the coordinator: short forms matched to workers, and what live workers serve.

Rule for a short form (``znver3``, ``llvm -mcpu=znver3 [-num-threads=N]``):
it names the CPU, not a feature list, so it resolves to the target of the
registered workers of that CPU (their detected features, which a hypervisor
may have trimmed below LLVM's list, so features are not required to match).
Workers of that CPU with several feature sets narrow to those having all of
LLVM's features for the CPU; still several is a 422 naming them (write the
full target). With no worker of that CPU, the target is LLVM's features of
it, and the job waits, saying so, as for any target no worker serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ir.target import Target, parse_short
from service.coordinator.errors import Invalid
from service.db import models as m
from tuner.database import utc_now

__all__ = ["ServedTarget", "resolve_short", "served_with_counts"]


@dataclass(frozen=True)
class ServedTarget:
    """A canonical target live workers serve, and how many of them."""

    canonical: str
    workers: int


def served_with_counts(session: Session, *, alive_seconds: float) -> list[ServedTarget]:
    """Targets of live workers in good standing, with the number of workers each, sorted."""
    alive_since = utc_now() - timedelta(seconds=alive_seconds)
    rows = session.execute(
        select(m.Target.canonical, func.count(m.Worker.id))
        .join(m.Worker, m.Worker.target_id == m.Target.id)
        .where(m.Worker.last_heartbeat >= alive_since, m.Worker.quarantined_at.is_(None))
        .group_by(m.Target.canonical)
        .order_by(m.Target.canonical)
    )
    return [ServedTarget(canonical, int(n)) for canonical, n in rows]


def resolve_short(
    session: Session, text: str, served: list[str], loc: tuple[str, ...]
) -> Target | None:
    """The target a short form means here (see the module's rule); None if `text` is not one.

    `served` is the canonical targets of the workers (live ones, else all).
    """
    from codegen.host import parse_target

    short = parse_short(text)
    if short is None:
        return None
    same_cpu = {t for t in (parse_target(c).with_threads(1) for c in served) if t.cpu == short.cpu}
    if len(same_cpu) > 1:
        wanted = set(short.features)
        same_cpu = {t for t in same_cpu if wanted <= set(t.features)} or same_cpu
    if len(same_cpu) > 1:
        raise Invalid(
            loc,
            f"{short.cpu!r} is ambiguous: workers of that CPU have {len(same_cpu)} feature sets; "
            "write the full target (GET /v1/targets lists them)",
        )
    if same_cpu:
        return same_cpu.pop().with_threads(short.num_threads)
    return short
