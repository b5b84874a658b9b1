"""Features of a tensorized block: flagged, with the intrinsic's operations counted."""

from __future__ import annotations

import math

import numpy as np

from ir.intrinsics import INTRINSICS
from ir.schedule import Schedule
from ir.task import library_task
from tuner.cost_model.features import FEATURE_NAMES, program_features


def feature(vec: np.ndarray, name: str) -> float:
    return float(vec[FEATURE_NAMES.index(name)])


def test_a_tensorized_block_is_described_by_its_intrinsic() -> None:
    m, n, k = 8, 32, 16
    task = library_task("matmul_int8", {"m": m, "n": n, "k": k})
    sch = Schedule(task.program)
    i, j, r = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    r0, r1 = sch.split(r, [None, 4])
    sch.reorder(i, j0, r0, j1, r1)
    sch.transform_layout("C", "B", INTRINSICS["vnni"].packs[0][1])
    sch.tensorize(j1, "vnni")
    tensorized, plain = program_features(sch.program), program_features(task.program)
    assert feature(tensorized, "max_tensorized") == 1.0
    assert feature(plain, "max_tensorized") == 0.0
    # calls x operations per call = the whole product's 2·m·n·k operations
    assert math.isclose(
        feature(tensorized, "max_log_tensor_ops"), math.log2(1 + 2 * m * n * k), rel_tol=1e-6
    )
    assert feature(plain, "max_log_tensor_ops") == 0.0
