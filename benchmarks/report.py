"""Tables of one full result: plain text for the terminal (what ``run`` prints), markdown
(`suite_section`). The published results come from the record instead
(`benchmarks.results_doc`)."""

from __future__ import annotations

from typing import Any

from benchmarks.common import (
    CONTENDED_MARK,
    Table,
    fmt_case,
    fmt_correct,
    fmt_ms,
    fmt_ratio,
    markdown_table,
    text_table,
)

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
HEADING = "## Results"


# -- numbers ---------------------------------------------------------------------------


def contention_note(result: dict[str, Any]) -> str | None:
    """A footnote for flagged rows, or None when every row was timed undisturbed."""
    flagged = [r for r in result["rows"] if r.get("contended")]
    if not flagged:
        return None
    worst = max(r["others_load"]["others"] + r["others_load"]["steal"] for r in flagged)
    return (
        f"{CONTENDED_MARK} timed while other processes (or the hypervisor) used more than "
        f"{result.get('contended_threshold', 0.1):.0%} of the machine's CPU time (up to {worst:.0%}): "
        "read these rows with care."
    )


# -- tables ----------------------------------------------------------------------------


def timed_table(result: dict[str, Any]) -> Table:
    """One row per case: loomtune and numpy side by side."""
    headers = [
        "case",
        "schedule",
        "threads",
        "loomtune ms",
        "numpy ms",
        "ratio",
        "GFLOP/s",
        "compile ms",
        "correct",
    ]
    rows = [
        [
            fmt_case(r),
            r["schedule"],
            str(r["threads"]),
            fmt_ms(r["latency_ms"]),
            fmt_ms(r["numpy_ms"]),
            fmt_ratio(r["ratio"]),
            "–" if r["gflops"] is None else f"{r['gflops']:.2f}",
            fmt_ms(r["compile_ms"]),
            fmt_correct(r),
        ]
        for r in result["rows"]
    ]
    return headers, rows


def fmt_speedup(entry: dict[str, Any]) -> str:
    """``1.57× (1.49–1.66)``: the ratio of medians, then the range over repeats."""
    if entry["speedup"] is None:
        return "–"
    text = f"{entry['speedup']:.2f}×"
    spread = entry.get("speedup_per_repeat") or []
    if len(spread) > 1:
        text += f" ({min(spread):.2f}–{max(spread):.2f})"
    return text


def scaling_table(result: dict[str, Any]) -> Table:
    """Speed-up of the most threads over the fewest, per interleaved group."""
    headers = ["program", "threads", "ms", "speed-up (range over repeats)", "goal"]
    rows = []
    for s in result.get("scaling", []):
        goal = (
            "–" if s["goal"] is None else f"≥ {s['goal']:g}× ({'met' if s['met'] else 'not met'})"
        )
        rows.append(
            [
                s["group"] + (f" {CONTENDED_MARK}" if s.get("contended") else ""),
                " vs ".join(str(t) for t in s["threads"]),
                " vs ".join(fmt_ms(ms) for ms in s["latency_ms"]),
                fmt_speedup(s),
                goal,
            ]
        )
    return headers, rows


def compile_table(result: dict[str, Any]) -> Table:
    """One row per case: median cold compile and where the time goes."""
    headers = [
        "case",
        "schedule",
        "threads",
        "compile ms (median)",
        "min–max",
        "lower",
        "emit",
        "LLVM",
        "IR lines",
        "correct",
        "goal",
    ]
    rows = []
    for r in result["rows"]:
        if "compile_times_ms" not in r:  # failed to compile: no times
            rows.append(
                [fmt_case(r), r["schedule"], str(r["threads"]), *["–"] * 6, fmt_correct(r), "–"]
            )
            continue
        times = r["compile_times_ms"]
        phases = r["phases_ms"]
        goal = "–"
        if r["goal_ms"] is not None:
            goal = f"< {r['goal_ms']:g} ms ({'met' if r['met'] else 'not met'})"
        rows.append(
            [
                fmt_case(r),
                r["schedule"],
                str(r["threads"]),
                fmt_ms(r["compile_ms"]),
                f"{fmt_ms(min(times))}–{fmt_ms(max(times))}",
                fmt_ms(phases["lower"]),
                fmt_ms(phases["emit"]),
                fmt_ms(phases["llvm"]),
                str(r["ir_lines"]),
                fmt_correct(r),
                goal,
            ]
        )
    return headers, rows


def db_table(result: dict[str, Any]) -> Table:
    """One row per backend and query: the calls' median, 95th percentile and minimum."""
    headers = ["backend", "query", "records", "median ms", "p95 ms", "min ms", "correct", "goal"]
    rows = []
    for r in result["rows"]:
        goal = "–"
        if r["goal_ms"] is not None:
            met = "not run" if r["met"] is None else "met" if r["met"] else "not met"
            goal = f"< {r['goal_ms']:g} ms ({met})"
        rows.append(
            [
                r["backend"],
                fmt_case(r),
                f"{r['records']:,}",
                fmt_ms(r["median_ms"]),
                fmt_ms(r["p95_ms"]),
                fmt_ms(r["min_ms"]),
                fmt_correct(r),
                goal,
            ]
        )
    return headers, rows


def db_note(result: dict[str, Any]) -> str:
    """How the db suite's numbers were taken, and what went wrong if anything did."""
    db = result["db"]
    fills = {}
    for r in result["rows"]:
        if r.get("fill_s") is not None:
            fills.setdefault(r["backend"], r["fill_s"])
    filled = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in fills.items())
    text = (
        f"Each query: {db['repeat']} calls through `SQLDatabase` after one warm-up call (answers "
        "checked against what was inserted first), from the Python call to the `TuningRecord`s "
        f"back. Bulk insert of the records: {filled or '–'}. SQLAlchemy {db['sqlalchemy']}, "
        f"psycopg {db['psycopg']}; PostgreSQL at `{db['postgres_url']}`, in a schema of its own "
        "dropped afterwards."
    )
    failed = sorted({r["message"] for r in result["rows"] if r.get("message")})
    if failed:
        text += " Failed: " + "; ".join(failed) + "."
    return text


def tables(result: dict[str, Any]) -> list[tuple[str | None, Table, str | None]]:
    """(caption, table, footnote) triples for one result."""
    note = contention_note(result)
    if result["kind"] == "compile":
        return [(None, compile_table(result), note)]
    if result["kind"] == "db":
        return [(None, db_table(result), "\n\n".join(n for n in (db_note(result), note) if n))]
    if result["kind"] == "service":
        from benchmarks.service_report import report_tables as service_tables

        return service_tables(result, note)
    if result["kind"] == "cost_model":
        from benchmarks.cost_model import report_tables

        return report_tables(result, note)
    if result["kind"] == "tuning":
        from benchmarks.throughput import report_tables as tuning_tables

        return tuning_tables(result, note)
    if result["kind"] == "scheduler_replay":
        from benchmarks.scheduler_replay import report_tables as replay_tables

        return replay_tables(result, note)
    if result["kind"] == "tune":
        from benchmarks.tune.report import report_tables as tune_tables

        return tune_tables(result, note)
    out: list[tuple[str | None, Table, str | None]] = [(None, timed_table(result), note)]
    if result.get("scaling"):
        caption = "Threads, timed interleaved with each other in the same run:"
        out.append((caption, scaling_table(result), None))
    return out


# -- what a markdown section says about a run --------------------------------------------------


def machine_line(result: dict[str, Any]) -> str:
    """CPU, cores, numpy's BLAS, LLVM, versions and date: enough to judge the numbers."""
    if result["kind"] == "scheduler_replay":  # nothing was timed: the curves come from other runs
        return f"No timing in this run: the curves come from the tune runs it names · loomtune {result['loomtune_version']}"
    m = result["machine"]
    blas = "; ".join(
        " ".join(
            str(part)
            for part in (
                lib.get("internal_api", "?"),
                lib.get("version", ""),
                f"({lib['architecture']} kernels)" if lib.get("architecture") else "",
            )
            if part
        )
        for lib in m.get("blas", [])
    )
    cpu = (
        result.get("target", "").split()[1].removeprefix("-mcpu=") if result.get("target") else "?"
    )
    if result["kind"] == "db":  # numpy and LLVM play no part; the database servers do
        versions = {}
        for r in result["rows"]:
            if r.get("backend_version"):
                versions.setdefault(r["backend"], r["backend_version"])
        servers = " · ".join(f"{name} {version}" for name, version in versions.items())
        return (
            f"{m['cpu_model']} ({cpu}), {m['logical_cores']} logical cores ({m['usable_cores']} usable) · "
            f"{servers or 'no database reached'} · Python {m['python']} · loomtune {result['loomtune_version']}"
        )
    return (
        f"{m['cpu_model']} ({cpu}), {m['logical_cores']} logical cores ({m['usable_cores']} usable) · "
        f"numpy {m['numpy']} with {blas or 'no BLAS found'} · LLVM {m['llvm']} (llvmlite {m['llvmlite']}) · "
        f"Python {m['python']} · loomtune {result['loomtune_version']}"
    )


def suite_section(result: dict[str, Any], source: str | None = None) -> str:
    """Markdown for one result: heading, machine and date, its tables."""
    date = result["utc"].replace("T", " ").removesuffix("Z") + " UTC"
    parts = [f"### {result['suite']} — {result['description']}", ""]
    parts.append(f"{machine_line(result)}  ")
    where = f" · `{source}`" if source else ""
    quick = " · **quick (smoke) run**" if result.get("quick") else ""
    load = result.get("others_load")
    busy = (
        f" · other processes used {load['others']:.0%} of the CPU time during the run (hypervisor steal {load['steal']:.0%})"
        if load
        else ""
    )
    parts.append(f"{date} · `{result['command']}` · seed {result['seed']}{where}{busy}{quick}")
    for caption, table, note in tables(result):
        parts.append("")
        if caption:
            parts += [caption, ""]
        parts.append(markdown_table(table))
        if note:
            parts += ["", note]
    return "\n".join(parts)


def text_report(result: dict[str, Any]) -> str:
    """What ``run`` prints on stdout."""
    parts = [f"{result['suite']}: {result['description']}", machine_line(result)]
    for caption, table, note in tables(result):
        parts.append("")
        if caption:
            parts.append(caption)
        parts.append(text_table(table))
        if note:
            parts.append(note)
    return "\n".join(parts)


# -- README.md ---------------------------------------------------------------


def replace_section(readme: str, generated: str) -> str:
    """`readme` with the text between the markers replaced; heading and markers appended if missing."""
    block = f"{BEGIN}\n{generated}\n{END}"
    start, end = readme.find(BEGIN), readme.find(END)
    if start != -1 and end > start:
        return readme[:start] + block + readme[end + len(END) :]
    return readme.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"
