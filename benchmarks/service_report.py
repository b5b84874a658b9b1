"""The service benchmark's tables and note."""

from __future__ import annotations

from typing import Any

from benchmarks.service_bench import (
    BATCH,
    GOAL_RESULTS_PER_S,
    LEASE_P95_LIMIT_MS,
    THROUGHPUT_WORKERS,
    summary,
)
from benchmarks.service_fleet import MEASURE_WORKLOAD

# -- report ------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _pg(value: float | None) -> str:
    """The local PostgreSQL server's CPU seconds: summed over its live processes, so a window where
    backends exited (their time gone with them) can read negative; shown as unknown."""
    return "—" if value is None or value < 0 else _f(value)


def _mark(row: dict[str, Any]) -> str:
    return " †" if row.get("contended") else ""


def report_tables(
    result: dict[str, Any], footnote: str | None = None
) -> list[tuple[str | None, list[str] | Any, str | None]]:
    """(caption, table, note) triples for `benchmarks/report.py`."""
    rows = result["rows"]
    details = result.get("service", {})
    s = summary(rows)  # derived from the rows: the current definitions
    batch = details.get("measure", {}).get("batch", BATCH)
    goals_rows: list[list[str]] = []
    tp = next((r for r in rows if r["case"] == "throughput"), None)
    if tp is not None:
        ok = tp["correct"]
        goals_rows.append(
            [
                f"result submissions/s, {tp.get('workers', THROUGHPUT_WORKERS)} simulated workers{_mark(tp)}",
                _f(tp.get("results_per_s"), 0) if ok else "failed",
                f"≥ {GOAL_RESULTS_PER_S:.0f}",
                "yes" if s["results_goal_met"] else "**no**",
            ]
        )
        if ok:
            goals_rows.append(
                [f"leases/s (batches of {batch}), same run", _f(tp["leases_per_s"], 0), "", ""]
            )
            goals_rows.append(
                [
                    "lease round trip, median / p95 ms, same run",
                    f"{_f(tp['lease_ms_median'])} / {_f(tp['lease_ms_p95'])}",
                    "",
                    "",
                ]
            )
    sweep = [r for r in rows if r["case"] == "sweep"]
    if sweep:
        first = s.get("first_workers_over_limit")
        goals_rows.append(
            [
                f"simulated workers served before lease p95 > {LEASE_P95_LIMIT_MS:.0f} ms",
                f"{s.get('most_workers_under_limit') or 0} (first over: {first if first else 'none up to ' + str(max(r['workers'] for r in sweep))})",
                "",
                "",
            ]
        )
    emb = next((r for r in rows if r["case"] == "embedded"), None)
    clu = next((r for r in rows if r["case"] == "cluster"), None)
    if emb and clu:
        goals_rows.append(
            [
                "measurement: 2 workers / embedded, candidates/s",
                f"{_f(clu.get('candidates_per_s'), 2)} / {_f(emb.get('candidates_per_s'), 2)}"
                + (
                    f" ({s['cluster_over_embedded']:.2f}×)"
                    if s.get("cluster_over_embedded")
                    else ""
                ),
                "",
                "",
            ]
        )
    goals = (["measure", "value", "goal", "met"], goals_rows)
    out: list[tuple[str | None, Any, str | None]] = [(None, goals, None)]
    table_rows = []
    for r in sweep:
        cpu = r.get("cpu_s", {})
        table_rows.append(
            [
                f"{r['workers']}{_mark(r)}",
                _f(r.get("lease_ms_median")),
                _f(r.get("lease_ms_p95")),
                _f(r.get("post_ms_median")),
                _f(r.get("results_per_s"), 0),
                _f(r.get("requests_per_s"), 0),
                f"{_f(cpu.get('coordinator'))} / {_pg(cpu.get('postgres'))} / {_f(cpu.get('bench_process'))}",
                "yes" if r["correct"] else f"**no**: {r.get('message')}",
            ]
        )
    if table_rows:
        caption = (
            f"Simulated workers (threads, one httpx client each, batches of {batch}, no measuring), "
            f"{details.get('measure', {}).get('sweep_s', 0):g} s each:"
        )
        headers = [
            "workers",
            "lease ms median",
            "lease ms p95",
            "post ms median",
            "results/s",
            "requests/s",
            "CPU s coordinator / PostgreSQL / clients",
            "ok",
        ]
        out.append((caption, (headers, table_rows), None))
    mrows = []
    for r in (emb, clu):
        if r is None:
            continue
        mrows.append(
            [
                r["label"] + _mark(r),
                str(r.get("candidates", "—")),
                _f(r.get("wall_s"), 2),
                _f(r.get("candidates_per_s"), 2),
                "yes" if r["correct"] else f"**no**: {r.get('message')}",
            ]
        )
    if mrows:
        op, params = MEASURE_WORKLOAD
        caption = (
            f"Measurement throughput, one job both ways ({op} {params['m']}×{params['n']}×{params['k']}, replay, "
            "seed 0; workers started before the clock):"
        )
        out.append((caption, (["mode", "candidates", "wall s", "candidates/s", "ok"], mrows), None))
    notes = [note(result), footnote]
    out[-1] = (out[-1][0], out[-1][1], "\n\n".join(n for n in notes if n))
    return out


def note(result: dict[str, Any]) -> str:
    details = result.get("service", {})
    cores = result.get("machine", {}).get("usable_cores")
    return (
        f"Everything on this machine ({cores} usable cores): the coordinator (one uvicorn process), "
        "PostgreSQL and the simulated workers (threads of the benchmark process) share the cores, so the "
        "simulated-worker numbers are a floor for a coordinator with cores of its own; in the measurement runs "
        "the coordinator, its job runner and the two workers share them too. A simulated worker leases again as "
        "soon as its post returns; a real one measures first (tens to hundreds of ms a candidate), so it asks "
        "far less often. The PostgreSQL CPU column is the whole local server's (other clients' "
        "queries included; — where backends exited mid-window). Schema dropped afterwards: "
        f"`{details.get('simulated_schema', '—')}`."
    )
