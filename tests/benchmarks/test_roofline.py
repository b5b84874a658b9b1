"""The FMA roof: the probe really is FMAs on registers, and the report uses it as a fraction."""

from __future__ import annotations

import math

import pytest

from benchmarks import roofline
from benchmarks.tune import report as tune_report
from codegen.host import host_target
from codegen.jit import compile_ir


def test_the_probe_is_independent_vector_fmas_without_memory_in_the_loop() -> None:
    target = host_target(1)
    lanes = target.vector_bits // 32
    chains = roofline.accumulators(target.vector_bits)
    ir = roofline.probe_ir(lanes, chains)
    assert ir.count("call <") == chains
    asm = compile_ir(ir, target).assembly()
    if target.has_feature("fma"):
        register = {16: "zmm", 8: "ymm", 4: "xmm"}[lanes]
        fmas = [line for line in asm.splitlines() if "vfmadd" in line]
        # not folded into adds (a multiplier of 1 would be), and as wide as the target allows
        assert len(fmas) >= chains and all(register in line for line in fmas)
        assert not any(
            "vfmadd" in line and "(" in line for line in asm.splitlines()
        )  # no memory operand


def test_accumulators_fill_the_register_file_but_leave_spares() -> None:
    assert roofline.accumulators(256) == 12 and roofline.accumulators(512) == 24
    assert roofline.accumulators(128) == 12


def test_peak_is_a_finite_rate_and_counts_two_flops_per_lane_and_fma() -> None:
    peak = roofline.fma_peak_gflops(calls=2, seconds=0.02)
    lanes = host_target(1).vector_bits // 32
    assert math.isfinite(peak) and peak > 0
    # At most 2 FMA pipes at 6 GHz: a far larger figure means the loop was optimised away.
    assert peak < 2 * 2 * lanes * 6.0


def test_fraction_and_goal_cell_say_what_a_goal_asks_of_the_core() -> None:
    assert (
        roofline.peak_fraction(None, 100.0) is None and roofline.peak_fraction(50.0, None) is None
    )
    assert roofline.peak_fraction(80.0, 100.0) == pytest.approx(0.8)
    flops = 2 * 128 * 768 * 3072
    row = {
        "op": "dense",
        "params": {"m": 128, "k": 768, "n": 3072, "bias": 1, "relu": 1},
        "checkpoints_ms": {},
        "flops": flops,
        "numpy_ms": 8.0,
        "ratio_numpy": 1.02,
        "tune_s": 100.0,
    }
    numpy_gflops = flops / 8.0e-3 / 1e9  # 75.5
    peak = 97.0
    asks = 1.2 * numpy_gflops / peak
    assert (
        tune_report.goal_cell(row, peak)
        == f"≥ 1.2× (1.02×: not met; it asks for {asks:.0%} of the core's peak)"
    )
    assert (
        tune_report.goal_cell(row) == "≥ 1.2× (1.02×: not met)"
    )  # results from before the roof was measured
    met = {**row, "ratio_numpy": 1.25}
    assert tune_report.goal_cell(met, peak) == "≥ 1.2× (1.25×: met)"
