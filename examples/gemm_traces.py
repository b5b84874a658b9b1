"""Write the hand-written GEMM traces of the kernel-quality gate (docs/gemm.md).

    python examples/gemm_traces.py      # rewrites examples/matmul_1024*.trace.json

The schedule: B packed into 16-wide column panels inside the kernel; for each
panel (j_0) and each 6-row strip (i_0), a 6x16 accumulator tile (12 ymm registers
on AVX2) lives in a local cache while k runs in blocks of 256; the tile is zeroed
before and written back after. The parallel variant splits the panels (and the
packing) over the threads.
"""

from __future__ import annotations

from pathlib import Path

from ir.schedule.layout import panel_map
from ir.task import library_task
from tuner.trace.file import TraceFile
from tuner.trace.traced_schedule import TracedSchedule

HERE = Path(__file__).resolve().parent
ROWS, PANEL, K_BLOCK = 6, 16, 256


def gemm_schedule(sch: TracedSchedule, *, parallel: bool) -> None:
    c = sch.get_block("C")
    pack = sch.transform_layout(c, "B", panel_map(PANEL))
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, ROWS])
    j0, j1 = sch.split(j, [None, PANEL])
    k0, k1 = sch.split(k, [None, K_BLOCK])
    sch.reorder(j0, i0, k0, k1, i1, j1)
    acc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(acc, i0)
    init = sch.decompose_reduction(c, k0)
    sch.unroll(i1)
    sch.vectorize(j1)
    _, _, zi, zj = sch.get_loops(init)
    sch.unroll(zi)
    sch.vectorize(zj)
    *_, wj = sch.get_loops(acc)
    sch.vectorize(wj)
    if parallel:
        sch.parallel(j0)
        sch.parallel(sch.get_loops(pack)[0])


def main() -> None:
    task = library_task("matmul", {"m": 1024, "n": 1024, "k": 1024})
    for name, threads in (("matmul_1024.trace.json", 1), ("matmul_1024_parallel.trace.json", 2)):
        sch = TracedSchedule(task.program)
        gemm_schedule(sch, parallel=threads > 1)
        TraceFile.for_task(task, f"host -num-threads={threads}", sch.trace).save(HERE / name)
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
