"""Out-of-bounds reads found before anything runs (`ir.bounds`)."""

from __future__ import annotations

from typing import Any

import pytest

from ir.bounds import out_of_bounds_reads
from ir.library import OPS
from ir.task import custom_task, library_task


def _reader(index: Any, body_wrap: Any = None) -> dict[str, Any]:
    load = ["load", "A", index, "r"]
    return {
        "format": "loomtune.workload/1",
        "name": "reader",
        "sizes": {"m": 8, "k": 4},
        "inputs": [{"name": "A", "shape": ["m", "k"]}],
        "computes": [
            {
                "name": "C",
                "shape": ["m"],
                "axes": ["i"],
                "reduce": "sum",
                "reduce_axes": [{"name": "r", "extent": "k"}],
                "body": body_wrap(load) if body_wrap else load,
            }
        ],
        "outputs": ["C"],
    }


def test_a_shifted_read_is_reported_with_its_tensor_and_axis() -> None:
    (bad,) = out_of_bounds_reads(custom_task(_reader(["sub", "i", 3])).workload)
    assert (bad.compute, bad.tensor, bad.axis, bad.low, bad.high, bad.extent) == (
        "C",
        "A",
        0,
        -3,
        4,
        8,
    )
    assert "A" in str(bad) and "axis 0" in str(bad)
    (past,) = out_of_bounds_reads(custom_task(_reader(["add", "i", 1])).workload)
    assert (past.low, past.high) == (1, 8)


def test_reads_in_bounds_and_guarded_reads_pass() -> None:
    assert out_of_bounds_reads(custom_task(_reader("i")).workload) == []
    guarded = _reader(["sub", "i", 3], lambda load: ["select", ["ge", "i", 3], load, 0.0])
    assert out_of_bounds_reads(custom_task(guarded).workload) == []
    wrong_guard = _reader(["sub", "i", 3], lambda load: ["select", ["ge", "i", 2], load, 0.0])
    assert len(out_of_bounds_reads(custom_task(wrong_guard).workload)) == 1
    # the read in the false branch of a guard is checked with the guard negated
    negated = _reader(["sub", "i", 3], lambda load: ["select", ["lt", "i", 3], 0.0, load])
    assert out_of_bounds_reads(custom_task(negated).workload) == []


@pytest.mark.parametrize("op", sorted(OPS))
def test_no_library_operator_reads_out_of_bounds(op: str) -> None:
    assert out_of_bounds_reads(library_task(op).workload) == []


@pytest.mark.parametrize("op", ["conv2d_nhwc", "conv2d_nchw", "depthwise_conv2d_nhwc"])
def test_padded_convolutions_pass(op: str) -> None:
    assert out_of_bounds_reads(library_task(op, {"pad": 2}).workload) == []
