"""Helpers every benchmark shares: where results go, the record line, CPU time, formatting.

A run writes its full result (JSON, and for the tuning benchmark a PNG) into
``benchmarks/results/`` (ignored by git) or ``--out``, and appends one compact
line to the committed ``benchmarks/results.jsonl`` (`benchmarks.record.append_record`): the
record that ``python -m benchmarks report`` turns into ``docs/results.md``.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ir.task import Task, library_task

FORMAT = "loomtune.benchmarks/1"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS_DIR = HERE / "results"
RECORD = HERE / "results.jsonl"


def log(message: str) -> None:
    """Progress goes to stderr so stdout carries only the results table."""
    print(message, file=sys.stderr, flush=True)


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0)


def utc_text(moment: _dt.datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def result_header(
    *,
    suite: str,
    kind: str,
    description: str,
    quick: bool,
    command: str,
    seed: int,
    started: _dt.datetime,
    wall_s: float = 0.0,
    threads: int = 1,
) -> dict[str, Any]:
    """The fields every benchmark's result starts with: what ran, when, on which machine
    and target, with which loomtune (`benchmarks.record` reads them back)."""
    import importlib.metadata

    from codegen.host import host_target
    from workers.machine import machine_info

    return {
        "format": FORMAT,
        "suite": suite,
        "kind": kind,
        "description": description,
        "quick": quick,
        "command": command,
        "seed": seed,
        "utc": utc_text(started),
        "wall_s": wall_s,
        "machine": machine_info().to_dict(),
        "target": host_target(threads).canonical(),
        "loomtune_version": importlib.metadata.version("loomtune"),
    }


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) of a live process; 0 when it cannot be read."""
    if pid is None:
        return 0.0
    try:
        line = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return 0.0
    fields = line.rpartition(") ")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- numbers ---------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 3) -> str:
    """`digits` significant digits, whole numbers from 100 on; "–" for none."""
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def fmt_fixed(value: float | None, digits: int = 1) -> str:
    """`digits` decimals; "–" for none."""
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_ms(value: float | None) -> str:
    """About 3 significant digits, never in exponent notation."""
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def fmt_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def shown_path(path: Path) -> str:
    """`path` relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class BenchWorkload:
    """A library operator at one shape, as the throughput and cost-model suites name it."""

    label: str
    op: str
    params: dict[str, int]

    def task(self) -> Task:
        return library_task(self.op, self.params)


# -- tables ------------------------------------------------------------------------------

Table = tuple[list[str], list[list[str]]]


def fmt_correct(row: dict[str, Any]) -> str:
    return "yes" if row["correct"] else "**no**"


# Marks a row timed while other processes used a noticeable share of the CPUs.
CONTENDED_MARK = "†"


def fmt_case(row: dict[str, Any]) -> str:
    return row["case"] + (f" {CONTENDED_MARK}" if row.get("contended") else "")


def markdown_table(table: Table) -> str:
    headers, rows = table
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(table: Table) -> str:
    headers, rows = table
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric)
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _is_number(cell: str) -> bool:
    try:
        float(cell.rstrip("×"))
    except ValueError:
        return cell == "–"
    return True
