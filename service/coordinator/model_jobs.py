"""Model jobs: a whole model's distinct tasks tuned under one budget, by remote workers.

The client sends the model's structure without its weights (`frontend.stripped`,
`loomtune.graph/1`); the coordinator rebuilds the graph (stripped weights cost no
memory), cuts it into tasks with `ir.graph.plan.build_plan` — the fusion rules `tune
--model` uses, so the workload keys are the ones the client's own plan of the real
model has — and stores:

- the model job (`jobs.model`: name, model key, and per task its key, op, pattern,
  count and FLOPs; `jobs.workload_key` NULL, `jobs.budget` the model's budget), and
- one child job per distinct task (`jobs.parent_id`): its workload spec, target,
  strategy and seed. Its candidates are leased, measured, counted, recorded and
  confirmed exactly as any job's, so the leases' exactly-once accounting holds.

The job runner (`runner.JobRunnerService`) drives the children with the task scheduler
under the parent's budget; claiming, parking, finishing and cancelling the parent
carries its children along (`jobs.claim_job`, `jobs.park_job`, `jobs._end`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.coordinator import jobs as J
from service.coordinator.errors import Invalid
from service.coordinator.records import best_of_jobs
from service.coordinator.targets import target_id
from service.db import models as m
from service.db.store import fetch_records, select_records
from tuner.database import utc_now

MAX_NODES = 20_000
"""Nodes of a submitted graph (BERT-base's 12 layers are 504)."""
MAX_TASKS = 512
"""Distinct tasks of a model job (BERT-base has 8, ResNet-18 about 20)."""
LOC = ("body", "model")


def plan_model(doc: Any) -> Any:
    """The plan (`ir.graph.plan.ModelPlan`) of a stripped graph; a malformed graph, or one
    that cannot be cut into tasks, is a 422 naming what is wrong."""
    from frontend.stripped import StrippedGraphError, load_stripped
    from ir.errors import LoomtuneError
    from ir.graph.plan import build_plan
    from ir.library import max_bytes

    try:
        graph = load_stripped(doc, max_bytes=max_bytes(), max_nodes=MAX_NODES)
    except StrippedGraphError as e:
        raise Invalid((*LOC, e.path) if e.path else LOC, e.message) from None
    except RecursionError:
        raise Invalid(LOC, "the graph is nested too deeply") from None
    try:
        plan = build_plan(graph)
    except LoomtuneError as e:
        raise Invalid((*LOC, "nodes"), f"the graph cannot be cut into tasks: {e}") from None
    except Exception as e:  # a graph no importer made can trip any pass: still the input's fault
        raise Invalid(
            (*LOC, "nodes"), f"the graph cannot be cut into tasks ({type(e).__name__}: {e})"
        ) from None
    tasks = plan.implementations()
    if len(tasks) > MAX_TASKS:
        raise Invalid(LOC, f"{len(tasks)} distinct tasks, more than {MAX_TASKS}")
    if not tasks:
        raise Invalid(LOC, "the model computes nothing to tune (no kernels)")
    for i, (*_, task) in enumerate(tasks):
        J.resolve_task(task.spec(), loc=(*LOC, f"tasks[{i}]"))
    return plan


def task_groups(model: Mapping[str, Any]) -> list[int]:
    """Per task of a model job, the plan task it implements (a job stored before
    alternatives: its own index)."""
    return [t.get("group", i) for i, t in enumerate(model["tasks"])]


def fastest_per_group(tasks: Sequence[Mapping[str, Any]], best: Mapping[str, float]) -> set[str]:
    """Keys of the model's tasks that count in its time: per plan task (`group`; a job stored
    before alternatives has one task per group) its implementation with the lowest `best`;
    empty unless every group has a best."""
    fastest: dict[int, tuple[float, str]] = {}
    groups = task_groups({"tasks": tasks})
    for t, g in zip(tasks, groups):
        ms = best.get(t["key"])
        if ms is not None and (g not in fastest or ms < fastest[g][0]):
            fastest[g] = (ms, t["key"])
    return {key for _, key in fastest.values()} if fastest.keys() == set(groups) else set()


def create_model_job(
    session: Session,
    *,
    owner: str,
    plan: Any,
    target: str,
    trials: int,
    strategy: str,
    seed: int | None,
) -> m.Job:
    """A queued model job and one queued child job per distinct task of `plan`."""
    now = utc_now()
    tid = target_id(session, target)
    model = {
        "name": plan.source.name,
        "model_key": plan.source.key,
        "tasks": [
            {
                "key": task.key,
                "op": "fused" if task.is_custom else task.op,
                "pattern": label,
                "count": plan.tasks[group].count,
                "flops": plan.tasks[group].flops,
                "group": group,  # implementations of one plan task share it
            }
            for group, label, task in plan.implementations()
        ],
    }
    parent = m.Job(
        owner=owner,
        workload_key=None,
        target_id=tid,
        budget=trials,
        strategy=strategy,
        seed=seed,
        status="queued",
        trials_done=0,
        created_at=now,
        updated_at=now,
        model=model,
    )
    session.add(parent)
    session.flush()
    for *_, task in plan.implementations():
        J.commit_workload(session, task)
        session.add(
            m.Job(
                owner=owner,
                workload_key=task.key,
                target_id=tid,
                budget=trials,
                strategy=strategy,
                seed=seed,
                status="queued",
                trials_done=0,
                created_at=now,
                updated_at=now,
                workload_spec=task.spec(),
                parent_id=parent.id,
            )
        )
    session.flush()
    return parent


@dataclass(frozen=True)
class TaskView:
    """One distinct task of a model job: its progress and best so far."""

    key: str
    op: str
    pattern: str
    count: int
    job_id: int
    trials_done: int
    best_ms: float | None
    best_record_id: str | None
    share: float | None
    """count × best_ms over the model's sum of them; None until every task has a best."""


@dataclass(frozen=True)
class ModelView:
    name: str
    model_key: str
    tasks: list[TaskView]
    trials_done: int
    latency_ms: float | None
    """Sum over the tasks of count × best: the model's kernel time so far (None until every
    task has a best)."""


def model_views(session: Session, parents: Sequence[m.Job]) -> dict[int, ModelView]:
    """Per model job: its tasks with their trials, best and share of the model's time."""
    if not parents:
        return {}
    children = session.execute(
        select(m.Job.parent_id, m.Job.workload_key, m.Job.id, m.Job.trials_done).where(
            m.Job.parent_id.in_([p.id for p in parents])
        )
    ).all()
    by_key = {(p, k): (i, n) for p, k, i, n in children}
    best = best_of_jobs(session, [i for _, _, i, _ in children])
    out = {}
    for parent in parents:
        rows = []
        for t in parent.model["tasks"]:
            job_id, done = by_key.get((parent.id, t["key"]), (0, 0))
            ms, record_id = best.get(job_id, (None, None))
            rows.append((t, job_id, done, ms, record_id))
        runs = fastest_per_group(
            parent.model["tasks"], {t["key"]: ms for t, _, _, ms, _ in rows if ms is not None}
        )
        counted = [(t, ms) for t, *_, ms, _ in rows if t["key"] in runs]
        total = sum(t["count"] * ms for t, ms in counted) if runs else None
        tasks = [
            TaskView(
                t["key"],
                t["op"],
                t["pattern"],
                t["count"],
                job_id,
                done,
                ms,
                record_id,
                t["count"] * ms / total if total and t["key"] in runs else None,
            )
            for t, job_id, done, ms, record_id in rows
        ]
        out[parent.id] = ModelView(
            parent.model["name"],
            parent.model["model_key"],
            tasks,
            sum(t.trials_done for t in tasks),
            total,
        )
    return out


def model_tasks(session: Session, parent_id: int) -> list[tuple[int, Any, float]]:
    """(child job id, `ir.task.Task`, weight = how often it runs) per task of a model job,
    in the model's order; what the job runner schedules."""
    parent = session.get(m.Job, parent_id)
    assert parent is not None and parent.model is not None, f"job {parent_id} is no model job"
    children = {
        c.workload_key: c
        for c in session.scalars(select(m.Job).where(m.Job.parent_id == parent_id))
    }
    out = []
    for t in parent.model["tasks"]:
        child = children[t["key"]]
        out.append((child.id, J.job_task(child), float(t["count"])))
    return out


def model_history(session: Session, parent: m.Job) -> list[J.HistoryPoint]:
    """A model job's tuning curve: one point per record of its tasks, in measurement order;
    `best_ms` is the sum over tasks of count × best so far (None until each has one)."""
    tasks = parent.model["tasks"]
    counts = {t["key"]: t["count"] for t in tasks}
    children = select(m.Job.id).where(m.Job.parent_id == parent.id).scalar_subquery()
    query = (
        select_records()
        .where(m.Record.job_id.in_(children))
        .order_by(m.Record.measured_at, m.Record.record_id)
    )
    best: dict[str, float] = {}
    points = []
    for i, r in enumerate(fetch_records(session, query), start=1):
        if r.median_ms is not None and r.median_ms < best.get(r.workload_key, float("inf")):
            best[r.workload_key] = r.median_ms
        runs = fastest_per_group(tasks, best)
        total = sum(counts[k] * best[k] for k in runs) if runs else None
        points.append(J.HistoryPoint(i, r.record_id, r.status, r.median_ms, total, r.measured_at))
    return points
