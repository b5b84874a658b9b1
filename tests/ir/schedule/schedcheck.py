"""Shared checks for schedule tests: correctness through codegen, refusals that change nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codegen.host import host_target
from codegen.kernel import compile_program
from ir.program import Program
from ir.schedule import Schedule, ScheduleError
from ir.task import Task
from workers.verify import empty_outputs, verify


def assert_correct(task: Task, program: Program, threads: int = 1) -> None:
    kernel = compile_program(program, host_target(threads))
    inputs = task.make_inputs(seed=7)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    reason = verify(outputs, task.reference(inputs), task.output_names, task.reduction_length)
    assert reason is None, reason


def assert_refused(sch: Schedule, action: Callable[[Schedule], object], *names: str) -> str:
    before = sch.program
    with pytest.raises(ScheduleError) as info:
        action(sch)
    message = str(info.value)
    for name in names:
        assert name in message, f"{name!r} not named in: {message}"
    assert sch.program == before, "a refused primitive changed the schedule"
    return message
