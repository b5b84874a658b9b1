"""Other processes on the machine while a benchmark times something: measured, flagged, waited out."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from benchmarks.common import log

#
# The machine may be shared (a 2-core VM where others run tests): a run time
# measured while another process held a core says little, least of all for a
# 2-thread kernel, whose fork-join waits for its slowest thread. So each
# timing records how much of the machine others used meanwhile, and a full run
# waits for a quiet moment before timing.

# Busy above this share of the machine's CPU time (others + hypervisor steal)
# counts as contended: flagged in tables, waited out before timing.
CONTENDED = 0.10


@dataclass(frozen=True)
class CpuSnapshot:
    """Cumulative CPU seconds: the whole machine (/proc/stat) and this process."""

    busy: float
    steal: float
    total: float
    own: float


def cpu_snapshot() -> CpuSnapshot | None:
    """None where /proc/stat is missing (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    own = os.times()
    return CpuSnapshot(
        busy=(user + nice + system + irq + softirq) / tick,
        steal=steal / tick,
        total=(user + nice + system + idle + iowait + irq + softirq + steal) / tick,
        own=own.user + own.system,
    )


def others_load(before: CpuSnapshot | None, after: CpuSnapshot | None) -> dict[str, float] | None:
    """Shares of the machine's CPU time used by other processes and stolen by the hypervisor."""
    if before is None or after is None or after.total <= before.total:
        return None
    span = after.total - before.total
    others = (after.busy - before.busy) - (after.own - before.own)
    return {
        "others": max(0.0, others / span),
        "steal": max(0.0, (after.steal - before.steal) / span),
    }


def is_contended(load: dict[str, float] | None) -> bool:
    return load is not None and load["others"] + load["steal"] > CONTENDED


# Quiet enough to start timing: stricter than CONTENDED, since a process that
# was running a moment ago is likely to run again.
QUIET = 0.05


def wait_until_quiet(max_wait_s: float, window_s: float = 1.0) -> float:
    """Sleep until others use under QUIET of the machine for one window; seconds waited."""
    start = time.perf_counter()
    announced = False
    while time.perf_counter() - start < max_wait_s:
        before = cpu_snapshot()
        time.sleep(window_s)
        load = others_load(before, cpu_snapshot())
        if load is None or load["others"] + load["steal"] < QUIET:
            break
        if not announced:
            log(f"  waiting (up to {max_wait_s:g} s) for other processes to quieten: {load}")
            announced = True
    return time.perf_counter() - start
