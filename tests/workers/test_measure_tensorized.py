"""A tensorized candidate measured for a target without its instruction: a compile error
naming the feature, never LLVM aborting the measuring process."""

from __future__ import annotations

import random
import re

from ir.target import Target
from ir.task import library_task
from tuner.space import default_space
from workers.measure import Measurer

VNNI = Target.parse("llvm -mcpu=znver4 -mattr=+avx2,+avx512f,+avx512bw,+avx512vnni")
AVX2 = Target.parse("llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma")


def test_a_vnni_trace_on_an_avx2_target_is_a_compile_error() -> None:
    task = library_task("matmul_int8", {"m": 8, "n": 32, "k": 16})
    trace = default_space(task.program, VNNI).sample(random.Random(0))
    assert any(i.kind == "tensorize" for i in trace.instructions)
    result = Measurer(worker="test").measure(task, AVX2, trace)
    assert result.status == "compile_error"
    # the first call emitted names its missing feature (the weight's packing copy's, or
    # the product's)
    assert re.search(r"intrinsic \w+ needs the target feature\(s\) avx512(bw|vnni)", result.message)
