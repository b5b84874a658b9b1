"""The int8 / bf16 benchmark's workloads and goals (issue 38's acceptance)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ir.intrinsics import get_intrinsic
from ir.task import Task, library_task, with_layout_free

TENSORIZED_BY = 16
"""The search picks tensorized sketches by itself: the best kernel after this many trials
should already be tensorized."""


@dataclass(frozen=True)
class LowpWorkload:
    """A row: the operator, and its goal as × numpy float32 on the same shapes, without AMX
    (`goal`) and with it (`amx_goal`); `amx` is the AMX intrinsic that computes it.
    `layout_free`: inputs that are a model's constants, rearranged once before the timed calls
    (`Task.hoist`), as PyTorch's quantized Linear packs its weight when it is made."""

    name: str
    op: str
    params: dict[str, int] = field(default_factory=dict)
    goal: float | None = None
    amx_goal: float | None = None
    amx: str = "amx_int8"
    layout_free: tuple[str, ...] = ()

    def task(self) -> Task:
        task = library_task(self.op, self.params)
        return with_layout_free(task, self.layout_free) if self.layout_free else task

    def goal_for(self, features: Sequence[str]) -> tuple[float | None, str]:
        """(the ratio to reach, its condition) on a CPU with `features`."""
        if not get_intrinsic(self.amx).missing_features(tuple(features)):
            return self.amx_goal, "AMX"
        return self.goal, "no AMX"


_CUBE = {"m": 1024, "n": 1024, "k": 1024}
_DENSE = {"m": 128, "k": 768, "n": 3072}
_CONSTANTS = ("W", "bias", "scale")
"""dense_int8's weight, bias and scale: a model's constants."""
SUITE = (
    LowpWorkload("matmul_int8 1024³", "matmul_int8", _CUBE, 3.5, 10.0, "amx_int8"),
    LowpWorkload("matmul_bf16 1024³", "matmul_bf16", _CUBE, 4.0, 4.0, "amx_bf16"),
    LowpWorkload("dense_int8 128×768→3072", "dense_int8", _DENSE, 8.0, 8.0),
    LowpWorkload(
        "dense_int8 128×768→3072, weights at load",
        "dense_int8",
        _DENSE,
        8.0,
        8.0,
        layout_free=_CONSTANTS,
    ),
)

QUICK_SUITE = (
    LowpWorkload("matmul_int8 64³", "matmul_int8", {"m": 64, "n": 64, "k": 64}),
    LowpWorkload("matmul_bf16 64³", "matmul_bf16", {"m": 64, "n": 64, "k": 64}, amx="amx_bf16"),
    LowpWorkload("dense_int8 16×64→64", "dense_int8", {"m": 16, "k": 64, "n": 64}),
    LowpWorkload(
        "dense_int8 16×64→64, weights at load",
        "dense_int8",
        {"m": 16, "k": 64, "n": 64},
        layout_free=_CONSTANTS,
    ),
)


def select(*, quick: bool = False, only: Sequence[str] | None = None) -> list[LowpWorkload]:
    """The suite (or the quick one), restricted to the operators in `only` (matmul_int8, ...)."""
    workloads = list(QUICK_SUITE if quick else SUITE)
    if only:
        wanted = {name.strip() for name in only}
        unknown = wanted - {w.op for w in workloads}
        if unknown:
            raise ValueError(
                f"unknown workloads {sorted(unknown)}; expected some of {[w.op for w in workloads]}"
            )
        workloads = [w for w in workloads if w.op in wanted]
    return workloads


def not_measured(
    workloads: Sequence[LowpWorkload], features: Sequence[str]
) -> list[dict[str, str]]:
    """The AMX paths of `workloads` this CPU cannot run, each with the reason."""
    out = []
    for amx in dict.fromkeys(w.amx for w in workloads):
        missing = get_intrinsic(amx).missing_features(tuple(features))
        if missing:
            ops = ", ".join(dict.fromkeys(w.op for w in workloads if w.amx == amx))
            out.append(
                {
                    "workload": f"{ops} via {amx}",
                    "note": f"not measured: no AMX on this CPU (lacks {', '.join(missing)})",
                }
            )
    return out
