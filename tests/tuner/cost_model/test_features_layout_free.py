"""The cost model's features describe what is timed: a model task's packing of a
layout-free weight runs once at load, so its features leave that packing out."""

from __future__ import annotations

import numpy as np

from ir.lower import lower
from ir.prepack import per_call
from ir.task import library_task, with_layout_free
from tuner.cost_model.features import lowered_features, program_features
from tuner.trace.traced_schedule import TracedSchedule

STANDALONE = library_task("matmul", {"m": 16, "n": 256, "k": 256})
MODEL = with_layout_free(STANDALONE, ["B"])


def _packed(program):
    sch = TracedSchedule(program)
    c = sch.get_block("C")
    packed = sch.pack_panels(c, "B", 16)
    i, j, r = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i, j0, r, j1)
    sch.compute_at(packed, j0)
    return sch.trace.apply(program).program


def test_a_model_tasks_features_leave_out_the_packing_it_does_at_load() -> None:
    model, standalone = _packed(MODEL.program), _packed(STANDALONE.program)
    main = per_call(model)
    assert main is not model  # the packing was hoisted
    assert np.array_equal(program_features(model), lowered_features(lower(main)))
    assert not np.array_equal(program_features(model), program_features(standalone))
    # a standalone operator keeps every block in its features
    assert np.array_equal(program_features(standalone), lowered_features(lower(standalone)))
