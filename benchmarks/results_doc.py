"""``docs/results.md`` (and README.md's results block) from the record ``benchmarks/results.jsonl``.

Per suite, one section: a table of the newest full (not quick) run on each
machine (for `ROW_KEYS`' suites, each row key's newest row), newest first, the
machine a column; then each run's command, time and versions. The output depends on the record only (no time of generation),
so the committed file regenerates byte for byte. README.md's text between
``<!-- results:begin -->`` and ``<!-- results:end -->`` is rewritten only where
those markers exist: the newest full run of the tuning suite and a link here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, fmt
from benchmarks.record import load
from benchmarks.report import BEGIN, END, markdown_table, replace_section

DOC = REPO / "docs" / "results.md"
README = REPO / "README.md"
TUNING_SUITE = "tune"
SUITE_ORDER = (
    "tune",
    "tune_extras",
    "tune_evo_replay",
    "tune_reuse",
    "tune_scheduler",
    "lowp",
    "scheduler_replay",
    "gemm",
    "default",
    "loopkinds",
    "compile",
    "tuning",
    "db",
    "cost_model",
    "service",
    "models",
)
TABLES = (
    ("rows", None),
    ("scaling", "Threads, timed interleaved:"),
    ("extras", "Extras:"),
    ("torch", "PyTorch's paths, timed in the same interleaved call:"),
    (
        "memory",
        "Memory (MiB; peak = VmHWM of a child process that loads the model and runs it once; "
        "holds = its VmRSS then, less its VmRSS after the engine's imports):",
    ),
)
TITLES = {
    "ms": "loomtune ms",
    "numpy_ms": "numpy ms",
    "ratio": "× numpy",
    "speedup": "speed-up",
    "compile_ms": "compile ms",
    "median_ms": "median ms",
    "p95_ms": "p95 ms",
    "candidates_per_s": "candidates/s",
    "per_core": "per core",
    "ndcg_at_10": "NDCG@10",
    "ndcg": "NDCG",
    "spearman": "Spearman",
    "top1_regret": "top-1 regret",
    "top10_regret": "top-10 regret",
    "default_objective": "default objective",
    "results_per_s": "results/s",
    "results_goal_met": "≥ 500/s",
    "lease_ms_p95": "lease p95 ms",
    "workers_under_100ms": "workers under 100 ms",
    "cluster_over_embedded": "2 workers / embedded",
    "curves_of": "curves of",
    "runs_per_workload": "runs per workload",
    "gradient_change": "gradient vs round-robin",
    "gradient_below": "gradient below it",
    "foresight_change": "foresight vs round-robin",
    "best_ms": "best ms while tuning",
    "final_ms": "final ms",
    "x_numpy": "× numpy",
    "x_torch": "× PyTorch",
    "x_tvm": "× TVM",
    "tune_s": "tuning s",
    "tuned_tasks": "tuned",
    "loomtune_ms": "loomtune ms",
    "onnxruntime_ms": "ONNX Runtime ms",
    "torch_ms": "PyTorch ms",
    "x_onnxruntime": "× ONNX Runtime",
    "x_own_1thread": "× own 1 thread",
    "tuning_s": "tuning s",
    "max_abs_err": "max abs err",
    "others": "others' CPU share",
    "weights_mb": "weights",
    "loomtune_peak_mb": "loomtune peak",
    "onnxruntime_peak_mb": "ONNX Runtime peak",
    "torch_peak_mb": "PyTorch peak",
    "loomtune_holds_mb": "loomtune holds",
    "onnxruntime_holds_mb": "ONNX Runtime holds",
    "torch_holds_mb": "PyTorch holds",
    "instruction": "tensor instruction",
    "numpy_f32_ms": "numpy float32 ms",
    "x_numpy_f32": "× numpy float32",
    "torch_path": "PyTorch's fastest",
    "tensorized_at_16": "tensorized @16",
    "path": "PyTorch path",
    "matches": "matches its reference",
}
SECTION_TITLES = {"lowp": "int8 / bf16", "tune_only": "tuning, some workloads"}
"""Suites whose section is titled otherwise than by their name (which follows in brackets)."""
YES_NO = {"correct", "matches"}
PERCENT = {"gradient_change", "foresight_change", "gradient_below", "others"}


def machine_name(m: dict[str, Any]) -> str:
    cpu = m.get("cpu") or "?"
    return f"{cpu} ({m.get('cpu_model') or '?'}, {m.get('cores') or '?'} cores)"


def cell(key: str, value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        if key in YES_NO:
            return "yes" if value else "**no**"
        return "met" if value else "not met"
    if isinstance(value, float):
        if key in PERCENT:
            return f"{value:+.2%}" if key.endswith("change") else f"{value:.0%}"
        return fmt(value) if value >= 0 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}" if value >= 10_000 else str(value)
    return str(value)


ROW_KEYS = {"models": ("model", "threads"), "lowp": ("workload", "path")}
"""Suites whose runs may cover some of the rows (`models --models NAMES`, `lowp --only OPS`):
per machine, the newest row of each key stands, each shown with its own run (a row
without `threads`: 1)."""


def newest(lines: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per suite, the newest full run of each machine, newest first (for `ROW_KEYS`'
    suites, every run of a machine that still holds its newest row of some key)."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for entry in lines:
        if entry.get("quick"):
            continue
        out.setdefault(entry["suite"], {}).setdefault(machine_name(entry["machine"]), []).append(
            entry
        )
    order = {name: i for i, name in enumerate(SUITE_ORDER)}
    return {
        suite: sorted(
            (e for runs in out[suite].values() for e in _standing(runs, ROW_KEYS.get(suite))),
            key=lambda e: (e["utc"], machine_name(e["machine"])),
            reverse=True,
        )
        for suite in sorted(out, key=lambda s: (order.get(s, len(order)), s))
    }


def _standing(runs: Sequence[dict[str, Any]], keys: tuple[str, ...] | None) -> list[dict[str, Any]]:
    """One machine's runs of a suite that stand: the newest; with `keys`, each run with
    only its rows whose key no newer run has (runs left with none drop out)."""
    ordered = sorted(runs, key=lambda e: e["utc"], reverse=True)
    if keys is None:
        return ordered[:1]
    seen: dict[str, set[tuple[Any, ...]]] = {}
    out = []
    for entry in ordered:
        kept = dict(entry)
        for name, _ in TABLES:
            rows = entry.get(name) or []
            done = seen.setdefault(name, set())
            fresh = [r for r in rows if _row_key(r, keys) not in done]
            done.update(_row_key(r, keys) for r in rows)
            kept[name] = fresh
        if any(kept[name] for name, _ in TABLES):
            out.append(kept)
    return out


def _row_key(row: dict[str, Any], keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(row.get(k) or 1 if k == "threads" else row.get(k) for k in keys)


def _when(entry: dict[str, Any]) -> str:
    return entry["utc"].replace("T", " ").removesuffix("Z")[:16]


def suite_table(
    runs: Sequence[dict[str, Any]], name: str
) -> tuple[list[str], list[list[str]]] | None:
    """The runs' `name` rows (rows, scaling, extras) as one table, machine and date first."""
    keys: list[str] = []
    for entry in runs:
        for row in entry.get(name) or []:
            keys += [k for k in row if k not in keys]
    if not keys:
        return None
    headers = ["machine", "run (UTC)", *(TITLES.get(k, k.replace("_", " ")) for k in keys)]
    rows = [
        [machine_name(entry["machine"]), _when(entry), *(cell(k, row.get(k)) for k in keys)]
        for entry in runs
        for row in entry.get(name) or []
    ]
    return headers, rows


def run_line(entry: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in entry.get("versions", {}).items())
    return (
        f"- {machine_name(entry['machine'])}, {_when(entry)} UTC: `{entry['command']}`, "
        f"seed {entry.get('seed')}; {versions}"
    )


def document(lines: Sequence[dict[str, Any]]) -> str:
    parts = [
        "# Benchmark results",
        "",
        "Generated by `python -m benchmarks report` from `benchmarks/results.jsonl` (one line per "
        "benchmark run); do not edit by hand. Per suite, the newest full (not `--quick`) run on each "
        "machine, newest first (models: each model's newest rows at each thread count). × numpy (PyTorch, TVM) = their time / loomtune's: above 1, loomtune "
        "is faster. The full results of a run (every timing, the curves) stay on the machine that "
        "ran it, in `benchmarks/results/`; `benchmarks/README.md` says how each suite measures.",
    ]
    for suite, runs in newest(lines).items():
        description = runs[0].get("description")
        title = f"{SECTION_TITLES[suite]} ({suite})" if suite in SECTION_TITLES else suite
        parts += ["", f"## {title}" + (f" — {description}" if description else "")]
        for name, caption in TABLES:
            table = suite_table(runs, name)
            if table is None:
                continue
            parts.append("")
            if caption:
                parts += [caption, ""]
            parts.append(markdown_table(table))
        parts += ["", *(run_line(entry) for entry in runs)]
    return "\n".join(parts) + "\n"


def readme_block(lines: Sequence[dict[str, Any]], doc_link: str = "docs/results.md") -> str:
    """The newest full run of the tuning suite (its workload rows) and a link to the rest."""
    runs = [e for e in lines if e["suite"] == TUNING_SUITE and not e.get("quick") and e.get("rows")]
    link = f"Every suite on every machine: [{doc_link}]({doc_link})."
    if not runs:
        return link
    entry = max(runs, key=lambda e: e["utc"])
    keys = ["workload", "best_ms", "final_ms", "x_numpy", "x_torch", "tune_s", "goal", "met"]
    keys = [k for k in keys if any(row.get(k) is not None for row in entry["rows"])]
    table = (
        [TITLES.get(k, k) for k in keys],
        [[cell(k, row.get(k)) for k in keys] for row in entry["rows"]],
    )
    return "\n".join(
        [
            f"The newest full run of the tuning suite: {machine_name(entry['machine'])}, "
            f"{_when(entry)} UTC, `{entry['command']}`. Generated by `python -m benchmarks report` "
            "from `benchmarks/results.jsonl`; do not edit by hand.",
            "",
            markdown_table(table),
            "",
            link,
        ]
    )


def write(record: Path, doc: Path = DOC, readme: Path | None = README) -> list[Path]:
    """Regenerate `doc` from `record`, and README.md's block where its markers are; the files written."""
    lines = load(record)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(document(lines), encoding="utf-8")
    written = [doc]
    if readme is not None and readme.exists():
        # Read and write back to back: another edit of README.md outside the markers must survive.
        text = readme.read_text(encoding="utf-8")
        start, end = text.find(BEGIN), text.find(END)
        if start != -1 and end > start:
            readme.write_text(replace_section(text, readme_block(lines)), encoding="utf-8")
            written.append(readme)
    return written
