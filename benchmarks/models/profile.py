"""Where a compiled model's time goes, for the benchmark's rows: each task's `ms` and
`time_share` (`codegen.model_profile` times them) and, above one thread, its speed-up over
the 1-thread build. A whole model's speed-up from a second core is the time-weighted mean
of its tasks'; this says which tasks hold it back (a kernel the search left serial, a small
one whose fork-join costs more than its work, one bound by memory bandwidth).
"""

from __future__ import annotations

from typing import Any


def annotate(tasks: list[dict[str, Any]], times: dict[str, float]) -> None:
    """Each task of a row's `task_list` gets `ms` (per inference) and `time_share`."""
    total = sum(times.values()) or 1.0
    by_prefix = {key[:12]: ms for key, ms in times.items()}
    for t in tasks:
        ms = by_prefix.get(t["key"])
        if ms is not None:
            t["ms"] = ms
            t["time_share"] = ms / total


def scaling(one: list[dict[str, Any]], more: list[dict[str, Any]]) -> None:
    """Each task of a row above one thread gets `x_own_1thread`: its 1-thread ms over its ms."""
    single = {t["key"]: t.get("ms") for t in one}
    for t in more:
        base, ms = single.get(t["key"]), t.get("ms")
        if base and ms:
            t["x_own_1thread"] = base / ms
