"""blockize, tensorize and pad_einsum: what they make, what they refuse, and exact kernels."""

from __future__ import annotations

import pytest

from codegen.host import host_target
from ir.intrinsics import INTRINSICS, IntrinsicError, TensorIntrinsic, register_intrinsic
from ir.node import walk
from ir.printer import print_program
from ir.program import IntrinsicCall
from ir.schedule import Schedule
from ir.schedule.state import find_block
from ir.schedule.tensorize import operand_buffers
from ir.task import library_task
from tests.ir.schedule.schedcheck import assert_correct, assert_refused

VNNI_HOST = host_target(1).has_feature("avx512vnni")
needs_vnni = pytest.mark.skipif(not VNNI_HOST, reason="this CPU has no AVX-512 VNNI to run vnni")
BF16_HOST = host_target(1).has_feature("avx512bf16")
needs_bf16 = pytest.mark.skipif(
    not BF16_HOST, reason="this CPU has no AVX-512 BF16 to run avx512_bf16 (compiled only)"
)


def ready(op: str, intrinsic: str, m: int, n: int, k: int) -> tuple[Schedule, list]:
    """`op` with the intrinsic's 16 x pack loops split off innermost and B packed for it."""
    pack = INTRINSICS[intrinsic].extents[-1]
    sch = Schedule(library_task(op, {"m": m, "n": n, "k": k}).program)
    if n % 16 or k % pack:
        sch.pad_einsum("C", [1, 16, pack])
    i, j, r = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    r0, r1 = sch.split(r, [None, pack])
    sch.reorder(i, j0, r0, j1, r1)
    source = (operand_buffers(sch.program, "C", intrinsic) or {})["B"]
    sch.transform_layout("C", source, *INTRINSICS[intrinsic].packs[0][1:])  # packed order
    return sch, [i, j0, r0, j1, r1]


def vnni_ready(m: int, n: int, k: int) -> tuple[Schedule, list]:
    """matmul_int8 with the intrinsic's loops split off innermost and B packed for vnni."""
    return ready("matmul_int8", "vnni", m, n, k)


def test_blockize_makes_tile_indexed_block_with_the_init() -> None:
    sch, loops = vnni_ready(32, 32, 8)
    block = sch.blockize(loops[3])
    r = find_block(sch.program, block.name)
    assert [iv.kind for iv in r.block.iter_vars] == ["spatial", "spatial", "reduce"]
    # tile indices, so vj = vj_o * 16 + j_1 keeps its divisibility
    assert [int(iv.extent.value) for iv in r.block.iter_vars] == [32, 2, 2]
    assert r.block.init is not None  # over the spatial inner loop only
    assert "for j_1_init in range(16)" in print_program(sch.program)
    assert_correct(library_task("matmul_int8", {"m": 32, "n": 32, "k": 8}), sch.program)


def test_blockize_refuses_a_predicate_below_and_several_statements() -> None:
    task = library_task("matmul_int8", {"m": 8, "n": 40, "k": 8})
    sch = Schedule(task.program)
    _, j, _ = sch.get_loops("C")
    _, j1 = sch.split(j, [None, 16])  # 40 = 3 x 16 - 8: guarded inside j1
    assert_refused(sch, lambda s: s.blockize(j1), "C", "predicate depends on a loop below")
    sch2, loops = vnni_ready(16, 32, 8)
    sch2.decompose_reduction("C", loops[2])  # the init nest joins the reduction under j_0
    assert_refused(sch2, lambda s: s.blockize(loops[1]), "nest perfectly")


@pytest.mark.parametrize("shape", [(16, 32, 8), (7, 48, 12), (12, 40, 18), (5, 17, 3)])
@needs_vnni
def test_tensorized_matmul_int8_is_exact(shape: tuple[int, int, int]) -> None:
    """Padding covers the remainders: N not a multiple of 16, K not of 4."""
    sch, loops = vnni_ready(*shape)
    sch.tensorize(loops[3], "vnni", features=host_target(1).features)
    calls = [n for n in walk(sch.program.body) if isinstance(n, IntrinsicCall)]
    assert [c.name for c in calls] == ["vnni"]
    assert_correct(library_task("matmul_int8", dict(zip("mnk", shape))), sch.program)


@pytest.mark.parametrize("shape", [(16, 32, 8), (7, 48, 12), (12, 40, 18), (5, 17, 3)])
@needs_bf16
def test_tensorized_matmul_bf16_meets_the_tolerance(shape: tuple[int, int, int]) -> None:
    """vdpbf16ps sums two exact products per step (flushing denormals): within the bf16
    operators' tolerance of the float32 reference; K odd / N not of 16 are padded."""
    sch, loops = ready("matmul_bf16", "avx512_bf16", *shape)
    sch.tensorize(loops[3], "avx512_bf16", features=host_target(1).features)
    calls = [n for n in walk(sch.program.body) if isinstance(n, IntrinsicCall)]
    assert [c.name for c in calls] == ["avx512_bf16"]
    assert_correct(library_task("matmul_bf16", dict(zip("mnk", shape))), sch.program)


def test_avx512_bf16_refuses_a_target_without_bf16_and_float32_blocks() -> None:
    sch, loops = ready("matmul_bf16", "avx512_bf16", 16, 32, 8)
    skylake = ("avx512f", "avx512bw", "avx512vnni")
    assert_refused(
        sch,
        lambda s: s.tensorize(loops[3], "avx512_bf16", features=skylake),
        "needs the target feature(s) avx512bf16",
    )
    f32 = Schedule(library_task("matmul", {"m": 16, "n": 32, "k": 8}).program)
    i, j, r = f32.get_loops("C")
    j0, j1 = f32.split(j, [None, 16])
    r0, r1 = f32.split(r, [None, 2])
    f32.reorder(i, j0, r0, j1, r1)
    assert_refused(
        f32, lambda s: s.tensorize(j1, "avx512_bf16"), "does not match intrinsic avx512_bf16"
    )


def test_tensorize_refusals_name_the_mismatch() -> None:
    vnni = ("vnni",)
    # B not packed: strides differ, named with the operand and the fix
    task = library_task("matmul_int8", {"m": 16, "n": 32, "k": 8})
    sch = Schedule(task.program)
    i, j, r = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    r0, r1 = sch.split(r, [None, 4])
    sch.reorder(i, j0, r0, j1, r1)
    assert_refused(sch, lambda s: s.tensorize(j1, *vnni), "loop j_1", "B", "strides", "pack it")
    # the wrong tile: 8 columns where vnni has 16 lanes
    sch8 = Schedule(task.program)
    i, j, r = sch8.get_loops("C")
    j0, j1 = sch8.split(j, [None, 8])
    r0, r1 = sch8.split(r, [None, 4])
    sch8.reorder(i, j0, r0, j1, r1)
    assert_refused(sch8, lambda s: s.tensorize(j1, *vnni), "extents (16, 4)", "(8, 4)")
    # another computation: float32 matmul
    f32 = Schedule(library_task("matmul", {"m": 16, "n": 32, "k": 8}).program)
    i, j, r = f32.get_loops("C")
    j0, j1 = f32.split(j, [None, 16])
    r0, r1 = f32.split(r, [None, 4])
    f32.reorder(i, j0, r0, j1, r1)
    assert_refused(
        f32, lambda s: s.tensorize(j1, *vnni), "does not match intrinsic vnni", "float32"
    )
    # an unknown intrinsic
    assert_refused(f32, lambda s: s.tensorize(j1, "no_such"), "unknown tensor intrinsic 'no_such'")


def test_tensorize_refuses_a_target_without_the_feature() -> None:
    sch, loops = vnni_ready(16, 32, 8)
    avx2 = ("avx", "avx2", "fma")
    assert_refused(
        sch,
        lambda s: s.tensorize(loops[3], "vnni", features=avx2),
        "needs the target feature(s) avx512vnni",
    )


def test_pad_einsum_refuses_what_it_cannot_pad() -> None:
    sch = Schedule(library_task("softmax", {"m": 4, "n": 10}).program)
    block = sch.get_child_blocks()[0].name
    assert_refused(sch, lambda s: s.pad_einsum(block, [1, 16]), block)
    mm = Schedule(library_task("matmul_int8", {"m": 4, "n": 10, "k": 4}).program)
    assert_refused(
        mm, lambda s: s.pad_einsum("C", [1, 16]), "one positive factor per iteration variable"
    )


def test_registry_refuses_a_second_intrinsic_of_the_same_name() -> None:
    clash = TensorIntrinsic("vnni", INTRINSICS["vnni"].build, features=())
    with pytest.raises(IntrinsicError, match="already registered"):
        register_intrinsic(clash)
    assert INTRINSICS["vnni"].ops_per_call == 2 * 16 * 4
    assert INTRINSICS["avx512_bf16"].ops_per_call == 2 * 16 * 2
    assert INTRINSICS["amx_int8"].ops_per_call == 2 * 16 * 16 * 64


def test_a_wrong_inverse_map_is_refused() -> None:
    sch = Schedule(library_task("matmul_int8", {"m": 4, "n": 32, "k": 8}).program)
    forward = INTRINSICS["vnni"].packs[0][1]
    assert_refused(
        sch,
        lambda s: s.transform_layout(
            "C", "B", forward, lambda p, q, r, c: (q * 4 + r % 4, p * 16 + c)
        ),
        "does not undo",
    )
    holes = Schedule(library_task("matmul_int8", {"m": 4, "n": 40, "k": 8}).program)
    assert_refused(
        holes,
        lambda s: s.transform_layout(
            "C", "B", lambda k, n: (n // 16, k, n % 16), lambda p, k, r: (k, p * 16 + r)
        ),
        "384 places for 320 elements",
    )


def test_a_tensorized_block_refuses_an_inlined_producer() -> None:
    """conv2d_nhwc_int8 with pad 0: its input copy is plain, but the tensorized block reads
    it as memory; inlining it would leave the intrinsic reading a buffer nobody writes."""
    params = dict(n=1, h=4, w=4, ci=8, co=16, kh=3, kw=3, stride=1, pad=0)
    task = library_task("conv2d_nhwc_int8", params)
    sch = Schedule(task.program)
    b, i, j, o, rh, rw, rc = sch.get_loops("acc")
    o0, o1 = sch.split(o, [None, 16])
    c0, c1 = sch.split(rc, [None, 4])
    sch.reorder(b, i, j, o0, rh, rw, c0, o1, c1)
    _, forward, inverse = INTRINSICS["vnni"].packs[0]
    sch.transform_layout(
        "acc",
        "W",
        lambda h, w, k, n: (h, w, *forward(k, n)),
        lambda h, w, *packed: (h, w, *inverse(*packed)),
    )
    sch.tensorize(o1, "vnni")
    assert_refused(sch, lambda s: s.compute_inline("pad"), "tensor intrinsic vnni")
    if VNNI_HOST:
        assert_correct(task, sch.program)
