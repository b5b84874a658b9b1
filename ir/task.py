"""A task: one concrete workload (library operator or custom definition) ready to run.

The CLI, the tuner and the service all speak of workloads as `OP k=v...` or a
definition file; this is the one place that turns either into the naive program,
its reference, inputs, FLOPs and workload key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ir import dtype as dt
from ir import library
from ir.build import build_program
from ir.compute import Workload
from ir.definition import from_definition, to_definition
from ir.errors import BufferTooLargeError, WorkloadError
from ir.evaluate import evaluate
from ir.library.spec import OpDef
from ir.prepack import LAYOUT_FREE_ATTR, hoist_constant_blocks, layout_free
from ir.program import Program, annotations
from ir.serialize import structural_hash

_INT_TEXT = re.compile(r"[+-]?[0-9]{1,18}")


@dataclass(frozen=True)
class Task:
    """`op` is the library operator's name, or the custom workload's name."""

    op: str
    params: dict[str, int]
    workload: Workload
    program: Program
    opdef: OpDef | None = None
    definition: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def is_custom(self) -> bool:
        return self.opdef is None

    @property
    def key(self) -> str:
        """The workload key: structural hash of the naive program."""
        return structural_hash(self.program)

    @property
    def layout_free(self) -> tuple[str, ...]:
        """Inputs that are constants of a model (weights), given once at load: blocks that
        only rearrange them may run once (`ir.prepack`), not per call. () standalone."""
        return layout_free(self.program)

    def hoist(self, program: Program) -> tuple[Program | None, Program]:
        """(prologue, main) of a scheduled program of this task as a model runs it: the
        blocks that only rearrange `layout_free` inputs run once at load (`ir.prepack`),
        main per call — what measurement times and what a cost model should see.
        (None, program) standalone or when nothing is hoisted."""
        if not self.layout_free:
            return None, program
        return hoist_constant_blocks(program, frozenset(self.layout_free))

    @property
    def flops(self) -> int | None:
        if self.opdef is not None:
            return self.opdef.flops(self.params)
        return None

    @property
    def reduction_length(self) -> int:
        return library.reduction_length(self.workload)

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.workload.outputs]

    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        ranges = self.opdef.input_ranges(self.params) if self.opdef is not None else None
        return library.make_inputs(self.workload, seed, ranges)

    def output_specs(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        return [(t.concrete_shape(), dt.to_numpy(t.dtype)) for t in self.workload.outputs]

    def reference(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """numpy's answer: the library's numpy function, or the DSL evaluator for custom workloads."""
        if self.opdef is not None:
            return [np.asarray(r) for r in self.opdef.reference(self.params, *inputs)]
        return evaluate(self.workload, inputs)

    def to_definition(self) -> dict[str, Any]:
        return self.definition if self.definition is not None else to_definition(self.workload)

    def spec(self) -> dict[str, Any]:
        """The workload as JSON other processes rebuild it from (`task_from_spec`).

        `{"op", "params"}` for a library operator, `{"definition", "params"}`
        for a custom workload: the `workload` field of trace files, of the
        REST API and of what a measurement process is sent. A model's task adds
        `"layout_free"`: its inputs that are the model's constants.
        """
        spec: dict[str, Any] = (
            {"definition": self.to_definition(), "params": dict(self.params)}
            if self.is_custom
            else {"op": self.op, "params": dict(self.params)}
        )
        if self.layout_free:
            spec["layout_free"] = list(self.layout_free)
        return spec


def with_layout_free(task: Task, names: Iterable[str]) -> Task:
    """`task` as a model runs it: `names` (inputs) are constants given once at load.

    Like MetaSchedule's `layout_free_buffers`, this is part of the workload — the naive
    program's attrs, so the key — since a kernel whose weight is a load-time constant is
    tuned without the cost of rearranging it. No names: the task itself."""
    wanted = sorted(set(names))
    inputs = [b.name for b in task.program.inputs]
    unknown = [n for n in wanted if n not in inputs]
    if unknown:
        raise WorkloadError(
            f"layout_free: {', '.join(unknown)} is not an input of {task.op} "
            f"(its inputs: {', '.join(inputs)})"
        )
    if any("," in n for n in wanted):
        raise WorkloadError("layout_free: an input name has no comma")
    attrs = {k: v for k, v in task.program.attrs if k != LAYOUT_FREE_ATTR}
    if wanted:
        attrs[LAYOUT_FREE_ATTR] = ",".join(wanted)
    return replace(task, program=replace(task.program, attrs=annotations(attrs)))


def schedule_keys(task: Task) -> tuple[str, ...]:
    """Workload keys whose stored schedules replay onto `task`, best evidence first: its
    own; for a model task then the same computation measured whole, packing included (a
    standalone workload's records, and a model's from before its keys named constants)."""
    if not task.layout_free:
        return (task.key,)
    return task.key, with_layout_free(task, ()).key


def library_task(op: str, given: Mapping[str, str | int] | None = None) -> Task:
    opdef, params, workload = library.instantiate(op, dict(given or {}))
    program = build_program(workload, {"op": op, **{f"param.{k}": v for k, v in params.items()}})
    return Task(op, params, workload, program, opdef)


def custom_task(
    definition: Mapping[str, Any], given: Mapping[str, str | int] | None = None
) -> Task:
    sizes: dict[str, int] = {}
    for k, v in (given or {}).items():
        text = str(v).strip()
        if isinstance(v, bool | float) or not _INT_TEXT.fullmatch(text):
            raise WorkloadError(f"parameter {k} must be an integer, got {v!r}")
        if int(text) <= 0:
            raise WorkloadError(f"parameter {k} must be positive, got {int(text)}")
        sizes[k] = int(text)
    workload = from_definition(definition, sizes)
    total = library.workload_bytes(workload)
    limit = library.max_bytes()
    if total > limit:
        raise BufferTooLargeError(
            f"{workload.name}: the workload's buffers need {total} bytes, over the limit of "
            f"{limit} bytes ({library.MAX_BYTES_ENV})"
        )
    params = {**dict(definition.get("sizes") or {}), **sizes}
    program = build_program(workload, {"op": workload.name, "custom": 1})
    return Task(workload.name, params, workload, program, None, dict(definition))


def task_from_spec(
    spec: Mapping[str, Any], overrides: Mapping[str, str | int] | None = None
) -> Task:
    """The task a `Task.spec()` describes, with parameters overridden; errors name the field."""
    if not isinstance(spec, Mapping):
        raise WorkloadError(f"a workload is an object, got {type(spec).__name__}")
    raw = spec.get("params", {})
    if not isinstance(raw, Mapping):
        raise WorkloadError("workload params must be an object")
    params = {
        **{str(k): str(v) for k, v in raw.items()},
        **{k: str(v) for k, v in (overrides or {}).items()},
    }
    if isinstance(spec.get("definition"), Mapping):
        task = custom_task(spec["definition"], params)
    elif isinstance(spec.get("op"), str):
        task = library_task(spec["op"], params)
    else:
        raise WorkloadError('a workload is {"op", "params"} or {"definition", "params"}')
    free = spec.get("layout_free", [])
    if not isinstance(free, list) or not all(isinstance(n, str) for n in free):
        raise WorkloadError("layout_free must be a list of input names")
    return with_layout_free(task, free)


def gflops(flops: int | None, latency_ms: float) -> float | None:
    if flops is None or latency_ms <= 0 or not math.isfinite(latency_ms):
        return None
    return flops / (latency_ms * 1e-3) / 1e9
