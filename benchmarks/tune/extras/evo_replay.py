"""The evo_replay extra: the evolutionary search against replay on every workload of the run."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks.common import fmt
from benchmarks.tune.compare import Context, duel_at, median_or_none
from benchmarks.tune.suite import SUITE, SuiteWorkload, checkpoints
from benchmarks.tune.tuning import tune_one


def best_after(history: Sequence[float | None], n: int) -> float | None:
    """The best-so-far after `n` trials; a run that ended sooner (its design space ran
    out) keeps the last best it had. None without a valid candidate by then."""
    if not history:
        return None
    return history[min(n, len(history)) - 1]


def _duel_ratio(duel: dict[str, Any] | None) -> float | None:
    """Replay's kernel time over the evolutionary one's in a duel (1 when they are one kernel)."""
    if duel is None:
        return None
    if duel.get("same_kernel"):
        return 1.0
    return duel["replay_ms"] / duel["evolutionary_ms"]


def _ahead(evo: float | None, rep: float | None) -> bool | None:
    return None if evo is None or rep is None else evo < rep


def evo_vs_replay(
    ctx: Context,
    main_row: dict[str, Any] | None,
    workload: SuiteWorkload,
    trials: int,
    seeds: Sequence[int] = (),
    *,
    index: int = 0,
) -> dict[str, Any]:
    """Evolutionary against replay on `workload` for `trials`, each run in a fresh database.

    The evolutionary curve of seed ``ctx.seed`` is the main run's (`main_row`)
    when there is one; every other curve is a run of its own. Medians over `seeds`.
    `index` (the workload's place in the run) keeps the database files of
    different workloads apart.
    """
    seeds = list(seeds) or [ctx.seed]
    main_history = main_row["history_ms"] if main_row is not None else []
    per_seed = []
    for seed in seeds:
        evo_row = None
        if main_row is None or seed != ctx.seed:
            evo_row = tune_one(
                ctx,
                workload.task(),
                trials=trials,
                strategy="evolutionary",
                seed=seed,
                db_file=ctx.folder / f"evo-{index}-{seed}.sqlite",
                label=f"{workload.name} evolutionary seed {seed}",
                final=False,
            )
        rep_row = tune_one(
            ctx,
            workload.task(),
            trials=trials,
            strategy="replay",
            seed=seed,
            db_file=ctx.folder / f"replay-{index}-{seed}.sqlite",
            label=f"{workload.name} replay seed {seed}",
            final=False,
        )
        evo_history = evo_row["history_ms"] if evo_row is not None else main_history
        per_seed.append(
            {
                "seed": seed,
                "evolutionary_ms": best_after(evo_history, trials),
                "replay_ms": best_after(rep_row["history_ms"], trials),
                "evolutionary": evo_row,
                "replay": rep_row,
            }
        )

    def at(p: dict[str, Any], key: str, n: int) -> float | None:
        row = p[key]
        return best_after(row["history_ms"] if row is not None else main_history, n)

    by_checkpoint: dict[str, dict[str, Any]] = {}
    for n in checkpoints(trials):
        e_n = [v for p in per_seed if (v := at(p, "evolutionary", n)) is not None]
        r_n = [v for p in per_seed if (v := at(p, "replay", n)) is not None]
        e_med = statistics.median(e_n) if e_n else None
        r_med = statistics.median(r_n) if r_n else None
        by_checkpoint[str(n)] = {
            "evolutionary_ms": e_med,
            "replay_ms": r_med,
            "evolutionary_ahead": _ahead(e_med, r_med),
        }
    task = workload.task()
    for n in summary_checkpoints(trials):
        duels = []
        for p in per_seed:
            evo = p["evolutionary"] if p["evolutionary"] is not None else main_row
            ctx.log(
                f"  {workload.name}, seed {p['seed']}: the best kernels after {n} trials head to head"
            )
            duels.append(duel_at(ctx, task, {"evolutionary": evo, "replay": p["replay"]}, n))
        ratios = [_duel_ratio(d) for d in duels]
        ratio = median_or_none(ratios)
        by_checkpoint[str(n)].update(
            head_to_head=duels,
            replay_over_evolutionary_by_seed=ratios,
            replay_over_evolutionary=ratio,
            evolutionary_ahead_head_to_head=None if ratio is None else ratio > 1.0,
        )
    evos = [p["evolutionary_ms"] for p in per_seed if p["evolutionary_ms"] is not None]
    reps = [p["replay_ms"] for p in per_seed if p["replay_ms"] is not None]
    evo_median = statistics.median(evos) if evos else None
    rep_median = statistics.median(reps) if reps else None
    return {
        "workload": workload.name,
        "trials": trials,
        "seeds": seeds,
        "verdict_on": "head_to_head",
        "evolutionary_ms": evo_median,
        "replay_ms": rep_median,
        "evolutionary_ahead": _ahead(evo_median, rep_median),
        "replay": per_seed[0]["replay"],
        "per_seed": per_seed,
        "checkpoints": by_checkpoint,
    }


# The search's goal: the evolutionary median over the seeds ahead of
# replay's on at least 5 of the 6 suite workloads, at each of these trial counts.
EVO_GOAL_AHEAD = 5
EVO_GOAL_AT = (64, 256)


def evo_replay_entries(ex: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-workload ``evo_vs_replay`` dicts of ``extras["evo_replay"]``."""
    e = ex.get("evo_replay")
    return list(e["workloads"]) if e else []


def summary_checkpoints(trials: int) -> list[int]:
    """The trial counts evo_replay reports: 64 and 256 where within the budget, and the budget."""
    return [c for c in checkpoints(trials) if c in EVO_GOAL_AT or c == trials]


def _medians_at(entry: dict[str, Any], n: int) -> tuple[float | None, float | None]:
    """The best-while-tuning medians (evolutionary, replay) after n trials."""
    c = entry["checkpoints"][str(n)]
    return c["evolutionary_ms"], c["replay_ms"]


def _duel_ratio_at(entry: dict[str, Any], n: int) -> float | None:
    """The median over the seeds of replay / evolutionary, timed head to head after n trials."""
    return entry["checkpoints"][str(n)]["replay_over_evolutionary"]


def _ahead_at(entry: dict[str, Any], n: int) -> bool | None:
    """Whether the evolutionary search is ahead after n trials: the head-to-head ratio's
    median over the seeds above 1."""
    ratio = _duel_ratio_at(entry, n)
    return None if ratio is None else ratio > 1.0


def evo_replay_ahead(entries: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per reported checkpoint: on how many of the workloads the evolutionary search is
    strictly ahead (`_ahead_at`; ``ahead`` of ``of``; ``unknown``: no value on one side)."""
    if not entries:
        return {}
    trials = min(e["trials"] for e in entries)
    out = {}
    for n in summary_checkpoints(trials):
        verdicts = [_ahead_at(e, n) for e in entries]
        ahead = [e["workload"] for e, v in zip(entries, verdicts) if v]
        out[str(n)] = {
            "ahead": len(ahead),
            "of": len(entries),
            "unknown": sum(v is None for v in verdicts),
            "workloads_ahead": ahead,
        }
    return out


def suite_complete(entries: Sequence[dict[str, Any]]) -> bool:
    """Whether the entries are the six suite workloads (the goal's condition)."""
    names = [e["workload"] for e in entries]
    return len(names) == len(SUITE) and set(names) == {w.name for w in SUITE}


def evo_replay_all(
    ctx: Context,
    workloads: Sequence[SuiteWorkload],
    main_rows: Sequence[dict[str, Any]] | None,
    trials: int,
    seeds: Sequence[int],
) -> dict[str, Any]:
    """``evo_vs_replay`` on each workload (`main_rows`: the main run's rows, in the same
    order, or None) and how many of them the evolutionary search is ahead on."""
    entries = []
    for i, w in enumerate(workloads):
        ctx.log(f"evolutionary vs replay on {w.name} at {trials} trials, seeds {list(seeds)}")
        entries.append(
            evo_vs_replay(ctx, main_rows[i] if main_rows else None, w, trials, seeds, index=i)
        )
    ahead = evo_replay_ahead(entries)
    for n, a in ahead.items():
        ctx.log(f"  evolutionary ahead at {n} trials on {a['ahead']} of {a['of']} workloads")
    return {
        "trials": trials,
        "seeds": list(seeds),
        "workloads": entries,
        "ahead_at": ahead,
        "suite_complete": suite_complete(entries),
    }


def _verdict(ahead: bool | None) -> str:
    if ahead is None:
        return "–"
    return "evolutionary ahead" if ahead else "replay ahead or tie"


def _evo_replay_value(entry: dict[str, Any], n: int) -> str:
    """The best-while-tuning medians after n trials, and the head-to-head ratio where timed."""
    evo, rep = _medians_at(entry, n)
    text = f"{fmt(evo)} ms vs {fmt(rep)} ms"
    ratio = _duel_ratio_at(entry, n)
    if ratio is not None:
        text += f"; head to head replay / evolutionary {ratio:.3f}"
    return text


def evo_replay_rows(ex: dict[str, Any]) -> list[list[str]]:
    """The extras table's evolutionary-vs-replay rows: per workload at the budget and at 64
    and 256 trials where within it, and a summary row."""
    entries = evo_replay_entries(ex)
    rows = []
    for e in entries:
        median = f", median of {len(e['seeds'])} seeds" if len(e["seeds"]) > 1 else ""
        rows.append(
            [
                f"evolutionary vs replay, {e['workload']}, {e['trials']} trials{median}",
                _evo_replay_value(e, e["trials"]),
                _verdict(_ahead_at(e, e["trials"])),
            ]
        )
        for n in e["checkpoints"]:
            if (
                int(n) in EVO_GOAL_AT
                and int(n) != e["trials"]
                and None not in _medians_at(e, int(n))
            ):
                rows.append(
                    [
                        f"… the same runs after {n} trials{median}",
                        _evo_replay_value(e, int(n)),
                        _verdict(_ahead_at(e, int(n))),
                    ]
                )
    if entries:
        seeds = ex["evo_replay"]["seeds"]
        over = f"median of {len(seeds)} seeds" if len(seeds) > 1 else f"seed {seeds[0]}"
        ahead = evo_replay_ahead(entries)
        counts = " / ".join(
            f"{a['ahead']} of {a['of']} workloads at {n} trials"
            + (f" ({a['unknown']} without a value)" if a["unknown"] else "")
            for n, a in ahead.items()
        )
        goal = "–"
        if suite_complete(entries):
            verdicts = [
                f"{'met' if ahead[str(n)]['ahead'] >= EVO_GOAL_AHEAD else 'not met'} at {n}"
                if str(n) in ahead
                else f"{n} not run"
                for n in EVO_GOAL_AT
            ]
            goal = f"≥ {EVO_GOAL_AHEAD} of {len(SUITE)}: " + ", ".join(verdicts)
        rows.append([f"evolutionary ahead of replay ({over})", counts, goal])
    return rows
