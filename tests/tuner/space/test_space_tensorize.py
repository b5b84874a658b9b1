"""The intrinsic tiling rule: tensorized candidates where the target has the instruction
(AMX before VNNI), plain vector tiling where it has not."""

from __future__ import annotations

import random

import pytest

from codegen.host import host_target
from ir.expr import Load
from ir.intrinsics import INTRINSICS, auxiliary_intrinsics
from ir.node import walk
from ir.program import BufferStore, For, IntrinsicCall
from ir.target import Target, parse_short
from ir.task import Task, library_task, with_layout_free
from tests.tuner.space.spacecheck import AVX2_2_THREADS, check_correct
from tuner.space import default_space
from tuner.trace.trace import Trace

VNNI = Target.parse("llvm -mcpu=znver4 -mattr=+avx2,+avx512f,+avx512bw,+avx512vnni")
AMX = Target.parse(
    "llvm -mcpu=sapphirerapids -mattr=+avx2,+avx512f,+avx512bw,+avx512vnni,+amx-tile,+amx-int8"
)


def _tensorized(trace: Trace) -> list[str]:
    return [i.attr("intrinsic") for i in trace.instructions if i.kind == "tensorize"]


def intrinsics(trace: Trace) -> list[str]:
    """The products tensorized (not the packing copies, not the sums)."""
    return [n for n in _tensorized(trace) if n not in auxiliary_intrinsics()]


def copies(trace: Trace) -> list[str]:
    """The packing copies written a packed row at a time."""
    return [
        n
        for n in _tensorized(trace)
        if n in auxiliary_intrinsics() and not INTRINSICS[n].ops_per_call
    ]


def _writes(n: object, buffer: str) -> bool:
    """A store to `buffer`, or an intrinsic call whose output is `buffer`."""
    if isinstance(n, BufferStore):
        return n.buffer.name == buffer
    return isinstance(n, IntrinsicCall) and n.args[0].buffer.name == buffer


def samples(op: str, params: dict[str, int], target: Target, n: int = 4) -> list[Trace]:
    space = default_space(library_task(op, params).program, target)
    rng = random.Random(11)
    return [space.sample(rng) for _ in range(n)]


def test_every_int8_candidate_is_tensorized_on_a_vnni_target() -> None:
    for trace in samples("matmul_int8", {"m": 1024, "n": 1024, "k": 1024}, VNNI):
        assert intrinsics(trace) == ["vnni"]
        assert "pad_einsum" not in [i.kind for i in trace.instructions]  # whole tiles
        assert copies(trace) == ["pack_int8x4"]


def test_amx_is_preferred_where_the_target_has_it() -> None:
    for trace in samples("matmul_int8", {"m": 40, "n": 32, "k": 100}, AMX, n=2):
        assert intrinsics(trace) == ["amx_int8"]
        assert "pad_einsum" in [i.kind for i in trace.instructions]  # M to 48, K to 128
        assert copies(trace) == []  # the zero-padded copy stays loops


def test_without_the_instruction_the_rule_falls_back_to_vector_tiling() -> None:
    task = library_task("matmul_int8", {"m": 12, "n": 40, "k": 20})
    for trace in samples("matmul_int8", {"m": 12, "n": 40, "k": 20}, AVX2_2_THREADS, n=2):
        kinds = [i.kind for i in trace.instructions]
        assert "tensorize" not in kinds and "cache_write" in kinds
        check_correct(task, trace, AVX2_2_THREADS)


def test_float_workloads_are_not_tensorized() -> None:
    for trace in samples("matmul", {"m": 64, "n": 64, "k": 64}, VNNI, n=2):
        assert intrinsics(trace) == []


def test_bf16_products_take_amx_bf16_and_fall_back_without_it() -> None:
    amx_bf16 = Target.parse(
        "llvm -mcpu=sapphirerapids -mattr=+avx2,+avx512f,+avx512bf16,+amx-tile,+amx-bf16"
    )
    params = {"m": 16, "n": 32, "k": 40}
    assert all(intrinsics(t) == ["amx_bf16"] for t in samples("matmul_bf16", params, amx_bf16, 2))
    assert all(intrinsics(t) == [] for t in samples("matmul_bf16", params, VNNI, 2))


@pytest.mark.parametrize(
    ("op", "params"),
    [
        ("matmul_bf16", {"m": 12, "n": 40, "k": 21}),  # N and K padded
        ("batch_matmul_bf16", {"b": 2, "m": 8, "n": 32, "k": 16}),
    ],
)
def test_bf16_products_take_avx512_bf16_without_amx(op: str, params: dict[str, int]) -> None:
    """Zen 5 has AVX-512 BF16 and no AMX: vdpbf16ps tiles; Skylake-X has neither: vectors.
    Sampled kernels run here where the CPU has the instruction."""
    znver5, skylake = parse_short("znver5"), parse_short("skylake-avx512")
    assert znver5 is not None and skylake is not None
    traces = samples(op, params, znver5, 2)
    assert all(intrinsics(t) == ["avx512_bf16"] for t in traces)
    assert all(intrinsics(t) == [] for t in samples(op, params, skylake, 2))
    host = host_target(1)
    if not host.has_feature("avx512bf16") or host.has_feature("amx-bf16"):
        pytest.skip(f"not run: this CPU ({host.cpu}) does not pick avx512_bf16; sampled only")
    task = library_task(op, params)
    for trace in samples(op, params, host, 2):
        assert intrinsics(trace) == ["avx512_bf16"]
        check_correct(task, trace, host)


@pytest.mark.parametrize("pad", [0, 1])
def test_int8_convolutions_are_tensorized_and_exact_on_this_host(pad: int) -> None:
    """The weight [kh, kw, ci, co] packs as kh x kw matrices; with pad 0 the input copy is
    a plain copy auto-inline would fold into the tensorized block (it must refuse)."""
    host = host_target(1)
    if not host.has_feature("avx512vnni"):
        pytest.skip("this CPU has no AVX-512 VNNI")
    params = dict(n=1, h=6, w=7, ci=8, co=16, kh=3, kw=3, stride=1, pad=pad)
    task = library_task("conv2d_nhwc_int8", params)
    for trace in samples("conv2d_nhwc_int8", params, host, n=1):
        assert intrinsics(trace) == ["vnni"]
        check_correct(task, trace, host)


def test_the_simulated_runner_charges_intrinsic_calls() -> None:
    from ir.program import IntrinsicCall, Program
    from tuner.simulated import NS_PER_UNIT, analytic_cost_ms

    task = library_task("matmul_int8", {"m": 64, "n": 64, "k": 64})
    program = (
        samples("matmul_int8", {"m": 64, "n": 64, "k": 64}, VNNI, n=1)[0]
        .apply(task.program)
        .program
    )
    assert 0 < analytic_cost_ms(program) < analytic_cost_ms(task.program)
    call = next(n for n in walk(program.body) if isinstance(n, IntrinsicCall))
    alone = Program("one_call", program.inputs, program.outputs, call, program.allocs)
    assert analytic_cost_ms(alone) == (1 + len(call.args)) * NS_PER_UNIT * 1e-6


def _packed_under_column_tile(trace: Trace, task: Task) -> bool:
    """Whether the weight's packing copy runs inside a column-tile loop of the product."""
    program = trace.apply(task.program).program
    return any(
        isinstance(n, For)
        and n.var.name.startswith("j")
        and any(_writes(s, "W_packed") for s in walk(n.body))
        for n in walk(program.body)
    )


def _plain_sums(s: object) -> bool:
    return (
        isinstance(s, BufferStore)
        and s.buffer.name == "wsum"
        and any(isinstance(ld, Load) and ld.buffer.name == "W" for ld in walk(s.value))
    )


def _packed_sums(s: object) -> bool:
    """W's column sums a packed row at a time, read from the packed copy."""
    return (
        isinstance(s, IntrinsicCall)
        and s.name == "colsum_int8x4"
        and [a.buffer.name for a in s.args] == ["wsum", "W_packed"]
    )


def _sums_beside_packing(trace: Trace, task: Task) -> bool:
    """Whether W's column sums run in the same column-tile loop as its packing: from the
    packed copy, or from W with the reduction over its rows outside the loop over its
    columns."""
    program = trace.apply(task.program).program
    for n in walk(program.body):
        if not (isinstance(n, For) and n.var.name.startswith("j")):
            continue
        if not any(_writes(s, "W_packed") for s in walk(n.body)):
            continue
        if any(map(_packed_sums, walk(n.body))):
            return True
        if any(map(_plain_sums, walk(n.body))):
            outer = next(
                f for f in walk(n.body) if isinstance(f, For) and any(map(_plain_sums, walk(f)))
            )
            return int(outer.extent.value) == task.params["k"]
    return False


def test_the_weight_is_packed_up_front_or_per_column_tile() -> None:
    """A sampled location: the whole weight before the product, or each column tile's
    panels just before they are read (while in cache), its column sums beside them —
    exact either way."""
    task = library_task("dense_int8", {"m": 32, "k": 128, "n": 1024})
    traces = samples("dense_int8", {"m": 32, "k": 128, "n": 1024}, VNNI, n=12)
    under = [t for t in traces if _packed_under_column_tile(t, task)]
    assert 0 < len(under) < len(traces)
    beside = [t for t in under if _sums_beside_packing(t, task)]
    assert beside
    if "+avx512vnni" not in host_target().features:
        pytest.skip("not run: no AVX-512 VNNI on this CPU; sampled only")
    check_correct(task, under[0], VNNI)
    check_correct(task, beside[0], VNNI)


def test_column_sums_read_the_packed_copy_unless_the_weight_is_a_constant() -> None:
    """Where the sums and the packing share a nest, W's column sums read the packed copy,
    one vpdpbusd per packed row (`colsum_int8x4`); with W a model's constant both stay
    plain loops, which a model's load hoists (`ir.prepack`). Exact on VNNI hosts."""
    params = {"m": 32, "k": 128, "n": 1024}
    task = library_task("dense_int8", params)
    traces = samples("dense_int8", params, VNNI, n=8)
    packed = [t for t in traces if "colsum_int8x4" in _tensorized(t)]
    assert packed and all(
        any(map(_packed_sums, walk(t.apply(task.program).program.body))) for t in packed
    )
    constant = with_layout_free(task, ["W"])
    space = default_space(constant.program, VNNI)
    rng = random.Random(3)
    for _ in range(4):
        assert copies(trace := space.sample(rng)) == []
        assert "colsum_int8x4" not in _tensorized(trace)
    if "+avx512vnni" not in host_target().features:
        pytest.skip("not run: no AVX-512 VNNI on this CPU; sampled only")
    for trace in packed[:2]:
        check_correct(task, trace, VNNI)
