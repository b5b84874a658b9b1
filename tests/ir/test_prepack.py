"""ir/prepack.py: blocks that only repack constant inputs split off into a prologue,
checked bit for bit through native code: main(prologue(W), X) == original(W, X)."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.host import host_target
from codegen.kernel import compile_program
from ir import compute as te
from ir import dtype as dt
from ir.build import build_program
from ir.expr import Binary, Const
from ir.lower import lower
from ir.node import Node, map_children, walk
from ir.prepack import PrepackError, hoist_constant_blocks, hoistable_reason, reduction_reason
from ir.printer import print_program
from ir.program import For, Program
from ir.schedule import Schedule
from ir.schedule.layout import IndexMap, panel_map
from ir.schedule.state import all_blocks, replace_realize
from ir.task import Task, library_task, with_layout_free


def _run(program: Program, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run `program` on the named arrays; its outputs, by name."""
    outs = {b.name: np.zeros(b.concrete_shape(), dt.to_numpy(b.dtype)) for b in program.outputs}
    compile_program(program, host_target(1))(
        *(arrays[b.name] for b in program.inputs), *outs.values()
    )
    return outs


def _check_split(task: Task, program: Program, constant: set[str]) -> tuple[Program, Program]:
    """Split `program` and check the two halves against it, bit for bit."""
    prologue, main = hoist_constant_blocks(program, constant)
    assert prologue is not None
    named = dict(zip((b.name for b in task.program.inputs), task.make_inputs(seed=5)))
    want = _run(program, named)
    got = _run(main, named | _run(prologue, named))
    for name, array in want.items():
        assert np.array_equal(got[name], array), name
    ref = task.reference(list(named.values()))
    assert np.allclose(want[task.output_names[0]], ref[0], rtol=1e-4, atol=1e-4)
    return prologue, main


def _tiled_pack(task: Task, block: str, buffer: str, width: int, at_tile: bool) -> Program:
    """`buffer` packed in panels, the column loop tiled by the panel; the packing under the
    column-tile loop (`compute_at`, inside the row loop: repacked for every row) or up front."""
    sch = Schedule(task.program)
    packed = sch.pack_panels(block, buffer, width)
    i, j, r = sch.get_loops(block)
    j0, j1 = sch.split(j, [None, width])
    sch.reorder(i, j0, r, j1)
    if at_tile:
        sch.compute_at(packed, j0)
        assert sch.get_loops(packed)[0].name == i.name
    return sch.program


@pytest.mark.parametrize("at_tile", [True, False])
@pytest.mark.parametrize(("n", "width"), [(96, 32), (70, 16)])
def test_a_packed_weight_is_packed_once_and_read_whole(n: int, width: int, at_tile: bool) -> None:
    task = library_task("matmul", {"m": 6, "n": n, "k": 9})
    prologue, main = _check_split(task, _tiled_pack(task, "C", "B", width, at_tile), {"B"})
    panels = -(-n // width)
    assert [b.name for b in prologue.inputs] == ["B"]
    assert [(b.name, b.concrete_shape()) for b in prologue.outputs] == [
        ("B_packed", (panels, 9, width))
    ]
    assert [b.name for b in main.inputs] == ["A", "B_packed"]  # B no longer read per call
    assert main.allocs == () and [r.block.name for r in all_blocks(main)] == ["C"]
    # the packed input is read at full size: compaction has nothing to shrink
    assert "B_packed = alloc" not in print_program(lower(main))
    loops = [n.var.name for n in walk(prologue.body) if isinstance(n, For)]
    assert len(loops) == 3 and all(name.startswith("pvax") for name in loops)


def test_dense_keeps_its_bias_and_leaves_a_non_constant_pack_in_place() -> None:
    task = library_task("dense", {"m": 8, "n": 48, "k": 20, "bias": 1, "relu": 1})
    sch = Schedule(_tiled_pack(task, "XW", "W", 16, at_tile=True))
    sch.pack_panels("XW", "X", 4)  # the activation: packed per call, whatever else holds
    prologue, main = _check_split(task, sch.program, {"W", "bias"})
    assert [b.name for b in prologue.outputs] == ["W_packed"]
    assert [b.name for b in main.inputs] == ["X", "bias", "W_packed"]
    assert [b.name for b in main.allocs] == ["XW", "X_packed"]
    assert {r.block.name for r in all_blocks(main)} == {"X_packed", "XW", "Y"}


@pytest.mark.parametrize(
    "index_map",
    [
        panel_map(16),
        IndexMap.from_callable(2, lambda k, n: (n // 16, k // 4, n % 16, k % 4)),  # VNNI's B
    ],
    ids=["panels", "vnni"],
)
def test_a_transform_layout_copy_is_hoisted_too(index_map: IndexMap) -> None:
    task = library_task("matmul", {"m": 5, "n": 32, "k": 12})
    sch = Schedule(task.program)
    sch.transform_layout("C", "B", index_map)
    _, main = _check_split(task, sch.program, {"B"})
    assert [b.name for b in main.inputs] == ["A", "B_packed"]


def test_a_copy_two_points_of_which_land_on_one_element_stays() -> None:
    task = library_task("matmul", {"m": 4, "n": 32, "k": 8})
    sch = Schedule(task.program)
    sch.transform_layout("C", "B", lambda k, n: (n // 16, k, n % 16))
    program = sch.program

    def collide(n: Node) -> Node:  # B_packed[n // 16, k, n % 16] -> B_packed[n // 16, k, 0]
        if isinstance(n, Binary) and n.op == "floormod":
            return Const(0, "int64")
        return map_children(n, collide)

    program = replace_realize(program, "B_packed", collide)  # type: ignore[arg-type]
    r = next(r for r in all_blocks(program) if r.block.name == "B_packed")
    assert hoistable_reason(r, {"B"}, {"B_packed"}, 1) == (
        "does not write each point of its domain once"
    )


def test_nothing_constant_nothing_hoisted() -> None:
    task = library_task("matmul", {"m": 4, "n": 32, "k": 8})
    program = _tiled_pack(task, "C", "B", 16, at_tile=True)
    assert hoist_constant_blocks(program, set()) == (None, program)
    assert hoist_constant_blocks(program, {"A"}) == (None, program)
    r = next(r for r in all_blocks(program) if r.block.name == "B_packed")
    reason = hoistable_reason(r, {"A"}, {"B_packed"}, 1)
    assert reason == "reads something that is not a constant input"
    assert hoistable_reason(r, {"B"}, {"B_packed"}, 2) == "its buffer has other writers"
    with pytest.raises(PrepackError, match="matmul: W is not an input of the program"):
        hoist_constant_blocks(program, {"W"})


def test_accumulators_and_reductions_stay() -> None:
    """A cache_write tile's init block reads nothing; a reduction reads its own buffer."""
    task = library_task("matmul", {"m": 8, "n": 32, "k": 8})
    sch = Schedule(task.program)
    sch.cache_write("C", 0)
    *_, r = sch.get_loops("C")
    sch.decompose_reduction("C", r)
    program = sch.program
    assert hoist_constant_blocks(program, {"A", "B"}) == (None, program)


def test_a_read_out_of_bounds_over_the_whole_domain_is_not_hoisted() -> None:
    """Without the clamp of the last, partial panel, re-nesting over the whole domain would
    read past B (under the tile loop's guard the original never did)."""
    task = library_task("matmul", {"m": 4, "n": 70, "k": 5})
    program = _tiled_pack(task, "C", "B", 16, at_tile=True)

    def unclamp(n: Node) -> Node:
        if isinstance(n, Binary) and n.op == "min":
            return n.a
        return map_children(n, unclamp)

    program = replace_realize(program, "B_packed", unclamp)  # type: ignore[arg-type]
    r = next(r for r in all_blocks(program) if r.block.name == "B_packed")
    assert hoistable_reason(r, {"B"}, {"B_packed"}, 1) == (
        "its read of B is not provably in bounds"
    )
    assert hoist_constant_blocks(program, {"B"})[0] is None


DENSE_INT8 = {"m": 4, "k": 24, "n": 16}
CONSTANTS = {"W", "bias", "scale"}


@pytest.mark.parametrize("decompose", [False, True])
def test_an_integer_sum_of_constants_runs_once(decompose: bool) -> None:
    """dense_int8's column sums of W (its zero-point correction): one block with an init, or
    an init and an update block after `decompose_reduction`; either way main reads the sums
    (and W only where its product does: unpacked here), and the split is exact."""
    task = with_layout_free(library_task("dense_int8", DENSE_INT8), CONSTANTS)
    sch = Schedule(task.program)
    if decompose:
        sch.decompose_reduction("wsum", sch.get_loops("wsum")[0])
    prologue, main = _check_split(task, sch.program, CONSTANTS)
    assert [b.name for b in prologue.outputs] == ["wsum"]
    assert {b.name for b in main.inputs} == {"X", "W", "bias", "scale", "wsum"}
    assert {r.block.name for r in all_blocks(main)} == {"acc", "Y"}


def _float_column_sums() -> Program:
    w = te.placeholder((6, 4), "float32", "W")
    x = te.placeholder((4,), "float32", "X")
    rk = te.reduce_axis(6, "rk")
    total = te.compute((4,), lambda j: te.sum(w[rk, j], axis=rk), "total")
    y = te.compute((4,), lambda j: x[j] + total[j], "Y")
    return build_program(te.Workload("column_sums", (w, x), (y,)))


def test_a_float_sum_of_constants_stays_per_call() -> None:
    """Re-nested, a float sum could add its terms in another order: not bit for bit."""
    program = _float_column_sums()
    group = [r for r in all_blocks(program) if r.block.name == "total"]
    assert reduction_reason(group, {"W"}) == (
        "not an integer reduction (a float sum's order would change)"
    )
    assert hoist_constant_blocks(program, {"W"}) == (None, program)


def test_a_sum_that_reads_a_per_call_input_stays() -> None:
    task = library_task("dense_int8", DENSE_INT8)
    acc = [r for r in all_blocks(task.program) if r.block.name == "acc"]
    assert reduction_reason(acc, CONSTANTS) == "reads something that is not a constant input"
    wsum = [r for r in all_blocks(task.program) if r.block.name == "wsum"]
    assert reduction_reason(wsum, CONSTANTS) is None
    assert reduction_reason(wsum, {"X"}) == "reads something that is not a constant input"


def test_arithmetic_on_constants_is_hoisted_through_a_chain() -> None:
    """Winograd's weight transform: A from W, then B from A; only B is read per call, so
    the prologue outputs B and keeps A as its own scratch."""
    from ir.definition import to_definition
    from ir.task import custom_task

    x = te.placeholder((4, 6), "float32", "X")
    w = te.placeholder((6, 5), "float32", "W")
    a = te.compute((6, 5), lambda k, n: w[k, n] * 0.5, "A")
    b = te.compute((6, 5), lambda k, n: a[k, n] + a[(k + 1) % 6, n], "B")
    r = te.reduce_axis(6, "r")
    c = te.compute((4, 5), lambda i, n: te.sum(x[i, r] * b[r, n], axis=r), "C")
    task = custom_task(to_definition(te.Workload("chain", (x, w), (c,))))
    prologue, main = _check_split(task, task.program, {"W"})
    assert [b.name for b in prologue.outputs] == ["B"]
    assert [b.name for b in prologue.allocs] == ["A"]
    assert [b.name for b in main.inputs] == ["X", "B"] and main.allocs == ()
    # with no constant input nothing moves
    assert hoist_constant_blocks(task.program, set())[0] is None
