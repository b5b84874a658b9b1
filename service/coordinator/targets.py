"""Targets at the coordinator: short forms matched to workers, and what live workers serve.

Rule for a short form (``znver3``, ``llvm -mcpu=znver3 [-num-threads=N]``):
it names the CPU, not a feature list, so it resolves to the target of the
registered workers of that CPU (their detected features, which a hypervisor
may have trimmed below LLVM's list, so features are not required to match).
Workers of that CPU with several feature sets narrow to those having all of
LLVM's features for the CPU; still several is a 422 naming them (write the
full target). With no worker of that CPU, the target is LLVM's features of
it, and the job waits, saying so, as for any target no worker serves.

`host` means the CPU of this coordinator's workers. A job submitted for `host`
before any worker registered waits under the placeholder target `host
-num-threads=N` (no worker ever serves it); the job runner binds it to the
workers' CPU as soon as the live ones serve exactly one (`bind_host_jobs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ir.target import Target, parse_short
from service.coordinator.errors import Invalid
from service.db import models as m
from service.db.store import dialect_insert
from tuner.database import utc_now

MAX_TARGET = 2048
MAX_CPU = 128
MAX_THREADS = 1024
"""The most threads a target may name: more than any worker this runs on has cores (and
`targets.threads` is a 32-bit integer)."""
HOST = "host"


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


def check_target_size(parsed: Any, loc: tuple[str | int, ...]) -> str:
    """The canonical spelling of a parsed target, refused (422) when too long or too wide."""
    if not 1 <= parsed.num_threads <= MAX_THREADS:
        raise Invalid(
            loc, f"-num-threads must be between 1 and {MAX_THREADS}, got {parsed.num_threads}"
        )
    canonical = parsed.canonical()
    if len(canonical) > MAX_TARGET or len(parsed.cpu) > MAX_CPU:
        raise Invalid(
            loc, f"target too long (cpu at most {MAX_CPU}, target at most {MAX_TARGET} characters)"
        )
    return canonical


def served_targets(session: Session, *, alive_seconds: float) -> list[str]:
    """Canonical targets of live workers (else of every registered worker), sorted."""
    alive_since = utc_now() - timedelta(seconds=alive_seconds)
    base = select(m.Target.canonical).join(m.Worker, m.Worker.target_id == m.Target.id).distinct()
    alive = sorted(session.scalars(base.where(m.Worker.last_heartbeat >= alive_since)))
    return alive or sorted(session.scalars(base))


def resolve_target(
    session: Session,
    text: str,
    *,
    alive_seconds: float,
    loc: tuple[str, ...] = ("body", "target"),
    defer_host: bool = False,
) -> str:
    """The canonical target of a submission; `host` means the CPU of this coordinator's workers.

    `host` is refused when workers of several CPUs are registered (ambiguous), and when
    none is unless `defer_host` (a job: it waits under `pending_host`, saying so); an
    explicit target no worker serves is accepted (the job waits, and says so).
    """
    from codegen.host import parse_target
    from ir.target import TargetError

    if not isinstance(text, str) or len(text) > MAX_TARGET:
        raise Invalid(loc, f"a target is a string of at most {MAX_TARGET} characters")
    served = served_targets(session, alive_seconds=alive_seconds)
    try:
        parsed = resolve_short(session, text, served, loc) or parse_target(text)
    except TargetError as e:
        raise Invalid(loc, str(e)) from None
    if text.split()[0] == "host":
        machines = {parse_target(t).with_threads(1) for t in served}
        if not machines and defer_host:
            return pending_host(parsed.num_threads, loc)
        if not machines:
            raise Invalid(
                loc,
                "'host' means the CPU of this coordinator's workers and none is registered; name the target (llvm -mcpu=...)",
            )
        if len(machines) > 1:
            names = ", ".join(sorted(t.canonical() for t in machines))
            raise Invalid(
                loc, f"'host' is ambiguous: workers serve {len(machines)} CPUs ({names}); name one"
            )
        parsed = machines.pop().with_threads(parsed.num_threads)
    return check_target_size(parsed, loc)


def target_id(session: Session, canonical: str) -> int:
    """The id of a canonical target, created when new (concurrent creators agree)."""
    from codegen.host import parse_target

    found = session.scalar(select(m.Target.id).where(m.Target.canonical == canonical))
    if found is None:
        threads = host_threads(canonical)
        parsed = parse_target(canonical) if threads is None else None
        session.execute(
            dialect_insert(session, m.Target)
            .values(
                canonical=canonical,
                cpu=parsed.cpu if parsed else HOST,
                features=list(parsed.features) if parsed else [],
                threads=parsed.num_threads if parsed else threads,
            )
            .on_conflict_do_nothing()
        )
        found = session.scalar(select(m.Target.id).where(m.Target.canonical == canonical))
    assert found is not None
    return found


def pending_host(threads: int, loc: tuple[str, ...]) -> str:
    """The placeholder target of a `host` job submitted before any worker registered."""
    if not 1 <= threads <= MAX_THREADS:
        raise Invalid(loc, f"-num-threads must be between 1 and {MAX_THREADS}, got {threads}")
    return f"{HOST} -num-threads={threads}"


def host_threads(canonical: str) -> int | None:
    """The threads of a placeholder `host -num-threads=N` target; None for a real one."""
    words = canonical.split()
    if not words or words[0] != HOST:
        return None
    return int(words[1].partition("=")[2]) if len(words) > 1 else 1


def bind_host_jobs(session: Session, *, alive_seconds: float) -> int:
    """Jobs waiting under a placeholder `host` target take the CPU of the live workers once
    they serve exactly one (their children too); how many were bound."""
    from codegen.host import parse_target

    waiting = session.execute(
        select(m.Job, m.Target.canonical)
        .join(m.Target, m.Target.id == m.Job.target_id)
        .where(m.Target.cpu == HOST, m.Job.status.in_(("queued", "running")))
        .with_for_update(of=m.Job)
    ).all()
    if not waiting:
        return 0
    machines = {
        parse_target(t.canonical).with_threads(1)
        for t in served_with_counts(session, alive_seconds=alive_seconds)
    }
    if len(machines) != 1:
        return 0
    machine = machines.pop()
    for job, canonical in waiting:
        threads = host_threads(canonical) or 1
        job.target_id = target_id(session, machine.with_threads(threads).canonical())
        job.updated_at = utc_now()
    session.flush()
    return len(waiting)


def host_waiting_reason(canonical: str) -> str | None:
    """Why a job under a placeholder `host` target waits (None: a real target)."""
    if host_threads(canonical) is None:
        return None
    return (
        "'host' means the CPU of this coordinator's workers and none serves yet; "
        "the job starts when a worker registers"
    )
