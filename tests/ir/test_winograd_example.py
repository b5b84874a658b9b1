"""examples/conv3x3_winograd.workload.json: Winograd F(2×2, 3×3) written in the compute DSL
is the library's 3×3 convolution, and compiles to a kernel that computes it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codegen.host import host_target
from codegen.kernel import compile_program
from ir.definition import load_definition_file
from ir.task import custom_task, library_task
from workers.verify import empty_outputs, verify

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "conv3x3_winograd.workload.json"
CONV = {"n": 1, "h": 56, "w": 56, "ci": 64, "co": 64, "kh": 3, "kw": 3, "stride": 1, "pad": 1}


def test_the_winograd_example_is_the_direct_convolution() -> None:
    winograd = custom_task(load_definition_file(EXAMPLE))
    direct = library_task("conv2d_nhwc", {**CONV, "dilation": 1})
    assert [b.concrete_shape() for b in winograd.program.params] == [
        b.concrete_shape() for b in direct.program.params
    ]
    inputs = direct.make_inputs(seed=4)
    want = direct.reference(inputs)  # numpy's sliding windows and tensordot
    got = winograd.reference(inputs)  # the DSL evaluator on the four Winograd stages
    # the direct convolution's tolerance (its reduction is the longer: 3·3·64)
    assert verify(got, want, direct.output_names, direct.reduction_length) is None
    assert not np.array_equal(got[0], want[0])  # a different order of sums, not a copy


def test_the_winograd_example_compiles_to_a_correct_kernel() -> None:
    task = custom_task(load_definition_file(EXAMPLE))
    direct = library_task("conv2d_nhwc", {**CONV, "dilation": 1})
    kernel = compile_program(task.program, host_target())
    inputs = direct.make_inputs(seed=5)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    assert verify(outputs, direct.reference(inputs), direct.output_names, 9 * 64) is None
