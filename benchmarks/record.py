"""One compact line per benchmark run: ``benchmarks/results.jsonl``.

`line` keeps of a full result only what the published tables need: the suite,
the command line, the UTC time, the machine (CPU model, LLVM's host CPU name,
cores), the versions, quick or not, and each suite's headline figures (for the
tuning benchmark per workload: best ms while tuning, final ms, ratios to numpy,
PyTorch and TVM, tuning seconds, the goal and whether it was met; the extras'
verdicts). Floats keep 4 significant digits, so a line stays well under a few KB.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Row = dict[str, Any]
Headline = Callable[[dict[str, Any]], dict[str, list[Row]]]
"""A suite's headline figures: named lists of compact rows."""


def dumps(entry: dict[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


def load(path: Path) -> list[dict[str, Any]]:
    """The record's lines, in file order (blank lines skipped)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(s) for s in text.splitlines() if s.strip()]


def write_result(
    result: dict[str, Any],
    out_dir: Path,
    started: _dt.datetime,
    record: Path | None = None,
) -> Path:
    """``<suite>-<UTC timestamp>.json`` in `out_dir` (never overwrites an earlier run); with
    `record`, the run's line is appended to it too (`append_record`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{result['suite']}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    path = out_dir / f"{stem}.json"
    n = 1
    while path.exists():
        path = out_dir / f"{stem}-{n}.json"
        n += 1
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if record is not None:
        append_record(result, record)
    return path


def append_record(
    result: dict[str, Any], record: Path, headline: Headline | None = None
) -> dict[str, Any]:
    """Append the result's compact line (`line`) to `record`; the line."""
    entry = line(result, headline)
    record.parent.mkdir(parents=True, exist_ok=True)
    with record.open("a", encoding="utf-8") as f:
        f.write(dumps(entry) + "\n")
    return entry


def _r(value: Any) -> Any:
    """Floats to 4 significant digits (recursively); everything else as it is."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _r(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_r(v) for v in value]
    return value


def host_cpu(result: dict[str, Any]) -> str | None:
    """LLVM's name of the host CPU (``-mcpu=``) from the result's target."""
    for part in (result.get("target") or "").split():
        if part.startswith("-mcpu="):
            return part.removeprefix("-mcpu=")
    return None


def machine(result: dict[str, Any]) -> dict[str, Any]:
    m = result.get("machine") or {}
    return {
        "cpu_model": m.get("cpu_model"),
        "cpu": host_cpu(result),
        "cores": m.get("logical_cores"),
        "usable_cores": m.get("usable_cores"),
    }


def versions(result: dict[str, Any]) -> dict[str, str]:
    m = result.get("machine") or {}
    tune = result.get("tune") or {}
    out = {
        "loomtune": result.get("loomtune_version"),
        "python": m.get("python"),
        "numpy": m.get("numpy"),
        "llvmlite": m.get("llvmlite"),
        "llvm": m.get("llvm"),
        "torch": tune.get("torch"),
        "tvm": ((tune.get("tvm") or {}).get("versions") or {}).get("apache-tvm"),
    }
    out |= ((result.get("models") or {}).get("versions")) or {}
    return {k: v for k, v in out.items() if v}


# -- headline figures, per kind of suite --------------------------------------------------


def _timed(result: dict[str, Any]) -> dict[str, list[Row]]:
    rows = [
        {
            "case": r["case"],
            "threads": r.get("threads"),
            "ms": r.get("latency_ms"),
            "numpy_ms": r.get("numpy_ms"),
            "ratio": r.get("ratio"),
            "correct": r["correct"],
        }
        for r in result["rows"]
    ]
    scaling = [
        {
            "group": s["group"],
            "threads": " vs ".join(str(t) for t in s["threads"]),
            "speedup": s["speedup"],
            "goal": None if s["goal"] is None else f"≥ {s['goal']:g}×",
            "met": s["met"],
        }
        for s in result.get("scaling") or []
    ]
    return {"rows": rows, "scaling": scaling}


def _compile(result: dict[str, Any]) -> dict[str, list[Row]]:
    return {
        "rows": [
            {
                "case": r["case"],
                "threads": r.get("threads"),
                "compile_ms": r.get("compile_ms"),
                "goal": None if r.get("goal_ms") is None else f"< {r['goal_ms']:g} ms",
                "met": r.get("met"),
                "correct": r["correct"],
            }
            for r in result["rows"]
        ]
    }


def _db(result: dict[str, Any]) -> dict[str, list[Row]]:
    return {
        "rows": [
            {
                "backend": r["backend"],
                "query": r["case"],
                "records": r.get("records"),
                "median_ms": r.get("median_ms"),
                "p95_ms": r.get("p95_ms"),
                "goal": None if r.get("goal_ms") is None else f"< {r['goal_ms']:g} ms",
                "met": r.get("met"),
                "correct": r["correct"],
            }
            for r in result["rows"]
        ]
    }


def _tuning(result: dict[str, Any]) -> dict[str, list[Row]]:
    return {
        "rows": [
            {
                "case": r.get("label", r["case"]),
                "candidates": r.get("trials_done"),
                "candidates_per_s": r.get("candidates_per_s"),
                "per_core": r.get("per_core"),
                "goal": None if r.get("goal_per_core") is None else f"≥ {r['goal_per_core']:g}",
                "met": r.get("met"),
                "correct": r["correct"],
            }
            for r in result["rows"]
        ]
    }


def _cost_model(result: dict[str, Any]) -> dict[str, list[Row]]:
    rows = [
        {
            "case": r["case"],
            "ndcg_at_10": r.get("ndcg_at_10"),
            "ndcg": r.get("ndcg"),
            "spearman": r.get("spearman"),
            "top1_regret": r.get("top1_regret"),
            "top10_regret": r.get("top10_regret"),
        }
        for r in result["rows"]
    ]
    decision = (result.get("cost_model") or {}).get("decision") or {}
    return {"rows": rows, "summary": [{"default_objective": decision.get("winner")}]}


def _service(result: dict[str, Any]) -> dict[str, list[Row]]:
    from benchmarks.service_bench import summary

    s = summary(result["rows"])
    tp = next((r for r in result["rows"] if r["case"] == "throughput"), {})
    return {
        "rows": [
            {
                "results_per_s": s.get("results_per_s"),
                "results_goal_met": s.get("results_goal_met"),
                "lease_ms_p95": tp.get("lease_ms_p95"),
                "workers_under_100ms": s.get("most_workers_under_limit"),
                "cluster_over_embedded": s.get("cluster_over_embedded"),
                "correct": all(r["correct"] for r in result["rows"]),
            }
        ]
    }


def _scheduler_replay(result: dict[str, Any]) -> dict[str, list[Row]]:
    return {
        "rows": [
            {
                "curves_of": cpu,
                "runs_per_workload": min(m["runs_per_workload"]),
                "gradient_change": m["gradient"]["mean_change"],
                "gradient_below": m["gradient"]["below_round_robin"],
                "foresight_change": m["foresight"]["mean_change"],
            }
            for cpu, m in result["machines"].items()
        ]
    }


def _models(result: dict[str, Any]) -> dict[str, list[Row]]:
    """Per model: tasks, latency against ONNX Runtime and PyTorch, correctness; memory apart."""
    engines = ("loomtune", "onnxruntime", "torch")
    rows = [
        {
            "model": r["model"],
            "threads": r.get("threads", 1),
            "tasks": r["tasks"],
            "kernels": r["kernels"],
            "tuned_tasks": r["tuned_tasks"],
            "loomtune_ms": r.get("loomtune_ms"),
            "onnxruntime_ms": r.get("onnxruntime_ms"),
            "torch_ms": r.get("torch_ms"),
            "x_onnxruntime": r.get("x_onnxruntime"),
            "x_torch": r.get("x_torch"),
            "x_own_1thread": r.get("x_own_1thread"),
            "tuning_s": (r.get("tuning") or {}).get("tuning_s"),
            "trials": (r.get("tuning") or {}).get("trials"),
            "repeats": (r.get("measure") or {}).get("repeat"),
            "correct": r["correct"],
            "max_abs_err": r.get("max_abs_err"),
            "others": None if not r.get("others_load") else sum(r["others_load"].values()),
        }
        for r in result["rows"]
    ]
    memory = [
        {
            "model": r["model"],
            "weights_mb": r.get("weights_mb"),
            **{f"{e}_peak_mb": (r["rss"].get(e) or {}).get("peak_mb") for e in engines},
            **{f"{e}_holds_mb": (r["rss"].get(e) or {}).get("held_mb") for e in engines},
        }
        for r in result["rows"]
        if r.get("rss")
    ]
    return {"rows": rows, "memory": memory}


HEADLINES: dict[str, Headline] = {
    "timed": _timed,
    "compile": _compile,
    "db": _db,
    "tuning": _tuning,
    "cost_model": _cost_model,
    "service": _service,
    "scheduler_replay": _scheduler_replay,
    "models": _models,
}


def line(result: dict[str, Any], headline: Headline | None = None) -> dict[str, Any]:
    """The compact record of one full result; `headline` gives its figures (default: the
    one of its kind here; the tuning benchmark passes its own, `benchmarks.tune.report`)."""
    if headline is None:
        if result["kind"] not in HEADLINES:
            raise KeyError(f"no headline figures for a {result['kind']!r} result; pass `headline`")
        headline = HEADLINES[result["kind"]]
    entry: dict[str, Any] = {
        "suite": result["suite"],
        "kind": result["kind"],
        "description": result.get("description"),
        "command": result.get("command", ""),
        "utc": result["utc"],
        "quick": bool(result.get("quick")),
        "seed": result.get("seed"),
        "wall_s": result.get("wall_s"),
        "machine": machine(result),
        "versions": versions(result),
    }
    for name, rows in headline(result).items():
        if rows:
            entry[name] = rows
    return _r(entry)
