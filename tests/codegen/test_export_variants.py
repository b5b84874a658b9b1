"""An exported kernel that streams its weight unpacked carries one variant per offset of
the weight in a cache line and picks it by the weight's address, as the JIT does."""

from __future__ import annotations

import ctypes
import random
import re
from pathlib import Path

import numpy as np
import pytest

from codegen.emit import emit_dispatch_module
from codegen.export import export_kernel, header_path, shift_variants
from codegen.host import host_target
from codegen.jit import compile_ir
from ir import compute as te
from ir.arrays import copy_at_offset
from ir.build import build_program
from ir.lower import lower
from ir.schedule.shift import Streamed
from ir.task import library_task
from tests.codegen.test_export import (
    check_links_only_system_libraries,
    loomtune,
    needs_binutils,
    needs_cc,
)
from tests.ir.schedule.test_shift import _streamed_dense
from tuner.trace.file import TraceFile
from tuner.trace.traced_schedule import TracedSchedule
from workers.verify import empty_outputs, verify


@needs_cc
@needs_binutils
def test_a_streamed_weight_runs_correctly_at_every_offset_through_one_symbol(
    tmp_path: Path,
) -> None:
    task, program = _streamed_dense()
    so = tmp_path / "libdense.so"
    export_kernel(program, host_target(), symbol="dense", fmt="so", output=so)
    header = header_path(so).read_text()
    assert "Compiled 16 times, once per offset of W in a 64-byte" in header
    check_links_only_system_libraries(so, "dense")  # the variants stay internal
    dense = ctypes.CDLL(str(so)).dense
    made = task.make_inputs(seed=5)
    for offset in (0, 4, 6, 16, 32, 48, 60):  # 6: not a whole float, the unshifted code
        inputs = [copy_at_offset(a, offset) for a in made]
        outputs = empty_outputs(task.output_specs(), offset)
        assert dense(*(ctypes.c_void_p(a.ctypes.data) for a in (*inputs, *outputs))) == 0
        reason = verify(outputs, task.reference(made), task.output_names, task.reduction_length)
        assert reason is None, f"W {offset} bytes into a line: {reason}"


def _writes(shift: int):
    """A program that fills Y with `shift`: which variant ran is in its output."""
    w = te.placeholder((64,), "float32", "W")
    y = te.compute((4,), lambda i: w[i] * 0.0 + float(shift), "Y")
    return lower(build_program(te.Workload("pick", (w,), (y,))))


def test_the_dispatcher_runs_the_variant_shifted_by_the_inputs_offset() -> None:
    """Variants that each write their own shift: the one that runs is the one for W's offset."""
    streamed = Streamed(param=0, loop="i", columns=4, itemsize=4)
    variants = {s: _writes(s) for s in range(16)}
    text = emit_dispatch_module(variants, streamed, "pick", vector_bits=host_target().vector_bits)
    module = compile_ir(text, host_target())
    pick = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)(
        module.address("pick")
    )
    raw = np.zeros(64 * 4 + 128, np.uint8)
    line = -raw.ctypes.data % 64
    for offset in range(0, 64, 2):  # whole floats and halves (there: the unshifted code)
        address = raw.ctypes.data + line + offset
        out = np.full(4, np.nan, np.float32)
        assert pick(address, out.ctypes.data) == 0
        want = streamed.shift_for(address)
        assert want == (0 if offset % 4 else offset // 4)
        assert out.tolist() == [want] * 4, f"W {offset} bytes into a line ran variant {out[0]}"


def test_the_exported_variants_stay_internal_functions(tmp_path: Path) -> None:
    _, program = _streamed_dense()
    found = shift_variants(program)
    assert found is not None and sorted(found[1]) == list(range(16))
    (ll,) = export_kernel(
        program, host_target(), symbol="dense", fmt="ll", output=tmp_path / "d.ll"
    )
    text = ll.read_text()
    for s in range(16):
        assert re.search(rf'define internal .*@"?dense\.shift{s}"?\(', text), f"no variant {s}"
    assert re.search(r"define .*i32 @dense\(", text)


@pytest.mark.parametrize(
    "op, params",
    [("matmul", {"m": 8, "n": 9, "k": 10}), ("dense", {"m": 4, "n": 64, "k": 8, "bias": 1})],
)
def test_a_kernel_without_a_streamed_tile_loop_exports_one_function(
    tmp_path: Path, op: str, params: dict[str, int]
) -> None:
    program = library_task(op, params).program  # the default nest: no tiles to shift
    assert shift_variants(program) is None
    (ll,) = export_kernel(program, host_target(), symbol="k", fmt="ll", output=tmp_path / "k.ll")
    assert ".shift" not in ll.read_text()


@needs_cc
@needs_binutils
def test_the_cli_says_it_exports_one_variant_per_offset(tmp_path: Path) -> None:
    """`loomtune export --trace` of a schedule streaming W unpacked in 32 column tiles."""
    task = library_task("dense", {"m": 8, "n": 1024, "k": 12, "bias": 1, "relu": 1})
    sch = TracedSchedule(task.program, rng=random.Random(0))
    xw = sch.get_block("XW")
    i, j, r = sch.get_loops(xw)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=4, decision=[2, 4]))
    j0, j1 = sch.split(
        j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=32, decision=[32, 32])
    )
    sch.reorder(j0, i0, r, i1, j1)
    written = sch.cache_write(xw, 0, "local")
    sch.reverse_compute_at(written, i0)
    sch.reverse_compute_inline(sch.get_block("Y"))
    sch.decompose_reduction(xw, r)
    sch.vectorize(j1)
    trace = tmp_path / "dense.trace.json"
    TraceFile.for_task(task, "host", sch.trace).save(trace)
    so = tmp_path / "libd.so"
    done = loomtune("export", "--trace", str(trace), "--format", "so", "-o", str(so), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "16 variants, one per offset of W in a cache line" in done.stderr, done.stderr
    assert "Compiled 16 times" in header_path(so).read_text()
    check_links_only_system_libraries(so, "dense")
