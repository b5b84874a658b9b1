"""The cost model's memory features count bytes by element size, bfloat16 and int8 included."""

from __future__ import annotations

import pytest

from ir.task import library_task
from tuner.cost_model.features import FEATURE_NAMES, program_features


def _feature(op: str, name: str) -> float:
    task = library_task(op, {"m": 64, "n": 64, "k": 64})
    return float(program_features(task.program)[FEATURE_NAMES.index(name)])


@pytest.mark.parametrize("level", [0, 2])
def test_bytes_touched_shrink_with_the_element_size(level: int) -> None:
    name = f"max_mem{level}_log_bytes"
    f32, bf16, i8 = (_feature(op, name) for op in ("matmul", "matmul_bf16", "matmul_int8"))
    assert f32 > bf16 > i8
