"""`TracedSchedule`: a Schedule that records every primitive and sampling decision.

    sch = TracedSchedule(program, rng=random.Random(0))
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    ti = sch.sample_perfect_tile(i, n=2, max_innermost_factor=16)   # sampled now
    sch.split(i, ti)
    trace = sch.trace           # instructions + decisions, replayable anywhere

Every sampling call takes `decision=`: given, it is replayed (strictly, or
repaired when the schedule was made with `repair=True`); absent, it is sampled
from the `rng` passed in (never the global random module).

A schedule made with `forced=` re-derives an earlier trace (`tuner.trace.forced`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ir.program import Program
from ir.schedule import BlockRV, LoopRV, Schedule, ScheduleError
from ir.schedule.analysis import binds_reduce, readers
from ir.schedule.state import (
    block_name,
    blocks_under,
    find_block,
    find_loop,
    loop_name,
    loops_above,
)
from tuner.trace import sampling
from tuner.trace.errors import TraceError
from tuner.trace.forced import Forced, ForcedDecisions
from tuner.trace.instruction import KINDS, RV, Instruction

ROOT = "<root>"
INLINE = "<inline>"


@dataclass(frozen=True)
class LoopRef(LoopRV):
    """A loop handle that remembers the random variable it came from."""

    rv: str = field(default="", compare=False)


@dataclass(frozen=True)
class BlockRef(BlockRV):
    rv: str = field(default="", compare=False)


class IntRV(int):
    """A sampled integer that remembers its random variable (usable as a plain int)."""

    rv: str

    def __new__(cls, value: int, rv: str) -> IntRV:
        obj = super().__new__(cls, value)
        obj.rv = rv
        return obj


class TracedSchedule:
    def __init__(
        self,
        program: Program,
        *,
        rng: random.Random | None = None,
        repair: bool = False,
        forced: Iterable[Forced] = (),
    ) -> None:
        self.sch = Schedule(program)
        self.rng = rng
        self.repair = repair
        self._forced = ForcedDecisions(forced)
        self.instructions: list[Instruction] = []
        self.decisions: dict[int, Any] = {}
        self._counter = 0
        self._latest: dict[tuple[str, str], str] = {}

    @property
    def program(self) -> Program:
        return self.sch.program

    @property
    def trace(self):
        from tuner.trace.trace import Trace

        return Trace(tuple(self.instructions), dict(self.decisions))

    # -- recording ---------------------------------------------------------------

    def _new_rv(self, prefix: str) -> str:
        name = f"{prefix}{self._counter}"
        self._counter += 1
        return name

    def _as_arg(self, value: Any) -> Any:
        if isinstance(value, LoopRef | BlockRef) and value.rv:
            return RV(value.rv)
        if isinstance(value, LoopRV):
            rv = self._latest.get(("l", value.name))
            return RV(rv) if rv else value.name
        if isinstance(value, BlockRV):
            rv = self._latest.get(("b", value.name))
            return RV(rv) if rv else value.name
        if isinstance(value, IntRV):
            return RV(value.rv)
        if isinstance(value, list | tuple):
            return tuple(self._as_arg(v) for v in value)
        return value

    def _wrap(self, value: Any, rv: str) -> Any:
        if isinstance(value, LoopRV):
            self._latest[("l", value.name)] = rv
            return LoopRef(value.name, rv)
        if isinstance(value, BlockRV):
            self._latest[("b", value.name)] = rv
            return BlockRef(value.name, rv)
        if isinstance(value, int):
            return IntRV(value, rv)
        raise TypeError(f"cannot make a random variable of {value!r}")

    def _record(
        self,
        kind: str,
        inputs: tuple[Any, ...],
        attrs: dict[str, Any],
        run: Callable[[], Any],
        decision: Any = None,
    ) -> Any:
        """Run a primitive; on success append its instruction and name its outputs."""
        result = run()
        values = result if isinstance(result, list) else ([] if result is None else [result])
        prefix = {LoopRV: "l", BlockRV: "b"}
        outputs, wrapped = [], []
        for v in values:
            p = next((c for t, c in prefix.items() if isinstance(v, t)), "v")
            rv = self._new_rv(p)
            outputs.append(rv)
            wrapped.append(self._wrap(v, rv))
        index = len(self.instructions)
        self.instructions.append(
            Instruction(
                kind,
                tuple(self._as_arg(x) for x in inputs),
                tuple(sorted(attrs.items())),
                tuple(outputs),
            )
        )
        if decision is not None:
            self.decisions[index] = decision
        if isinstance(result, list):
            return wrapped
        return wrapped[0] if wrapped else None

    # -- handles -----------------------------------------------------------------

    def get_block(self, name: str) -> BlockRef:
        return self._record("get_block", (), {"name": name}, lambda: self.sch.get_block(name))

    def get_loops(self, block: BlockRV) -> list[LoopRef]:
        return self._record("get_loops", (block,), {}, lambda: list(self.sch.get_loops(block)))

    def get_child_blocks(self, loop: LoopRV | None = None) -> list[BlockRef]:
        return self._record(
            "get_child_blocks", (loop,), {}, lambda: list(self.sch.get_child_blocks(loop))
        )

    # -- primitives ----------------------------------------------------------------

    def split(self, loop: LoopRV, factors: Sequence[int | None]) -> list[LoopRef]:
        return self._record(
            "split",
            (loop, tuple(factors)),
            {},
            lambda: self.sch.split(loop, [None if f is None else int(f) for f in factors]),
        )

    def fuse(self, *loops: LoopRV) -> LoopRef:
        return self._record("fuse", tuple(loops), {}, lambda: self.sch.fuse(*loops))

    def reorder(self, *loops: LoopRV) -> None:
        self._record("reorder", tuple(loops), {}, lambda: self.sch.reorder(*loops))

    def parallel(self, loop: LoopRV) -> None:
        self._record("parallel", (loop,), {}, lambda: self.sch.parallel(loop))

    def vectorize(self, loop: LoopRV) -> None:
        self._record("vectorize", (loop,), {}, lambda: self.sch.vectorize(loop))

    def unroll(self, loop: LoopRV) -> None:
        self._record("unroll", (loop,), {}, lambda: self.sch.unroll(loop))

    def annotate(self, target: LoopRV | BlockRV, key: str, value: Any) -> None:
        plain = int(value) if isinstance(value, IntRV) else value
        self._record(
            "annotate", (target, value), {"key": key}, lambda: self.sch.annotate(target, key, plain)
        )

    def compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """`loop` may be a sampled location: the root (no move) or inline."""

        def run() -> None:
            if loop_name(loop) == ROOT:
                return
            if loop_name(loop) == INLINE:
                self.sch.compute_inline(block)
            else:
                self.sch.compute_at(block, loop)

        self._record("compute_at", (block, loop), {}, run)

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        self._record(
            "reverse_compute_at",
            (block, loop),
            {},
            lambda: self.sch.reverse_compute_at(block, loop),
        )

    def compute_inline(self, block: BlockRV) -> None:
        self._record("compute_inline", (block,), {}, lambda: self.sch.compute_inline(block))

    def reverse_compute_inline(self, block: BlockRV) -> None:
        self._record(
            "reverse_compute_inline", (block,), {}, lambda: self.sch.reverse_compute_inline(block)
        )

    def cache_read(self, block: BlockRV, read_index: int, scope: str = "global") -> BlockRef:
        attrs = {"read_index": read_index, "scope": scope}
        return self._record(
            "cache_read", (block,), attrs, lambda: self.sch.cache_read(block, read_index, scope)
        )

    def cache_write(self, block: BlockRV, write_index: int = 0, scope: str = "local") -> BlockRef:
        attrs = {"write_index": write_index, "scope": scope}
        return self._record(
            "cache_write", (block,), attrs, lambda: self.sch.cache_write(block, write_index, scope)
        )

    def accumulate_at(self, block: BlockRV, loop: LoopRV) -> BlockRef:
        return self._record(
            "accumulate_at", (block, loop), {}, lambda: self.sch.accumulate_at(block, loop)
        )

    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRef:
        return self._record(
            "decompose_reduction",
            (block, loop),
            {},
            lambda: self.sch.decompose_reduction(block, loop),
        )

    def rfactor(self, loop: LoopRV, factor_axis: int = 0) -> BlockRef:
        return self._record(
            "rfactor",
            (loop,),
            {"factor_axis": factor_axis},
            lambda: self.sch.rfactor(loop, factor_axis),
        )

    def _index_map(self, block: BlockRV, buffer: str, index_map: Any) -> Any:
        """A callable index map over `buffer` (which `block` reads) as an `IndexMap`, the
        form a trace records."""
        from ir.schedule.layout import IndexMap

        if isinstance(index_map, IndexMap):
            return index_map
        reads = find_block(self.program, block_name(block)).block.reads
        match = [r.buffer for r in reads if r.buffer.name == buffer]
        if not match:
            raise ScheduleError(
                f'block "{block_name(block)}": does not read a buffer named {buffer}'
            )
        return IndexMap.from_callable(len(match[0].shape), index_map)

    def transform_layout(
        self, block: BlockRV, buffer: str, index_map: Any, inverse: Any = None
    ) -> BlockRef:
        from ir.schedule.layout import IndexMap

        index_map = self._index_map(block, buffer, index_map)
        attrs: dict[str, Any] = {"buffer": buffer, "index_map": index_map}
        if inverse is not None:
            if not isinstance(inverse, IndexMap):
                inverse = IndexMap.from_callable(len(index_map.dst), inverse)
            attrs["inverse"] = inverse
        return self._record(
            "transform_layout",
            (block,),
            attrs,
            lambda: self.sch.transform_layout(block, buffer, index_map, inverse),
        )

    def read_through(self, block: BlockRV, buffer: str, packed: str, index_map: Any) -> None:
        index_map = self._index_map(block, buffer, index_map)
        self._record(
            "read_through",
            (block,),
            {"buffer": buffer, "packed": packed, "index_map": index_map},
            lambda: self.sch.read_through(block, buffer, packed, index_map),
        )

    def pack_panels(self, block: BlockRV, buffer: str, width: int) -> BlockRef:
        """`Schedule.pack_panels`, `width` possibly sampled.

        Recorded with `width` as an input, not as a literal index map, so a trace
        whose tile sizes are mutated or repaired packs panels as wide as its new
        vector tile instead of keeping the old width.
        """
        return self._record(
            "pack_panels",
            (block, width),
            {"buffer": buffer},
            lambda: self.sch.pack_panels(block, buffer, int(width)),
        )

    def pad_einsum(self, block: BlockRV, padding: Sequence[int]) -> None:
        self._record(
            "pad_einsum", (block, tuple(padding)), {}, lambda: self.sch.pad_einsum(block, padding)
        )

    def blockize(self, loop: LoopRV) -> BlockRef:
        return self._record("blockize", (loop,), {}, lambda: self.sch.blockize(loop))

    def tensorize(
        self, target: BlockRV | LoopRV, intrinsic: str, features: Sequence[str] | None = None
    ) -> BlockRef:
        """`Schedule.tensorize`; `features` (the target's) are checked now and not recorded:
        a replay elsewhere is checked by codegen, which knows the target it compiles for."""
        return self._record(
            "tensorize",
            (target,),
            {"intrinsic": intrinsic},
            lambda: self.sch.tensorize(target, intrinsic, features),
        )

    # -- sampling ------------------------------------------------------------------

    def _need_rng(self, kind: str) -> random.Random:
        if self.rng is None:
            raise TraceError(
                f"{kind} at instruction {len(self.instructions)} has no decision and no rng to sample one"
            )
        return self.rng

    def sample_perfect_tile(
        self,
        loop: LoopRV,
        n: int,
        max_innermost_factor: int = 64,
        decision: Sequence[int] | None = None,
        *,
        cover: bool = False,
    ) -> list[IntRV]:
        """n tile sizes of `loop`; with `cover`, tiles that may cover the extent with some to
        spare (`sampling.sample_cover_tile`: the split guards the excess)."""
        lp = find_loop(self.program, loop_name(loop))
        from ir.expr import Const

        if not isinstance(lp.extent, Const):
            raise ScheduleError(f"loop {loop_name(loop)}: extent is not a constant; cannot tile it")
        extent = int(lp.extent.value)
        decision, forced = self._forced.take(("sample_perfect_tile", n), decision)
        fits, draw = (
            (sampling.cover_tile_fits, sampling.sample_cover_tile)
            if cover
            else (sampling.perfect_tile_fits, sampling.sample_perfect_tile)
        )
        if decision is None:
            chosen = draw(self._need_rng("sample_perfect_tile"), extent, n, max_innermost_factor)
        else:
            chosen = (
                [int(x) for x in decision]
                if all(isinstance(x, int) for x in decision)
                else list(decision)
            )
            why = fits(chosen, extent, n, max_innermost_factor)
            if why is not None:
                if not (self.repair or forced):
                    raise TraceError(
                        f"instruction {len(self.instructions)} sample_perfect_tile on loop {loop_name(loop)}: "
                        f"decision no longer fits ({why}); replay with repair to re-choose it"
                    )
                if cover:
                    chosen = sampling.repair_cover_tile(chosen, extent, n, max_innermost_factor)
                else:
                    aligned = not any(binds_reduce(r, lp.var) for r in blocks_under(lp.body))
                    chosen = sampling.repair_perfect_tile(
                        chosen, extent, n, max_innermost_factor, aligned=aligned
                    )
        attrs: dict[str, Any] = {"n": n, "max_innermost_factor": max_innermost_factor}
        if cover:
            attrs["cover"] = True
        return self._record(
            "sample_perfect_tile", (loop,), attrs, lambda: list(chosen), decision=list(chosen)
        )

    def _choice(
        self,
        kind: str,
        what: str,
        count: int,
        probabilities: Sequence[float],
        decision: Any,
        *,
        allow_bool: bool = True,
        subject: Hashable | None = None,
    ) -> int:
        """The index a categorical sampler takes: drawn, or the decision checked (repaired on replay with repair)."""
        if count != len(probabilities) or not count:
            raise TraceError(f"{kind} needs as many probabilities as {what} (at least one)")
        decision, forced = self._forced.take((kind, count), decision, subject)
        if decision is None:
            return sampling.sample_categorical(self._need_rng(kind), probabilities)
        index = decision
        if (
            not isinstance(index, int)
            or (isinstance(index, bool) and not allow_bool)
            or not 0 <= index < count
        ):
            if not (self.repair or forced):
                raise TraceError(
                    f"instruction {len(self.instructions)} {kind}: decision {index!r} is not an "
                    f"index into {count} {what}; replay with repair to re-choose it"
                )
            index = min(max(int(index) if isinstance(index, int) else 0, 0), count - 1)
        return index

    def sample_categorical(
        self,
        candidates: Sequence[int],
        probabilities: Sequence[float],
        decision: int | None = None,
        *,
        subject: Hashable | None = None,
    ) -> IntRV:
        """One of `candidates`. `subject` (not recorded) names what the value is for, so a
        re-derivation gives it the decision forced for that subject (`Forced`)."""
        index = self._choice(
            "sample_categorical",
            "candidates",
            len(candidates),
            probabilities,
            decision,
            subject=subject,
        )
        attrs = {"candidates": tuple(candidates), "probabilities": tuple(probabilities)}
        return self._record(
            "sample_categorical", (), attrs, lambda: int(candidates[index]), decision=index
        )

    def sample_loop(
        self, loops: Sequence[LoopRV], probabilities: Sequence[float], decision: int | None = None
    ) -> LoopRef:
        """One of `loops`, drawn with `probabilities`: a structural choice (where a tile is
        written back) that replay and mutation follow, because what comes after takes the
        chosen loop as its input. A `sample_categorical` whose value only picked a loop in
        Python would be recorded with that loop fixed: changing its decision changed nothing."""
        index = self._choice(
            "sample_loop", "loops", len(loops), probabilities, decision, allow_bool=False
        )
        chosen = LoopRV(loop_name(loops[index]))
        attrs = {"probabilities": tuple(probabilities)}
        return self._record("sample_loop", (tuple(loops),), attrs, lambda: chosen, decision=index)

    def compute_location_candidates(self, block: BlockRV) -> list[str]:
        """Where `block` may go: the loops of its first consumer that enclose every consumer."""
        r = find_block(self.program, block_name(block))
        consumers = [c for w in r.block.writes for c in readers(self.program, w.buffer.name)]
        if not consumers:
            return []
        common = [lp.var.name for lp in loops_above(self.program, consumers[0].block.name)]
        for c in consumers[1:]:
            theirs = {lp.var.name for lp in loops_above(self.program, c.block.name)}
            common = [name for name in common if name in theirs]
        return common

    def sample_compute_location(self, block: BlockRV, decision: int | None = None) -> LoopRef:
        """A loop to compute `block` at; decision -1 is the root (stay), -2 inline."""
        cands = self.compute_location_candidates(block)
        decision, forced = self._forced.take(("sample_compute_location",), decision)
        if decision is None:
            rng = self._need_rng("sample_compute_location")
            index = rng.randrange(-2, len(cands))
        else:
            index = decision
            if not isinstance(index, int) or not -2 <= index < len(cands):
                if not (self.repair or forced):
                    raise TraceError(
                        f'instruction {len(self.instructions)} sample_compute_location of block "{block_name(block)}": '
                        f"decision {index!r} is not one of its {len(cands)} locations; replay with repair"
                    )
                index = min(max(int(index) if isinstance(index, int) else -1, -2), len(cands) - 1)
        name = ROOT if index == -1 else INLINE if index == -2 else cands[index]
        return self._record(
            "sample_compute_location", (block,), {}, lambda: LoopRV(name), decision=index
        )


def replay_instruction(
    sch: TracedSchedule, inst: Instruction, env: dict[str, Any], decision: Any
) -> None:
    """Run one recorded instruction on `sch`, resolving its inputs through `env`."""
    if inst.kind not in KINDS:
        raise TraceError(f"unknown instruction {inst.kind!r}")

    def resolve(a: Any) -> Any:
        if isinstance(a, RV):
            if a.name not in env:
                raise TraceError(
                    f"{inst.kind}: random variable {a.name} is used before it is defined"
                )
            return env[a.name]
        if isinstance(a, tuple):
            return [resolve(x) for x in a]
        return a

    args = [resolve(a) for a in inst.inputs]
    attrs = dict(inst.attrs)
    k = inst.kind
    if k == "get_block":
        out = sch.get_block(attrs["name"])
    elif k in (
        "get_loops",
        "get_child_blocks",
        "parallel",
        "vectorize",
        "unroll",
        "compute_inline",
        "reverse_compute_inline",
        "compute_at",
        "reverse_compute_at",
        "decompose_reduction",
        "accumulate_at",
    ):
        args = [_handle(a, k) for a in args]
        out = getattr(sch, k)(*args)
    elif k == "split":
        out = sch.split(_handle(args[0], k), args[1])
    elif k in ("fuse", "reorder"):
        out = getattr(sch, k)(*(_handle(a, k) for a in args))
    elif k == "annotate":
        out = sch.annotate(_handle(args[0], k), attrs["key"], args[1])
    elif k in ("cache_read", "cache_write"):
        out = getattr(sch, k)(
            _handle(args[0], k),
            *(
                attrs[x]
                for x in (
                    ("read_index", "scope") if k == "cache_read" else ("write_index", "scope")
                )
            ),
        )
    elif k == "rfactor":
        out = sch.rfactor(_handle(args[0], k), attrs["factor_axis"])
    elif k == "transform_layout":
        out = sch.transform_layout(
            _handle(args[0], k), attrs["buffer"], attrs["index_map"], attrs.get("inverse")
        )
    elif k == "read_through":
        out = sch.read_through(
            _handle(args[0], k), attrs["buffer"], attrs["packed"], attrs["index_map"]
        )
    elif k == "pad_einsum":
        if not isinstance(args[1], list) or not all(type(p) is int for p in args[1]):
            raise TraceError(f"pad_einsum: padding {args[1]!r} is not a list of integers")
        out = sch.pad_einsum(_handle(args[0], k), args[1])
    elif k == "blockize":
        out = sch.blockize(_handle(args[0], k))
    elif k == "tensorize":
        if not isinstance(attrs.get("intrinsic"), str):
            raise TraceError("tensorize: the intrinsic's name is missing")
        out = sch.tensorize(_handle(args[0], k), attrs["intrinsic"])
    elif k == "pack_panels":
        if isinstance(args[1], bool) or not isinstance(args[1], int):
            raise TraceError(f"pack_panels: panel width {args[1]!r} is not an integer")
        out = sch.pack_panels(_handle(args[0], k), attrs["buffer"], args[1])
    elif k == "sample_perfect_tile":
        out = sch.sample_perfect_tile(
            _handle(args[0], k),
            attrs["n"],
            attrs["max_innermost_factor"],
            decision=decision,
            cover=attrs.get("cover") is True,
        )
    elif k == "sample_categorical":
        out = sch.sample_categorical(
            list(attrs["candidates"]), list(attrs["probabilities"]), decision=decision
        )
    elif k == "sample_loop":
        out = sch.sample_loop(
            [_handle(a, k) for a in args[0]], list(attrs["probabilities"]), decision=decision
        )
    else:  # sample_compute_location
        out = sch.sample_compute_location(_handle(args[0], k), decision=decision)
    outs = out if isinstance(out, list) else ([] if out is None else [out])
    if len(outs) != len(inst.outputs):
        raise TraceError(
            f"{inst.kind}: produced {len(outs)} results, the trace expects {len(inst.outputs)}"
        )
    for name, value in zip(inst.outputs, outs):
        env[name] = value


def _handle(value: Any, kind: str) -> Any:
    """Handles pass through; a literal name in a trace is accepted as the handle itself."""
    return value
