"""Write the hand-written GEMM traces of the kernel-quality gate (docs/gemm.md).

    python examples/gemm_traces.py      # rewrites examples/matmul_1024*.trace.json

The schedule: B packed into column panels inside the kernel; for each panel
(j_0) and each strip of rows (i_0), an accumulator tile lives in a local cache
while k runs in blocks of 256; the tile is zeroed before and written back after.
The parallel variant splits the panels (and the packing) over the threads.

The register tile follows the vectors (`register_tile`): with AVX2, 6 x 16
(12 of the 16 ymm), B in 16-wide panels; with AVX-512, 12 rows x 32 columns
(24 zmm accumulators of the 32), B in 32-wide panels. A trace fixes its tile,
so there is one pair of files per vector width: `matmul_1024*.trace.json`
(AVX2, runs on every x86-64-v3 machine) and `matmul_1024_avx512*.trace.json`;
`trace_files(vector_bits)` names the pair a host should use.
"""

from __future__ import annotations

from pathlib import Path

from ir.schedule.layout import panel_map
from ir.task import library_task
from tuner.trace.file import TraceFile
from tuner.trace.traced_schedule import TracedSchedule

HERE = Path(__file__).resolve().parent
K_BLOCK = 256


def register_tile(vector_bits: int) -> tuple[int, int]:
    """(rows, panel width) of the accumulator tile for float32 vectors of `vector_bits`."""
    return (12, 32) if vector_bits >= 512 else (6, 16)


def gemm_schedule(sch: TracedSchedule, *, parallel: bool, rows: int = 6, panel: int = 16) -> None:
    c = sch.get_block("C")
    pack = sch.transform_layout(c, "B", panel_map(panel))
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, panel])
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


def trace_files(vector_bits: int) -> tuple[tuple[str, int], tuple[str, int]]:
    """The (file name, threads) pair of traces written for `vector_bits`-wide vectors."""
    suffix = "_avx512" if vector_bits >= 512 else ""
    return (f"matmul_1024{suffix}.trace.json", 1), (f"matmul_1024{suffix}_parallel.trace.json", 2)


def main() -> None:
    task = library_task("matmul", {"m": 1024, "n": 1024, "k": 1024})
    for vector_bits in (256, 512):
        rows, panel = register_tile(vector_bits)
        for name, threads in trace_files(vector_bits):
            sch = TracedSchedule(task.program)
            gemm_schedule(sch, parallel=threads > 1, rows=rows, panel=panel)
            TraceFile.for_task(task, f"host -num-threads={threads}", sch.trace).save(HERE / name)
            print(f"wrote {HERE / name} ({rows}x{panel} register tile)")


if __name__ == "__main__":
    main()
