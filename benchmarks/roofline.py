"""The compute roof of one core: how many GFLOP/s its FMA units deliver at most.

A goal such as "1.2× numpy" means different things on different machines: where
numpy's BLAS already runs at 85% of the core's peak, 1.2× numpy is above the
peak and no kernel can reach it. Every tune result records this roof, measured
in the same run, so the README can say what fraction of the peak a kernel (and
a goal) stands for.

The probe is a loop of independent fused multiply-adds on registers of the
target's widest float vector, enough chains to cover the FMA latency of every
pipe; no memory is touched inside the loop. It is compiled like every kernel
(llvmlite, the host target) and timed a few times; the fastest call counts,
since nothing but interruptions can slow it down.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from codegen.host import host_target
from codegen.jit import compile_ir
from ir.target import Target

SYMBOL = "loomtune_fma_peak"


def accumulators(vector_bits: int) -> int:
    """Independent FMA chains: 4-cycle latency x 2 pipes needs 8; spare registers hold the rest.

    12 of the 16 AVX2 registers, 24 of AVX-512's 32 (the tiling rule's budgets).
    """
    return 24 if vector_bits >= 512 else 12


def probe_ir(lanes: int, chains: int) -> str:
    """LLVM IR of `void f(i64 n, ptr out)`: n iterations of `chains` vector FMAs, summed into out."""
    vec = f"<{lanes} x float>"
    half = ", ".join(["float 0.5"] * lanes)  # not 1.0: fma(a, 1, c) would fold to an add
    tiny = ", ".join(["float 0x3F50000000000000"] * lanes)  # 2**-10: no overflow in any n
    lines = [
        f"declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})",
        f"define void @{SYMBOL}(i64 %n, ptr %out) {{",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i.next, %loop]",
    ]
    lines += [
        f"  %a{c} = phi {vec} [zeroinitializer, %entry], [%b{c}, %loop]" for c in range(chains)
    ]
    lines += [
        f"  %b{c} = call {vec} @llvm.fma.v{lanes}f32({vec} %a{c}, {vec} <{half}>, {vec} <{tiny}>)"
        for c in range(chains)
    ]
    lines += [
        "  %i.next = add i64 %i, 1",
        "  %more = icmp ult i64 %i.next, %n",
        "  br i1 %more, label %loop, label %exit",
        "exit:",
    ]
    total = "%b0"
    for c in range(1, chains):
        lines.append(f"  %s{c} = fadd {vec} {total}, %b{c}")
        total = f"%s{c}"
    lines += [f"  store {vec} {total}, ptr %out, align 4", "  ret void", "}"]
    return "\n".join(lines) + "\n"


def fma_peak_gflops(target: Target | None = None, *, calls: int = 5, seconds: float = 0.2) -> float:
    """The fastest of `calls` timed runs of the probe (each about `seconds` long), in GFLOP/s."""
    target = target or host_target(1)
    lanes = target.vector_bits // 32
    chains = accumulators(target.vector_bits)
    module = compile_ir(probe_ir(lanes, chains), target)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(module.address(SYMBOL))
    out = np.zeros(lanes, dtype=np.float32)
    flops_per_iteration = 2 * lanes * chains

    def rate(n: int) -> float:
        start = time.perf_counter()
        fn(n, out.ctypes.data)
        return n * flops_per_iteration / (time.perf_counter() - start) / 1e9

    n = max(1, int(rate(100_000) * 1e9 * seconds / flops_per_iteration))  # calibrate
    best = max(rate(n) for _ in range(calls))
    if not np.isfinite(out).all():
        raise ArithmeticError("the FMA probe overflowed: its result is not finite")
    return best


def peak_fraction(gflops: float | None, peak: float | None) -> float | None:
    """gflops / peak, None where either is unknown."""
    return None if gflops is None or not peak else gflops / peak
