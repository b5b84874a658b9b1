"""The end of a tuning run: the best stored records re-timed together, the fastest returned."""

from __future__ import annotations

import random
import uuid

from codegen.host import host_target
from ir.task import library_task
from tuner.database import TuningRecord
from tuner.space import default_space
from tuner.trace.trace import Trace
from workers.finalists import select_fastest
from workers.timing import MeasureConfig

TASK = library_task("matmul", {"m": 96, "n": 96, "k": 96})
TARGET = host_target(1)
QUICK = MeasureConfig(warmup=1, number=0, repeat=5, min_repeat_ms=2.0)


IDS = {name: str(uuid.uuid5(uuid.NAMESPACE_OID, name)) for name in ("naive", "corrupt", "tiled")}
NAMES = {v: k for k, v in IDS.items()}


def _record(trace: Trace | dict, median_ms: float, name: str) -> TuningRecord:
    data = trace.to_json() if isinstance(trace, Trace) else trace
    return TuningRecord(
        record_id=IDS[name],
        workload_key=TASK.key,
        op=TASK.op,
        params=dict(TASK.params),
        definition=TASK.to_definition(),
        target=TARGET.canonical(),
        trace=data,
        trace_hash=name,
        run_times_ms=(median_ms,),
        median_ms=median_ms,
        status="ok",
    )


def test_a_lucky_tuning_median_does_not_win_the_re_timing() -> None:
    """The naive loop nest 'measured' fastest while tuning (a lucky draw, as it were) loses
    to a tiled kernel when both are timed together; a trace that no longer replays is left
    out with its reason."""
    space = default_space(TASK.program, TARGET)
    tiled = space.sample(random.Random(3))
    naive = Trace(())
    corrupt = {
        "version": 1,
        "instructions": [
            {"kind": "get_block", "inputs": [], "attrs": {"name": "nope"}, "outputs": ["b0"]}
        ],
        "decisions": {},
    }
    records = [
        _record(naive, 0.01, "naive"),
        _record(corrupt, 0.02, "corrupt"),
        _record(tiled, 0.03, "tiled"),
    ]
    chosen = select_fastest(TASK, TARGET, records, QUICK)
    assert chosen is not None and NAMES[chosen.best.record_id] == "tiled"
    timed = [f for f in chosen.finalists if f.retimed_ms is not None]
    assert [NAMES[f.record.record_id] for f in timed] == ["tiled", "naive"] and timed[
        0
    ].retimed_ms < timed[1].retimed_ms
    (dropped,) = [f for f in chosen.finalists if f.retimed_ms is None]
    assert NAMES[dropped.record.record_id] == "corrupt" and "nope" in (dropped.message or "")
    assert select_fastest(TASK, TARGET, [records[1]], QUICK) is None
    single = select_fastest(TASK, TARGET, [records[2]], QUICK)
    assert (
        single is not None
        and NAMES[single.best.record_id] == "tiled"
        and single.finalists[0].retimed_ms is None
    )
