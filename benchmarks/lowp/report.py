"""The int8 / bf16 benchmark's figures: the record's rows (`headline`) and the tables."""

from __future__ import annotations

from typing import Any

from benchmarks.common import Table


def _fastest_torch(row: dict[str, Any]) -> dict[str, Any] | None:
    timed = [p for p in row.get("torch_paths") or [] if p.get("torch_ms")]
    return min(timed, key=lambda p: p["torch_ms"]) if timed else None


def headline(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per workload the final kernel against numpy float32 and PyTorch's fastest path, whether
    the best after 16 trials was tensorized, the goal; the AMX paths not measured; and every
    PyTorch path timed."""
    lowp = result.get("lowp") or {}
    by = str(lowp.get("tensorized_by", 16))
    rows = []
    for r in result["rows"]:
        fastest = _fastest_torch(r)
        at = r.get("tensorized_at") or {}  # empty: the run stopped before `by` trials
        rows.append(
            {
                "workload": r["case"],
                "instruction": r.get("intrinsic") or "none",
                "trials": r.get("trials_done"),
                "best_ms": (r.get("history_ms") or [None])[-1],
                "final_ms": r.get("latency_ms"),
                "numpy_f32_ms": r.get("numpy_f32_ms"),
                "x_numpy_f32": r.get("ratio_numpy_f32"),
                "torch_path": fastest["path"] if fastest else None,
                "torch_ms": fastest["torch_ms"] if fastest else None,
                "x_torch": fastest["ratio"] if fastest else None,
                f"tensorized_at_{by}": (at[by] or "no") if by in at else None,
                "tune_s": r.get("tune_s"),
                "goal": f"≥ {r['goal']:g}× ({r['goal_condition']})" if r.get("goal") else None,
                "met": r.get("met"),
                "correct": r["correct"],
                # other processes' share of the CPUs while the final comparison ran
                "others": sum(r["others_load"].values()) if r.get("others_load") else None,
            }
        )
    rows += [{"workload": n["workload"], "note": n["note"]} for n in lowp.get("not_measured", [])]
    torch = [
        {
            "workload": r["case"],
            "path": p["path"],
            "torch_ms": p.get("torch_ms"),
            "x_torch": p.get("ratio"),
            "matches": p.get("message") is None,
            "note": p.get("note") or p.get("message"),
        }
        for r in result["rows"]
        for p in r.get("torch_paths") or []
    ]
    return {"rows": rows, "torch": torch}


def tables(result: dict[str, Any]) -> list[tuple[str | None, Table]]:
    """The headline's tables as the report shows them: (caption, (headers, cells))."""
    from benchmarks.results_doc import TITLES, cell

    out: list[tuple[str | None, Table]] = []
    for name, rows in headline(result).items():
        if not rows:
            continue
        keys: list[str] = []
        for row in rows:
            keys += [k for k in row if k not in keys]
        headers = [TITLES.get(k, k.replace("_", " ")) for k in keys]
        caption = None if name == "rows" else "PyTorch's paths, timed in the same call:"
        out.append((caption, (headers, [[cell(k, row.get(k)) for k in keys] for row in rows])))
    return out
