"""bfloat16 in generated code: conversions exactly as ml_dtypes rounds, on CPUs with and
without avx512bf16, vector loads widening to float32, and rint ties to even.

LLVM lowers `fptrunc float to bfloat` to vcvtneps2bf16 where the CPU has
avx512bf16 (it flushes denormals to zero) and to a `__truncsfbf2` call per lane
where it has not; codegen rounds the bits itself, so the CPUs below agree with
ml_dtypes bit for bit. Every target here is a subset of this machine's
features, so each kernel runs here.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from codegen.export import export_kernel, header_path
from codegen.host import host_target
from codegen.kernel import compile_program
from ir import compute as te
from ir.build import build_program
from ir.expr import cast, rint
from ir.target import parse_short
from ir.task import library_task
from tests.codegen.loopkit import with_loop
from workers.verify import empty_outputs, verify

BF16 = "bfloat16"
N = 64
TARGETS = ["host", "skylake-avx512", "x86-64-v3"]  # avx512bf16 (here), AVX-512 only, AVX2 only

EDGE_BITS = [
    0x3F808000,  # 1 + 2^-8: a tie, to even (down)
    0x3F818000,  # 1 + 3·2^-8: a tie, to even (up)
    0x3F808001,  # just above a tie: up
    0x3F80FFFF,  # rounds up into the next binade's pattern
    0x7F7FFFFF,  # float32 max: overflows to inf
    0x7F800000,  # inf
    0xFF800000,  # -inf
    0x7FC00000,  # quiet NaN
    0xFFC00001,  # negative NaN with a payload
    0x7F800001,  # signalling NaN whose payload is below bfloat16's bits
    0x00011000,  # denormal (flushed to zero by vcvtneps2bf16)
    0x80018000,  # negative denormal, a tie
    0x00008000,  # the smallest tie: to even (zero)
    0x00018000,  # a tie: to even (up)
    0x00000000,
    0x80000000,  # -0
]


def _inputs() -> np.ndarray:
    xs = np.resize(np.array(EDGE_BITS, np.uint32), N).view(np.float32).copy()
    rng = np.random.default_rng(0)
    xs[len(EDGE_BITS) : 40] = rng.standard_normal(40 - len(EDGE_BITS)).astype(np.float32) * 1e-38
    xs[40:] = rng.standard_normal(N - 40).astype(np.float32) * 1e3
    return xs


def _round_trip(lanes: int | None) -> te.Workload:
    x = te.placeholder((N,), "float32", "X")
    y = te.compute((N,), lambda i: cast(BF16, x[i]), "Y")
    z = te.compute((N,), lambda i: cast("float32", y[i]), "Z")
    return te.Workload("bf16_round_trip", (x,), (y, z))


def _compiled(workload: te.Workload, loops: list[str], lanes: int | None, target: str):
    program = build_program(workload)
    if lanes is not None:
        for loop in loops:
            program = with_loop(program, loop, "vectorized", vector_width=lanes)
    return compile_program(program, None if target == "host" else parse_short(target))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [None, 8, 16])
def test_float32_to_bfloat16_and_back_is_ml_dtypes_bit_for_bit(
    target: str, lanes: int | None
) -> None:
    kernel = _compiled(_round_trip(lanes), ["i", "i_1"], lanes, target)
    assert "__truncsfbf2" not in kernel.module.assembly()
    if not _runs_here(target):
        # AVX-512 code on a CPU without it: compiled and its assembly checked only.
        print(f"{target}: compiled only, this CPU lacks its vector instructions")
        return
    xs = _inputs()
    y = np.zeros(N, ml_dtypes.bfloat16)
    z = np.zeros(N, np.float32)
    kernel(xs, y, z)
    with np.errstate(invalid="ignore"):
        want = xs.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(z.view(np.uint32), want.astype(np.float32).view(np.uint32))


def _runs_here(target: str) -> bool:
    """Whether this CPU has every vector extension `target` enables."""
    if target == "host":
        return True
    host = host_target()
    return all(host.has_feature(f) for f in parse_short(target).features if f.startswith("+avx"))


@pytest.mark.parametrize("lanes", [8, 16])
def test_vector_loads_of_bfloat16_widen_to_float32(lanes: int) -> None:
    n = 16 * 3 + 13  # whole vectors and a tail of narrower ones
    a = te.placeholder((n,), BF16, "A")
    y = te.compute((n,), lambda i: cast("float32", a[i]) * 2.0, "Y")
    kernel = _compiled(te.Workload("widen", (a,), (y,)), ["i"], lanes, "host")
    xs = np.random.default_rng(1).uniform(-3, 3, n).astype(ml_dtypes.bfloat16)
    out = np.full(n, np.nan, np.float32)
    kernel(xs, out)
    np.testing.assert_array_equal(out, xs.astype(np.float32) * 2)
    asm = kernel.module.assembly()
    assert "vpmovzxwd" in asm  # a vector zero-extend of 16-bit lanes, no per-lane work


@pytest.mark.parametrize("lanes", [None, 16])
def test_rint_rounds_ties_to_even_like_numpy(lanes: int | None) -> None:
    x = te.placeholder((N,), "float32", "X")
    y = te.compute((N,), lambda i: rint(x[i]), "Y")
    kernel = _compiled(te.Workload("rint", (x,), (y,)), ["i"], lanes, "host")
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 8388607.5, -2.5, 0.49999997], np.float32)
    xs = np.resize(ties, N)
    xs[8:12] = [np.nan, np.inf, -np.inf, 3e38]
    xs[12:] = np.random.default_rng(2).uniform(-100, 100, N - 12).astype(np.float32)
    out = np.zeros(N, np.float32)
    kernel(xs, out)
    np.testing.assert_array_equal(out, np.rint(xs))
    np.testing.assert_array_equal(np.signbit(out), np.signbit(np.rint(xs)))


def test_an_exported_bf16_kernel_takes_uint16_bits_and_runs(tmp_path: Path) -> None:
    """The .so needs no bf16 runtime routine (no __truncsfbf2) and its header spells the
    inputs as their bits."""
    task = library_task("matmul_bf16", {"m": 8, "n": 16, "k": 24})
    so = tmp_path / "mm.so"
    export_kernel(task.program, host_target(), symbol="mm_bf16", fmt="so", output=so)
    assert (
        "int mm_bf16(const uint16_t* A, const uint16_t* B, float* C);"
        in header_path(so).read_text()
    )
    inputs = task.make_inputs(0)
    (out,) = empty_outputs(task.output_specs())
    fn = ctypes.CDLL(str(so)).mm_bf16
    assert fn(*(ctypes.c_void_p(a.ctypes.data) for a in (*inputs, out))) == 0
    (ref,) = task.reference(inputs)
    assert verify([out], [ref], ["C"], 24) is None


def test_odd_width_bfloat16_copies_compile_for_avx512fp16_cpus() -> None:
    """bfloat16 values travel as i16: LLVM's vectorizers turned a padding copy of 9 bf16
    into `<27 x bfloat>`-style vectors that its instruction selection for CPUs with
    AVX512-FP16 (Sapphire and Emerald Rapids) aborted on ("Unexpected illegal type"),
    killing the process. Compiled only, so every machine checks it; the tensorized
    candidates keep their vdpbf16ps."""
    import random

    from codegen.emit import emit_module
    from codegen.jit import compile_object
    from ir.lower import lower
    from ir.target import Target
    from tests.tuner.space.spacecheck import odd_task, samples
    from tuner.space import default_space

    features = "+avx512f,+avx512bw,+avx512vl,+avx512bf16,+avx512fp16,+fma"
    target = Target.parse(f"llvm -mcpu=emeraldrapids -mattr={features} -num-threads=2")
    task = odd_task("batch_matmul_bf16")  # b=2, m=6, n=24, k=9: k pads to 10
    space = default_space(task.program, target)
    asm = []
    for trace in samples(space, random.Random("batch_matmul_bf16"), 10, max_tries=30):
        text = emit_module(lower(trace.apply(task.program).program), "k", num_threads=2,
                           vector_bits=512, features=target.features)  # fmt: skip
        assert "bfloat>" not in text.replace("<32 x bfloat>", "")  # only the intrinsic's
        assert compile_object(text, target)
        asm.append(text)
    assert any("dpbf16ps" in t for t in asm)  # the space still tensorizes
