"""A hand-written GEMM schedule with every kind of primitive, correct at 1024^3 and 1000^3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ir.printer import print_program
from ir.schedule import Schedule
from ir.schedule.layout import panel_map
from ir.task import library_task
from tests.ir.schedule.schedcheck import assert_correct

ROOT = Path(__file__).resolve().parents[3]


def gemm(n: int) -> tuple:
    task = library_task("matmul", {"m": n, "n": n, "k": n})
    sch = Schedule(task.program)
    c = sch.get_block("C")
    sch.transform_layout(c, "B", panel_map(16))
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 6])  # 1024 and 1000 are not multiples of 6: guarded edge tiles
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 256])
    sch.reorder(j0, i0, k0, k1, i1, j1)
    acc = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(acc, i0)
    sch.decompose_reduction(c, k0)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.parallel(j0)
    return task, sch


@pytest.mark.parametrize("n", [1024, 1000])
def test_hand_written_gemm_is_correct(n: int) -> None:
    task, sch = gemm(n)
    text = print_program(sch.program)
    for piece in ("B_packed", "C_local", "C_init", "parallel(", "unrolled(6)", "vectorized(16)"):
        assert piece in text
    assert_correct(task, sch.program, threads=2)


@pytest.mark.parametrize(
    "name",
    [
        "matmul_1024.trace.json",
        "matmul_1024_parallel.trace.json",
        "matmul_1024_avx512.trace.json",
        "matmul_1024_avx512_parallel.trace.json",
    ],
)
def test_gemm_traces_apply_to_1000_with_repair(name: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.cli",
            "apply",
            str(ROOT / "examples" / name),
            "m=1000",
            "n=1000",
            "k=1000",
            "--repair",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["correct"] is True and out["params"] == {"m": 1000, "n": 1000, "k": 1000}
