"""`Trace`: frozen instructions plus decisions — the unit the search explores.

JSON format (version 1), inside a trace file's "trace" field:

    {"version": 1,
     "instructions": [
        {"kind": "get_block", "inputs": [], "attrs": {"name": "C"}, "outputs": ["b0"]},
        {"kind": "get_loops", "inputs": [{"rv": "b0"}], "attrs": {}, "outputs": ["l1", "l2", "l3"]},
        {"kind": "sample_perfect_tile", "inputs": [{"rv": "l1"}],
         "attrs": {"max_innermost_factor": 64, "n": 2}, "outputs": ["v4", "v5"]},
        {"kind": "split", "inputs": [{"rv": "l1"}, [{"rv": "v4"}, {"rv": "v5"}]], "attrs": {},
         "outputs": ["l6", "l7"]}],
     "decisions": {"3": [16, 64]}}

- inputs: `{"rv": name}` refers to an earlier output; other values are literals
  (numbers, strings, null, lists, or an IR node such as an IndexMap as
  `{"node": ...}`, see ir/serialize.py);
- decisions: instruction index (as a string) -> decision; perfect tile: the
  factors; categorical: the chosen index; compute location: an index into the
  candidate loops, -1 for the root, -2 for inline.
Replaying a trace without a decision samples it (an rng is then required).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ir.program import Program
from ir.schedule import ScheduleError
from tuner.trace.errors import TraceError
from tuner.trace.instruction import KINDS, PURE, RV, Instruction, decode_arg, encode_arg
from tuner.trace.traced_schedule import TracedSchedule, replay_instruction

TRACE_VERSION = 1


@dataclass(frozen=True)
class Trace:
    instructions: tuple[Instruction, ...]
    decisions: Mapping[int, Any] = field(default_factory=dict)

    # -- replay --------------------------------------------------------------------

    def apply(
        self,
        program: Program,
        *,
        rng: random.Random | None = None,
        repair: bool = False,
        keep_decisions: bool = True,
    ) -> TracedSchedule:
        """Replay on a fresh program; strict unless `repair` (stale decisions re-chosen).

        With keep_decisions=False every sampling instruction re-samples from `rng`.
        """
        sch = TracedSchedule(program, rng=rng, repair=repair)
        env: dict[str, Any] = {}
        for i, inst in enumerate(self.instructions):
            decision = self.decisions.get(i) if keep_decisions else None
            try:
                replay_instruction(sch, inst, env, decision)
            except ScheduleError as e:
                raise TraceError(f"instruction {i} ({inst.kind}) was refused: {e}") from None
        return sch

    def with_decision(self, index: int, decision: Any) -> Trace:
        if not 0 <= index < len(self.instructions) or not self.instructions[index].is_sampling:
            raise TraceError(f"instruction {index} is not a sampling instruction")
        return Trace(self.instructions, {**self.decisions, index: decision})

    def without_decisions(self) -> Trace:
        return Trace(self.instructions, {})

    def simplified(self) -> Trace:
        """Drop pure instructions (samples, lookups) whose results nothing uses."""
        used: set[str] = set()
        keep = [False] * len(self.instructions)
        for i in range(len(self.instructions) - 1, -1, -1):
            inst = self.instructions[i]
            if inst.kind not in PURE or any(o in used for o in inst.outputs):
                keep[i] = True
                used |= inst.used_rvs()
        new_index = {}
        out = []
        for i, inst in enumerate(self.instructions):
            if keep[i]:
                new_index[i] = len(out)
                out.append(inst)
        decisions = {new_index[i]: d for i, d in self.decisions.items() if i in new_index}
        return Trace(tuple(out), decisions)

    # -- serialisation ----------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": TRACE_VERSION,
            "instructions": [
                {
                    "kind": inst.kind,
                    "inputs": encode_arg(inst.inputs),
                    "attrs": {k: encode_arg(v) for k, v in inst.attrs},
                    "outputs": list(inst.outputs),
                }
                for inst in self.instructions
            ],
            "decisions": {str(i): encode_arg(d) for i, d in sorted(self.decisions.items())},
        }

    @staticmethod
    def from_json(data: Any) -> Trace:
        if not isinstance(data, dict):
            raise TraceError(f"a trace is a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if version != TRACE_VERSION:
            raise TraceError(
                f"unknown trace version {version!r}; this loomtune reads version {TRACE_VERSION}"
            )
        raw = data.get("instructions")
        if not isinstance(raw, list):
            raise TraceError("trace.instructions must be a list")
        insts = []
        for i, d in enumerate(raw):
            where = f"trace.instructions[{i}]"
            if not isinstance(d, dict) or set(d) != {"kind", "inputs", "attrs", "outputs"}:
                raise TraceError(f"{where}: expected an object with kind, inputs, attrs, outputs")
            if d["kind"] not in KINDS:
                raise TraceError(f"{where}: unknown instruction {d['kind']!r}")
            if (
                not isinstance(d["inputs"], list)
                or not isinstance(d["attrs"], dict)
                or not isinstance(d["outputs"], list)
            ):
                raise TraceError(f"{where}: inputs and outputs must be lists, attrs an object")
            if not all(isinstance(o, str) for o in d["outputs"]):
                raise TraceError(f"{where}: outputs must be names")
            insts.append(
                Instruction(
                    d["kind"],
                    decode_arg(d["inputs"], f"{where}.inputs"),
                    tuple(
                        sorted(
                            (k, decode_arg(v, f"{where}.attrs.{k}")) for k, v in d["attrs"].items()
                        )
                    ),
                    tuple(d["outputs"]),
                )
            )
        raw_dec = data.get("decisions", {})
        if not isinstance(raw_dec, dict):
            raise TraceError("trace.decisions must be an object")
        decisions: dict[int, Any] = {}
        for k, v in raw_dec.items():
            if not k.isdigit() or int(k) >= len(insts) or not insts[int(k)].is_sampling:
                raise TraceError(
                    f"trace.decisions: {k!r} is not the index of a sampling instruction"
                )
            d = decode_arg(v, f"trace.decisions.{k}")
            decisions[int(k)] = list(d) if isinstance(d, tuple) else d
        return Trace(tuple(insts), decisions)

    def canonical_json(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @functools.cached_property
    def hash(self) -> str:
        """sha256 of the canonical JSON: the identity of a candidate across processes.

        Computed once per trace (the search asks for it thousands of times per round)."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    # -- Python ---------------------------------------------------------------------

    def as_python(self, function: str = "schedule") -> str:
        """Python code that rebuilds this schedule on a TracedSchedule `sch`."""
        lines = [f"def {function}(sch):"]
        for i, inst in enumerate(self.instructions):
            args = [_py(a) for a in inst.inputs]
            attrs = dict(inst.attrs)
            k = inst.kind
            if k == "get_block":
                call = f"sch.get_block({attrs['name']!r})"
            elif k == "split":
                call = f"sch.split({args[0]}, {args[1]})"
            elif k == "annotate":
                call = f"sch.annotate({args[0]}, {attrs['key']!r}, {args[1]})"
            elif k == "cache_read":
                call = f"sch.cache_read({args[0]}, {attrs['read_index']!r}, {attrs['scope']!r})"
            elif k == "cache_write":
                call = f"sch.cache_write({args[0]}, {attrs['write_index']!r}, {attrs['scope']!r})"
            elif k == "rfactor":
                call = f"sch.rfactor({args[0]}, {attrs['factor_axis']!r})"
            elif k == "transform_layout":
                inverse = attrs.get("inverse")
                call = (
                    f"sch.transform_layout({args[0]}, {attrs['buffer']!r}, {_py(attrs['index_map'])}"
                    + (f", {_py(inverse)})" if inverse is not None else ")")
                )
            elif k == "read_through":
                call = (
                    f"sch.read_through({args[0]}, {attrs['buffer']!r}, {attrs['packed']!r}, "
                    f"{_py(attrs['index_map'])})"
                )
            elif k == "tensorize":
                call = f"sch.tensorize({args[0]}, {attrs['intrinsic']!r})"
            elif k == "pack_panels":
                call = f"sch.pack_panels({args[0]}, {attrs['buffer']!r}, {args[1]})"
            elif k == "sample_perfect_tile":
                call = (
                    f"sch.sample_perfect_tile({args[0]}, n={attrs['n']}, "
                    f"max_innermost_factor={attrs['max_innermost_factor']}, decision={self.decisions.get(i)!r}"
                    + (", cover=True)" if attrs.get("cover") is True else ")")
                )
            elif k == "sample_categorical":
                call = (
                    f"sch.sample_categorical({list(attrs['candidates'])!r}, {list(attrs['probabilities'])!r}, "
                    f"decision={self.decisions.get(i)!r})"
                )
            elif k == "sample_loop":
                call = (
                    f"sch.sample_loop({args[0]}, {list(attrs['probabilities'])!r}, "
                    f"decision={self.decisions.get(i)!r})"
                )
            elif k == "sample_compute_location":
                call = f"sch.sample_compute_location({args[0]}, decision={self.decisions.get(i)!r})"
            else:
                call = f"sch.{k}({', '.join(args)})"
            outs = list(inst.outputs)
            if k in ("get_loops", "get_child_blocks", "split", "sample_perfect_tile"):
                target = f"[{', '.join(outs)}]" if outs else "_"
                lines.append(f"    {target} = {call}")
            elif outs:
                lines.append(f"    {outs[0]} = {call}")
            else:
                lines.append(f"    {call}")
        if len(lines) == 1:
            lines.append("    pass")
        return "\n".join(lines) + "\n"


def _py(a: Any) -> str:
    from ir.node import Node

    if isinstance(a, RV):
        return a.name
    if isinstance(a, tuple):
        return "[" + ", ".join(_py(x) for x in a) + "]"
    if isinstance(a, Node):
        return f"node({json.dumps(encode_arg(a))})"
    return repr(a)


def run_python(code: str, program: Program, function: str = "schedule") -> TracedSchedule:
    """Execute code from `Trace.as_python` (our own generated text) on a fresh program."""
    from ir.serialize import decode

    namespace: dict[str, Any] = {"node": lambda data: decode(data)}
    exec(compile(code, "<trace>", "exec"), namespace)  # our own generated code, never user input
    sch = TracedSchedule(program)
    namespace[function](sch)
    return sch
