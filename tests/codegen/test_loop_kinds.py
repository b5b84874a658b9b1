"""Vectorized, unrolled and parallel loops: real vector IR, no back-edges, native threads."""

from __future__ import annotations

import re

import numpy as np
import pytest

from codegen.emit import emit_module
from codegen.host import host_target
from codegen.jit import compile_ir
from codegen.kernel import compile_program
from codegen.vector import default_lanes, plan_vector_loop
from ir.lower import lower
from ir.node import walk
from ir.program import For, Program
from ir.task import Task, library_task
from tests.codegen.loopkit import with_loop
from workers.verify import empty_outputs, verify


def run_and_verify(task: Task, program: Program, threads: int = 1) -> None:
    kernel = compile_program(program, host_target(threads))
    inputs = task.make_inputs(seed=3)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    assert verify(outputs, task.reference(inputs), task.output_names, task.reduction_length) is None


def function_body(text: str, symbol: str) -> str:
    m = re.search(r'define [^@]*@"?' + re.escape(symbol) + r'"?\(.*?\n}\n', text, re.S)
    assert m, f"no function {symbol}"
    return m.group(0)


# -- vectorized ----------------------------------------------------------------


def test_vectorized_loop_emits_vector_operations_and_its_serial_twin_does_not() -> None:
    task = library_task("gelu", {"m": 3, "n": 16})
    vec = emit_module(lower(with_loop(task.program, "j", "vectorized")), "k")
    ser = emit_module(lower(task.program), "k")
    for op in ("load <16 x float>", "store <16 x float>", "fmul reassoc contract nsz <16 x float>"):
        assert op in vec, op
    assert "x float>" not in ser


def test_vector_width_hint_and_remainder() -> None:
    task = library_task("gelu", {"m": 3, "n": 20})
    program = with_loop(task.program, "j", "vectorized", vector_width=8)
    text = emit_module(lower(program), "k")
    assert "<8 x float>" in text and "<16 x float>" not in text
    run_and_verify(task, program)  # 2 chunks of 8 plus a scalar tail of 4


def test_default_lanes_are_whole_registers_a_power_of_two_of_them() -> None:
    assert default_lanes(24, 8, 32) == 8  # three AVX2 registers
    assert default_lanes(48, 8, 32) == 16
    assert default_lanes(96, 8, 32) == 32
    assert default_lanes(48, 16, 64) == 16  # three AVX-512 registers
    assert default_lanes(96, 16, 64) == 32  # over the cap: no scalar tail of 32
    assert default_lanes(16, 8, 32) == 16
    assert default_lanes(1024, 8, 32) == 32
    assert default_lanes(12, 8, 32) == 8  # a register and a half: 8, then a vector of 4
    assert default_lanes(40, 16, 64) == 32  # two and a half AVX-512 registers: 32, then 8
    assert default_lanes(6, 8, 32) == 6  # less than a register: one vector, LLVM pads it
    assert default_lanes(37, 8, 32) == 32


def test_a_remainder_runs_as_narrower_vectors_never_as_one_vector_across_registers() -> None:
    # What `repair` makes of a 32-wide tile for n = 1000: 40 lanes, two and a half AVX-512
    # registers. As one <40 x float> LLVM shuffled it lane by lane (matmul 1000³: 483 ms, 10.7 ms now).
    task = library_task("gelu", {"m": 3, "n": 41})
    program = with_loop(task.program, "j", "vectorized")
    loop = next(n for n in walk(lower(program).body) if isinstance(n, For) and n.var.name == "j")
    plan = plan_vector_loop(loop, 16, 64)
    assert plan is not None and (plan.lanes, plan.chunks, plan.segments, plan.tail) == (
        32,
        1,
        (8,),
        9,
    )
    text = emit_module(lower(program), "k", vector_bits=512)
    assert (
        "<32 x float>" in text
        and "<8 x float>" in text
        and "<41 x float>" not in text
        and "<9 x float>" not in text
    )
    run_and_verify(task, program)  # 32 + 8 lanes as vectors, the last one scalar


def test_a_tile_of_three_registers_is_emitted_as_three_vectors() -> None:
    # What `repair` can make of a 32-wide tile: a 48-wide vectorized loop without a hint.
    task = library_task("gelu", {"m": 3, "n": 48})
    program = with_loop(task.program, "j", "vectorized")
    text = emit_module(lower(program), "k", vector_bits=512)
    assert "<16 x float>" in text and "<48 x float>" not in text
    run_and_verify(task, program)


def _packed_ops(asm: str) -> list[str]:
    return re.findall(r"\bv(?:add|mul|sub|fmadd\w*|div|max|min)ps\s+%[yz]mm", asm)


def test_assembly_uses_wide_registers_without_llvms_loop_vectorizer() -> None:
    # An element-wise op whose vectorized loop is ours, not LLVM's.
    task = library_task("gelu", {"m": 4, "n": 64})
    vec_text = emit_module(lower(with_loop(task.program, "j", "vectorized", vector_width=8)), "kv")
    ser_text = emit_module(lower(task.program), "ks")
    vec_asm = compile_ir(
        vec_text, host_target(), loop_vectorize=False, slp_vectorize=False
    ).assembly()
    ser_asm = compile_ir(
        ser_text, host_target(), loop_vectorize=False, slp_vectorize=False
    ).assembly()
    assert _packed_ops(vec_asm), "vectorized loop did not use packed ymm/zmm arithmetic"
    assert not _packed_ops(ser_asm), (
        "the serial twin should stay scalar with LLVM's vectorizers off"
    )


@pytest.mark.parametrize(
    ("op", "params", "loop", "width"),
    [
        ("gelu", {"m": 3, "n": 37}, "j", 8),  # remainder 5
        ("softmax", {"m": 4, "n": 33}, "j_1", 16),  # exp of a vector, remainder 1
        ("matmul", {"m": 5, "n": 19, "k": 7}, "j", 8),  # reduction inside, j spatial
        ("matmul_int8", {"m": 3, "n": 21, "k": 9}, "j", 8),  # integer vectors and casts
        (
            "conv2d_nhwc",
            {
                "n": 1,
                "h": 5,
                "w": 5,
                "ci": 3,
                "co": 10,
                "kh": 3,
                "kw": 3,
                "stride": 1,
                "pad": 1,
                "dilation": 1,
            },
            "c",
            4,
        ),
        (
            "avg_pool2d",
            {"n": 1, "h": 6, "w": 6, "c": 11, "kh": 3, "kw": 3, "stride": 2, "pad": 1},
            "ch",
            8,
        ),
    ],
)
def test_vectorized_programs_are_correct(
    op: str, params: dict[str, int], loop: str, width: int
) -> None:
    task = library_task(op, params)
    run_and_verify(task, with_loop(task.program, loop, "vectorized", vector_width=width))


def test_vectorizing_a_reduction_axis_falls_back_to_correct_serial_code() -> None:
    task = library_task("reduce_sum", {"m": 4, "n": 24})
    program = with_loop(task.program, "r", "vectorized")
    assert "<24 x float>" not in emit_module(lower(program), "k")
    run_and_verify(task, program)


# -- unrolled --------------------------------------------------------------------


def test_unrolled_loop_has_no_back_edge_and_four_stores() -> None:
    task = library_task("transpose", {"m": 1, "n": 4})
    text = function_body(emit_module(lower(with_loop(task.program, "j", "unrolled")), "k"), "k")
    assert text.count("store ") == 4
    assert "phi" not in text and "j.header" not in text
    serial = function_body(emit_module(lower(task.program), "k"), "k")
    assert "phi" in serial and serial.count("store ") == 1


def test_unrolled_tile_index_arithmetic_is_folded_and_one_chunk_vectors_have_no_loop() -> None:
    # A register tile: rows unrolled, each row one 16-wide vector. Its index arithmetic on the
    # unrolled constants is folded while emitting, and a vector loop of one chunk is no loop.
    task = library_task("matmul", {"m": 4, "n": 16, "k": 8})
    program = with_loop(
        with_loop(task.program, "i", "unrolled"), "j", "vectorized", vector_width=16
    )
    text = function_body(emit_module(lower(program), "k"), "k")
    constant_only = re.findall(r"= (?:add|sub|mul)(?: nsw)? i64 -?\d+, -?\d+\n", text)
    assert constant_only == []
    assert re.findall(r"(?:add i64 %\S+, 0|mul i64 %\S+, 1)\n", text) == []
    assert ".vec.header" not in text
    assert text.count("store <16 x float>") == 8  # each row: its init and its update
    run_and_verify(task, program)


def test_unrolled_programs_are_correct() -> None:
    task = library_task("matmul", {"m": 3, "n": 5, "k": 6})
    run_and_verify(task, with_loop(with_loop(task.program, "r", "unrolled"), "j", "unrolled"))


# -- parallel --------------------------------------------------------------------


def test_parallel_loop_is_outlined_onto_the_thread_pool() -> None:
    task = library_task("gelu", {"m": 8, "n": 8})
    text = emit_module(lower(with_loop(task.program, "i", "parallel")), "k", num_threads=2)
    assert re.search(r'call void @"?loomtune_parallel_run"?\(.*@"?k\.par\d+"?, .*, i32 2\)', text)
    assert "pthread_create" not in text  # the pool starts threads, not the kernel
    assert re.search(r"define internal void @\"?k\.par\d+", text) and re.search(
        r"define internal i32 @\"?k\.body\d+\"?\(ptr noalias", text
    )
    # One thread: no pool at all.
    assert "loomtune_parallel_run" not in emit_module(
        lower(with_loop(task.program, "i", "parallel")), "k", num_threads=1
    )


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize(
    ("op", "params", "loops"),
    [
        ("gelu", {"m": 7, "n": 13}, {"i": "parallel"}),
        (
            "matmul",
            {"m": 9, "n": 5, "k": 4},
            {"i": "parallel"},
        ),  # parallel over a reduction's spatial axis
        ("matmul", {"m": 4, "n": 9, "k": 4}, {"j": "parallel"}),  # parallel nested in a serial loop
        (
            "matmul",
            {"m": 6, "n": 6, "k": 3},
            {"i": "parallel", "j": "parallel"},
        ),  # nested parallel: inner serial
        (
            "softmax",
            {"m": 5, "n": 40},
            {"i": "parallel", "i_1": "parallel", "i_2": "parallel", "i_3": "parallel"},
        ),
        (
            "gelu",
            {"m": 2, "n": 64},
            {"i": "parallel", "j": "vectorized"},
        ),  # parallel over fewer rows than threads
    ],
)
def test_parallel_programs_are_correct(
    op: str, params: dict[str, int], loops: dict[str, str], threads: int
) -> None:
    task = library_task(op, params)
    program = task.program
    for name, kind in loops.items():
        program = with_loop(program, name, kind)
    run_and_verify(task, program, threads)


def test_parallel_kernel_is_reentrant() -> None:
    task = library_task("matmul", {"m": 32, "n": 16, "k": 8})
    kernel = compile_program(with_loop(task.program, "i", "parallel"), host_target(2))
    inputs = task.make_inputs()
    (ref,) = task.reference(inputs)
    for _ in range(20):
        (out,) = empty_outputs(task.output_specs())
        kernel(*inputs, out)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


# -- math -------------------------------------------------------------------------


def test_polynomial_exp_and_tanh_meet_the_tolerance_over_a_wide_range() -> None:
    from ir import compute as te
    from ir.build import build_program

    x = te.placeholder((4096,), "float32", "X")
    e = te.compute((4096,), lambda i: te.exp(x[i]), "E")
    t = te.compute((4096,), lambda i: te.tanh(x[i]), "T")
    for out, ref in ((e, np.exp), (t, np.tanh)):
        program = with_loop(
            build_program(te.Workload("f", (x,), (out,))), "i", "vectorized", vector_width=8
        )
        kernel = compile_program(program)
        xs = np.concatenate(
            [
                np.linspace(-90, 90, 4000, dtype=np.float32),
                np.float32([0, -0.0, 1e-6, np.nan, np.inf, -np.inf]),
            ]
        )
        xs = np.pad(xs, (0, 4096 - xs.size)).astype(np.float32)
        y = np.full(4096, np.nan, np.float32)
        kernel(xs, y)
        with np.errstate(over="ignore"):
            expected = ref(xs)
        assert verify([y], [expected], [out.name]) is None


def test_row_max_propagates_nan_and_division_by_a_row_value_matches_numpy() -> None:
    """max carries nsz and division arcp (`codegen/emit.py`): a row holding NaN still
    has a NaN max, and x / s[i] (LICM hoists 1/s[i] out of the row) stays within tolerance."""
    from ir import compute as te
    from ir.build import build_program

    m, n = 8, 1024
    x = te.placeholder((m, n), "float32", "X")
    r = te.reduce_axis(n, "r")
    mx = te.compute((m,), lambda i: te.max(x[i, r], axis=r), "M")
    y = te.compute((m, n), lambda i, j: x[i, j] / mx[i], "Y")
    program = build_program(te.Workload("rowdiv", (x,), (mx, y)))
    kernel = compile_program(with_loop(program, "j", "vectorized", vector_width=16))
    rng = np.random.default_rng(0)
    xs = rng.uniform(0.5, 3.0, (m, n)).astype(np.float32)
    xs[3, 700] = np.nan
    xs[5, 0] = -0.0
    got_max = np.full(m, -1.0, np.float32)
    got_y = np.full((m, n), -1.0, np.float32)
    kernel(xs, got_max, got_y)
    want_max = xs.max(axis=1)
    assert np.isnan(got_max[3])
    np.testing.assert_array_equal(np.delete(got_max, 3), np.delete(want_max, 3))
    ok = np.arange(m) != 3
    np.testing.assert_allclose(got_y[ok], xs[ok] / want_max[ok, None], rtol=2e-7 * 4)
