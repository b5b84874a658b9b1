"""Compute-location primitives: before/after goldens, correctness through codegen, refusals."""

from __future__ import annotations

import ir.compute as te
from ir.build import build_program
from ir.printer import print_program
from ir.schedule import Schedule
from ir.schedule.layout import IndexMap
from ir.task import Task, library_task
from tests.ir.schedule.schedcheck import assert_correct, assert_refused

CONV = {
    "n": 1,
    "h": 13,
    "w": 11,
    "ci": 3,
    "co": 5,
    "kh": 3,
    "kw": 3,
    "stride": 1,
    "pad": 1,
    "dilation": 1,
}
SOFTMAX = {"m": 37, "n": 19}
DENSE = {"m": 37, "n": 19, "k": 23, "bias": 1, "relu": 1}


def _task(name: str, inputs: tuple[te.Tensor, ...], outputs: tuple[te.Tensor, ...]) -> Task:
    """A custom workload; its reference is the DSL evaluator, independent of codegen."""
    workload = te.Workload(name, inputs, outputs)
    return Task(name, {}, workload, build_program(workload))


def _twice_plus_one(n: int = 37) -> Task:
    """B = A * 2; C = B + 1 (C the output, B an intermediate)."""
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] * 2.0, "B")
    C = te.compute((n,), lambda i: B[i] + 1.0, "C")
    return _task("twice_plus_one", (A,), (C,))


def _transpose_then_scale(m: int = 37, n: int = 19) -> Task:
    A = te.placeholder((m, n), "float32", "A")
    B = te.compute((n, m), lambda i, j: A[j, i], "B")
    C = te.compute((n, m), lambda i, j: B[i, j] * 3.0 - 1.0, "C")
    return _task("transpose_then_scale", (A,), (C,))


def _matmul_gelu(m: int = 37, n: int = 19, k: int = 23) -> Task:
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), "C")
    G = te.compute(
        (m, n),
        lambda i, j: (
            0.5
            * C[i, j]
            * (
                1.0
                + te.tanh(0.7978845608028654 * (C[i, j] + 0.044715 * C[i, j] * C[i, j] * C[i, j]))
            )
        ),
        "G",
    )
    return _task("matmul_gelu", (A, B), (G,))


# ---------------------------------------------------------------------------
# compute_at


def test_compute_at_softmax_rows_golden_and_correct(golden) -> None:
    task = library_task("softmax", SOFTMAX)
    sch = Schedule(task.program)
    golden("cl_softmax_before.txt", print_program(sch.program))
    # Consumers first: each producer then finds all its consumers under i_3.
    for block in ("exp_sum", "x_exp", "x_max"):
        sch.compute_at(block, "i_3")
    golden("compute_at_softmax_after.txt", print_program(sch.program))
    assert [b.name for b in sch.get_child_blocks("i_3")] == ["x_max", "x_exp", "exp_sum", "Y"]
    assert [lp.name for lp in sch.get_loops("x_max")] == ["i_3", "ax0_2", "ax1_2"]
    text = print_program(sch.program)
    assert "vi = spatial(37, i_3 + ax0_2)" in text and "vr = reduce(19, ax1_2)" in text
    assert_correct(task, sch.program)


def test_compute_at_under_a_parallel_loop_with_disjoint_rows() -> None:
    task = library_task("softmax", SOFTMAX)
    sch = Schedule(task.program)
    sch.parallel("i_3")
    for block in ("exp_sum", "x_exp", "x_max"):
        sch.compute_at(block, "i_3")
    assert_correct(task, sch.program, threads=4)


def test_compute_at_conv_pad_at_row_loop_golden_and_correct(golden) -> None:
    task = library_task("conv2d_nhwc", CONV)
    sch = Schedule(task.program)
    sch.compute_at("pad", "i")
    golden("compute_at_conv_pad_after.txt", print_program(sch.program))
    # One output row reads three padded rows, the whole padded width.
    text = print_program(sch.program)
    assert (
        "for ax1 in range(3):" in text
        and "vy = spatial(15, i + ax1)" in text
        and "range(13)" in text
    )
    assert "where(" not in text.split('with block("Y")')[0]
    assert_correct(task, sch.program)


def test_compute_at_dense_xw_at_output_row() -> None:
    task = library_task("dense", DENSE)
    sch = Schedule(task.program)
    sch.compute_at("XW", "i_1")
    assert [lp.name for lp in sch.get_loops("XW")] == ["i_1", "ax0", "ax1", "ax2"]
    assert_correct(task, sch.program)


def test_compute_at_inner_tile_loop_after_imperfect_splits(golden) -> None:
    """The combination: tile the consumer, then compute the producer per tile (guarded at the edge)."""
    task = library_task("conv2d_nhwc", CONV)
    sch = Schedule(task.program)
    i0, i1 = sch.split("i", [None, 4])  # 13 = 4 * 4 - 3
    j0, j1 = sch.split("j", [None, 5])  # 11 = 3 * 5 - 4
    sch.reorder(i0, j0, i1, j1)
    sch.compute_at("pad", j0)
    golden("compute_at_conv_tile_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    # A 4 x 5 output tile reads a 6 x 7 padded tile; the last tiles run past the padded image.
    assert "for ax1 in range(6):" in text and "for ax2 in range(7):" in text
    assert "where(i_0 * 4 + ax1 < 15 and j_0 * 5 + ax2 < 13)" in text
    assert_correct(task, sch.program)
    # Neighbouring row tiles recompute overlapping padded rows: threads would race on them.
    assert_refused(sch, lambda s: s.parallel(i0), "loop i_0", '"pad"', "overlapping")


def test_compute_at_reduction_loop_of_consumer() -> None:
    """At a reduction loop of the conv, the producer is recomputed per filter row: still exact."""
    task = library_task("conv2d_nhwc", CONV)
    sch = Schedule(task.program)
    sch.compute_at("pad", "rh")
    text = print_program(sch.program)
    assert "vy = spatial(15, i + rh + ax1)" in text and "for ax1 in range(1):" in text
    assert_correct(task, sch.program)


def test_compute_at_transposed_producer_with_repeated_reads() -> None:
    """The producer writes its buffer transposed; the consumer reads it four times per element."""
    task = library_task("gelu", {"m": 13, "n": 31})
    sch = Schedule(task.program)
    sch.transform_layout("Y", "X", IndexMap.from_callable(2, lambda a, c: (c, a)))
    sch.compute_at("X_packed", "i")
    text = print_program(sch.program)
    assert "vax0 = spatial(13, i + ax0_1)" in text and "for ax1_1 in range(31):" in text
    assert_correct(task, sch.program)


def test_compute_at_output_producer_covered_or_refused() -> None:
    n = 37
    A = te.placeholder((n, 19), "float32", "A")
    B = te.compute((n, 19), lambda i, j: A[i, j] * 2.0, "B")
    C = te.compute((n, 19), lambda i, j: B[i, j] + 1.0, "C")
    task = _task("two_outputs", (A,), (B, C))
    sch = Schedule(task.program)
    sch.compute_at("B", "i_1")  # C reads every row of B: the output is still written in full
    assert_correct(task, sch.program)

    D = te.compute((18, 19), lambda i, j: B[2 * i, j], "D")
    partial = Schedule(_task("strided", (A,), (B, D)).program)
    assert_refused(partial, lambda s: s.compute_at("B", "i_1"), '"B"', "loop i_1", "program output")


def test_compute_at_refusals() -> None:
    task = library_task("softmax", SOFTMAX)
    sch = Schedule(task.program)
    # x_exp, the consumer of x_max, is not under i_3.
    assert_refused(sch, lambda s: s.compute_at("x_max", "i_3"), '"x_max"', "loop i_3", '"x_exp"')
    assert_refused(sch, lambda s: s.compute_at("x_max", "r"), '"x_max"', "loop r", "nest")
    assert_refused(sch, lambda s: s.compute_at("Y", "i_2"), '"Y"', "loop i_2", "no consumer")
    assert_refused(sch, lambda s: s.compute_at("x_max", "nope"), "loop nope")
    assert_refused(sch, lambda s: s.compute_at("nope", "i_3"), '"nope"')

    for block in ("exp_sum", "x_exp", "x_max"):
        sch.compute_at(block, "i_3")
    # x_exp now sits after x_max inside i_3: moving it again would read x_max before it is computed.
    assert_refused(sch, lambda s: s.compute_at("x_exp", "i_3"), '"x_exp"', "loop i_3", '"x_max"')

    dense = Schedule(library_task("dense", DENSE).program)
    dense.unroll("i_1")
    assert_refused(dense, lambda s: s.compute_at("XW", "i_1"), '"XW"', "loop i_1", "unrolled")

    conv = Schedule(library_task("conv2d_nhwc", CONV).program)
    conv.parallel("i")
    # Neighbouring output rows share padded rows: parallel iterations would write the same elements.
    assert_refused(conv, lambda s: s.compute_at("pad", "i"), '"pad"', "loop i", "overlapping")
    assert_refused(conv, lambda s: s.compute_at("pad", "j"), '"pad"', "loop j", "parallel loop i")


# ---------------------------------------------------------------------------
# reverse_compute_at


def test_reverse_compute_at_dense_epilogue_golden_and_correct(golden) -> None:
    task = library_task("dense", DENSE)
    sch = Schedule(task.program)
    golden("cl_dense_before.txt", print_program(sch.program))
    sch.reverse_compute_at("Y", "i")
    golden("reverse_compute_at_dense_after.txt", print_program(sch.program))
    assert [b.name for b in sch.get_child_blocks("i")] == ["XW", "Y"]
    assert [lp.name for lp in sch.get_loops("Y")] == ["i", "ax0", "ax1"]
    assert_correct(task, sch.program)


def test_reverse_compute_at_tile_loop_after_imperfect_splits(golden) -> None:
    task = library_task("dense", DENSE)
    sch = Schedule(task.program)
    i0, i1 = sch.split("i", [None, 8])  # 37 = 5 * 8 - 3
    j0, j1 = sch.split("j", [None, 4])  # 19 = 5 * 4 - 1
    sch.reorder(i0, j0, "r", i1, j1)
    sch.reverse_compute_at("Y", j0)
    golden("reverse_compute_at_dense_tile_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert (
        "vi_1 = spatial(37, i_0 * 8 + ax0)" in text
        and "where(i_0 * 8 + ax0 < 37 and j_0 * 4 + ax1 < 19)" in text
    )
    assert_correct(task, sch.program)
    sch.parallel(i0)
    assert_correct(task, sch.program, threads=4)


def test_reverse_compute_at_gelu_after_matmul() -> None:
    task = _matmul_gelu()
    sch = Schedule(task.program)
    i0, i1 = sch.split("i", [None, 6])
    sch.reorder(i0, "j", "r", i1)
    sch.reverse_compute_at("G", "j")
    assert [b.name for b in sch.get_child_blocks("j")] == ["C", "G"]
    assert [lp.name for lp in sch.get_loops("G")] == ["i_0", "j", "ax0", "ax1"]
    assert_correct(task, sch.program)


def test_reverse_compute_at_cache_write_back() -> None:
    task = library_task("matmul", {"m": 37, "n": 19, "k": 23})
    sch = Schedule(task.program)
    back = sch.cache_write("C", 0, "local")
    i0, i1 = sch.split("i", [None, 8])
    j0, j1 = sch.split("j", [None, 4])
    sch.reorder(i0, j0, "r", i1, j1)
    sch.reverse_compute_at(back, j0)
    assert [b.name for b in sch.get_child_blocks(j0)] == ["C", back.name]
    assert_correct(task, sch.program)


def test_reverse_compute_at_refusals() -> None:
    sch = Schedule(library_task("dense", DENSE).program)
    # Inside the reduction loop the sums are not final yet.
    assert_refused(
        sch, lambda s: s.reverse_compute_at("Y", "r"), '"Y"', "loop r", '"XW"', "reduction"
    )
    assert_refused(sch, lambda s: s.reverse_compute_at("Y", "i_1"), '"Y"', "loop i_1", "producer")
    sch.vectorize("j")
    assert_refused(sch, lambda s: s.reverse_compute_at("Y", "j"), '"Y"', "loop j", "vectorized")

    conv = Schedule(library_task("conv2d_nhwc", CONV).program)
    # The conv reads pad at i + rh: not one of its own iteration variables per dimension.
    assert_refused(conv, lambda s: s.reverse_compute_at("Y", "y"), '"Y"', "loop y", "pad")

    fused = Schedule(library_task("dense", DENSE).program)
    f = fused.fuse("i", "j")
    fused.split(f, [None, 37])  # 703 = 19 * 37: perfect, no guard
    # 37 consecutive elements of a row-major 37 x 19 array are not a box.
    assert_refused(fused, lambda s: s.reverse_compute_at("Y", "i_j_fused_0"), '"Y"', "not a box")


# ---------------------------------------------------------------------------
# compute_inline


def test_compute_inline_conv_pad_golden_and_correct(golden) -> None:
    task = library_task("conv2d_nhwc", CONV)
    sch = Schedule(task.program)
    golden("cl_conv_before.txt", print_program(sch.program))
    sch.compute_inline("pad")
    golden("compute_inline_conv_pad_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert 'block("pad")' not in text and "pad = alloc" not in text
    assert "reads(X[vb_1, vi + vrh - 1, vj + vrw - 1, vrc], W[vrh, vrw, vrc, vo])" in text
    assert_correct(task, sch.program)
    i0, _ = sch.split("i", [None, 4])
    sch.parallel(i0)
    assert_correct(task, sch.program, threads=2)


def test_compute_inline_softmax_exp_into_reduction_and_normalize() -> None:
    task = library_task("softmax", SOFTMAX)
    sch = Schedule(task.program)
    sch.compute_inline("x_exp")
    text = print_program(sch.program)
    assert "exp_sum[vi_2] = exp_sum[vi_2] + exp(X[vi_2, vr2] - x_max[vi_2])" in text
    assert "x_exp" not in text
    assert_correct(task, sch.program)


def test_compute_inline_custom_chain() -> None:
    task = _twice_plus_one()
    sch = Schedule(task.program)
    sch.compute_inline("B")
    assert [b.name for b in sch.get_child_blocks()] == ["C"]
    assert_correct(task, sch.program)


def test_compute_inline_refusals() -> None:
    sch = Schedule(library_task("softmax", SOFTMAX).program)
    assert_refused(sch, lambda s: s.compute_inline("x_max"), '"x_max"', "reduction")
    assert_refused(sch, lambda s: s.compute_inline("Y"), '"Y"', "not an intermediate")

    # P2 reads P1, which the loop both share recomputes with overlap (P1[i], P1[i + 1]): an
    # element of P1 is not final after the iteration that writes it, so P2 cannot move later.
    A = te.placeholder((37,), "float32", "A")
    P1 = te.compute((38,), lambda i: A[te.minimum(i, 36)] * 2.0, "P1")
    P2 = te.compute((37,), lambda i: P1[i] + P1[i + 1], "P2")
    P3 = te.compute((37,), lambda i: P2[i] - 1.0, "P3")
    task = _task("stencil_chain", (A,), (P3,))
    chain = Schedule(task.program)
    chain.compute_at("P2", "i_2")
    chain.compute_at("P1", "i_2")
    assert_correct(task, chain.program)
    assert_refused(chain, lambda s: s.compute_inline("P2"), '"P2"', '"P1"', "not finished")


def test_compute_inline_after_compute_at() -> None:
    """x_max is computed per row inside i_3 before x_exp; each row is final once written."""
    task = library_task("softmax", SOFTMAX)
    sch = Schedule(task.program)
    for block in ("exp_sum", "x_exp", "x_max"):
        sch.compute_at(block, "i_3")
    sch.compute_inline("x_exp")
    assert [b.name for b in sch.get_child_blocks("i_3")] == ["x_max", "exp_sum", "Y"]
    assert_correct(task, sch.program)


# ---------------------------------------------------------------------------
# reverse_compute_inline


def test_reverse_compute_inline_chain_golden_and_correct(golden) -> None:
    task = _twice_plus_one()
    sch = Schedule(task.program)
    golden("cl_twice_plus_one_before.txt", print_program(sch.program))
    sch.reverse_compute_inline("C")
    golden("reverse_compute_inline_chain_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert "C[vi] = A[vi] * 2.0 + 1.0" in text and "B = alloc" not in text
    assert_correct(task, sch.program)


def test_reverse_compute_inline_after_transpose(golden) -> None:
    task = _transpose_then_scale()
    sch = Schedule(task.program)
    sch.reverse_compute_inline("C")
    golden("reverse_compute_inline_transpose_after.txt", print_program(sch.program))
    assert "C[vi, vj] = A[vj, vi] * 3.0 - 1.0" in print_program(sch.program)
    assert_correct(task, sch.program)
    i0, _ = sch.split("i", [None, 4])  # 19 = 5 * 4 - 1
    sch.parallel(i0)
    assert_correct(task, sch.program, threads=2)


def test_reverse_compute_inline_folds_into_the_intermediate_written_last() -> None:
    """C reads two intermediates: it folds into the later one's store, which reads the
    earlier one, already final there."""
    A = te.placeholder((37,), "float32", "A")
    B = te.compute((37,), lambda i: A[i] * 2.0, "B")
    B2 = te.compute((37,), lambda i: A[i] + 1.0, "B2")
    C = te.compute((37,), lambda i: B[i] - B2[i], "C")
    task = _task("two", (A,), (C,))
    sch = Schedule(task.program)
    sch.reverse_compute_inline("C")
    assert "C[vi_1] = B[vi_1] - (A[vi_1] + 1.0)" in print_program(sch.program)
    assert_correct(task, sch.program)


def test_dense_int8_requantizes_in_its_products_write_back() -> None:
    """Y reads the product and W's column sums, summed before it (exact integers)."""
    task = library_task("dense_int8", {"m": 5, "k": 12, "n": 16})
    sch = Schedule(task.program)
    sch.cache_write("acc", 0)
    sch.reverse_compute_inline("Y")
    assert {b.name for b in sch.program.allocs} >= {"wsum"} and "acc" not in {
        b.name for b in sch.program.allocs
    }
    assert_correct(task, sch.program)


def test_reverse_compute_inline_refusals() -> None:
    sch = Schedule(library_task("dense", DENSE).program)
    assert_refused(sch, lambda s: s.reverse_compute_inline("Y"), '"XW"', "reduction")
    softmax = Schedule(library_task("softmax", SOFTMAX).program)
    # Y reads exp and exp_sum: the one written last, the sum, is its producer, a reduction
    assert_refused(softmax, lambda s: s.reverse_compute_inline("Y"), '"exp_sum"', "reduction")

    A = te.placeholder((37,), "float32", "A")
    B = te.compute((37,), lambda i: A[i] * 2.0, "B")
    C = te.compute((37,), lambda i: B[i] + 1.0, "C")
    D = te.compute((37,), lambda i: B[i] * 3.0, "D")
    shared = Schedule(_task("shared", (A,), (C, D)).program)
    assert_refused(shared, lambda s: s.reverse_compute_inline("C"), '"C"', "also read")

    E = te.compute((36,), lambda i: B[i + 1] - B[i], "E")
    stencil = Schedule(_task("stencil", (A,), (E,)).program)
    assert_refused(stencil, lambda s: s.reverse_compute_inline("E"), '"E"', "exactly once")
