"""The tuning curves as a PNG (matplotlib, when installed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.tune.extras.evo_replay import evo_replay_entries


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Best-so-far curves (GFLOP/s while tuning per trial), one panel per workload; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = result["rows"]
    ex = result["tune"].get("extras") or {}
    evo_entries = evo_replay_entries(ex)
    replay_of = {e["workload"]: e for e in evo_entries}
    # A panel of each seed's curves per workload, where there are several or no main run.
    seed_panels = [e for e in evo_entries if len(e["per_seed"]) > 1 or not rows]
    panels = len(rows) + (1 if "reuse" in ex else 0) + len(seed_panels)
    if not panels:
        return None
    cols = 3 if panels > 2 else max(1, panels)
    nrows = max(1, -(-panels // cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    flat = [ax for line in axes for ax in line]

    from matplotlib.ticker import FormatStrFormatter

    def axes_style(ax: Any, title: str) -> None:
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("trial")
        ax.set_xscale("log", base=2)
        ax.set_ylabel("best ms (lower is better)")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FormatStrFormatter("%d"))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
        ax.tick_params(axis="y", which="minor", labelsize=6)
        ax.legend(fontsize=7)

    def curve(ax: Any, row: dict[str, Any], label: str, style: str = "-") -> None:
        h = row["history_ms"]
        xs = [i + 1 for i, v in enumerate(h) if v is not None]
        ys = [v for v in h if v is not None]
        ax.plot(xs, ys, style, label=label)

    for ax, row in zip(flat, rows):
        curve(ax, row, f"loomtune {row['strategy']}")
        if row.get("tvm") and any(v is not None for v in row["tvm"]["history_ms"]):
            curve(
                ax,
                row["tvm"],
                "TVM MetaSchedule" + (" (cached run)" if row["tvm"]["cached"] else ""),
                "-",
            )
            if row.get("tvm_ms"):
                ax.plot(
                    [row["tvm"]["trials_done"]], [row["tvm_ms"]], "s", label="TVM final, re-timed"
                )
        if row["case"] in replay_of:
            curve(ax, replay_of[row["case"]]["replay"], "loomtune replay", "--")
        for name, key, style in (("numpy", "numpy_ms", ":"), ("PyTorch", "torch_ms", "-.")):
            if row.get(key):
                ax.axhline(
                    row[key],
                    linestyle=style,
                    color="gray" if name == "numpy" else "black",
                    label=f"{name} (final run)",
                )
        if row.get("latency_ms"):
            ax.plot(
                [row["trials_done"]], [row["latency_ms"]], "o", label="loomtune final, re-timed"
            )
        axes_style(ax, row["case"])
    if "reuse" in ex:
        ax = flat[len(rows)]
        curve(ax, ex["reuse"]["cold"], f"cold ({ex['reuse']['cold_trials']} trials)")
        curve(ax, ex["reuse"]["warm"], f"with 1024³'s records ({ex['reuse']['warm_trials']})")
        axes_style(ax, "matmul 1000³: reuse across shapes")
    for j, e in enumerate(seed_panels):
        ax = flat[len(rows) + (1 if "reuse" in ex else 0) + j]
        for i, p in enumerate(e["per_seed"]):
            color = f"C{i}"
            evo = p["evolutionary"]
            if evo is None:  # the main run's curve, cut at the budget
                main = next((r for r in rows if r["case"] == e["workload"]), None)
                evo = {"history_ms": main["history_ms"][: e["trials"]]} if main else None
            if evo is not None:
                xs, ys = _points(evo["history_ms"])
                ax.plot(xs, ys, "-", color=color, label=f"evolutionary, seed {p['seed']}")
            xs, ys = _points(p["replay"]["history_ms"])
            ax.plot(xs, ys, "--", color=color, label=f"replay, seed {p['seed']}")
        axes_style(ax, f"{e['workload']}: evolutionary vs replay")
    for ax in flat[panels:]:
        ax.axis("off")
    fig.suptitle(f"loomtune tuning curves, 1 thread ({result['utc']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _points(history: Sequence[float | None]) -> tuple[list[int], list[float]]:
    xs = [i + 1 for i, v in enumerate(history) if v is not None]
    return xs, [v for v in history if v is not None]
