"""Multi-level tiling around a tensor intrinsic (MetaSchedule's MultiLevelTilingWithIntrin).

For a reduction block whose computation is an intrinsic's (matmul_int8's
u8 x s8 -> s32 is `vnni`'s and `amx_int8`'s, matmul_bf16's `amx_bf16`'s and
`avx512_bf16`'s), on a target with the instruction, the best intrinsic it has (AMX, else
VNNI / AVX-512 BF16) becomes the innermost tile and the search tiles around it:

    i0 j0 | i1 j1 | k0 | i2 j2 | k1 | i3 j3 | [j4 (16) k2 (4)]   vnni on matmul

- the loops the description maps onto (its spatial loops onto the block's last
  spatial loops, its reduction loops onto the last reduction loop) are split
  off at the description's extents; what is left is tiled SSRSRS with sampled
  tiles (covering ones on spatial loops: an imperfect outer tile is guarded
  outside the intrinsic), the register tile S3 at most `max_accumulators`
  intrinsic outputs, unrolled;
- the operand the instruction wants in another layout (vnni's B as
  [N/16][K/4][16][4]) is packed by `transform_layout`, inside the kernel: up
  front, or per column tile just before its panels are read (a sampled
  location, as multi-level-tiling places its panels; up front it is what a
  model's load hoists); the copy writes a packed row per call of the
  intrinsic's `pack_copy`, and the sums of that operand alone (dense_int8's
  zero-point correction) read the packed copy, a packed row per `pack_sum`
  (both only where the weight is not a model's constant: `ir.prepack` hoists
  plain copies and sums to load time);
- a local accumulator (`cache_write`), element-wise consumers folded into its
  write-back, written back at a sampled level (as multi-level-tiling);
- the intrinsic's loops are blockized and tensorized (the block keeps the
  reduction's init, over the intrinsic's spatial loops, which the
  `decompose-reduction` postprocessor then moves out of the reduction loops).

Where no intrinsic fits — another computation, a target without the
instruction, extents that are not multiples of the intrinsic's — the rule
leaves the block alone and plain multi-level tiling (the next rule) tiles it
with vectors: the fallback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ir.expr import Expr
from ir.intrinsics import INTRINSICS, TensorIntrinsic
from ir.prepack import layout_free
from ir.program import Program
from ir.schedule import BlockRV, LoopRV, Schedule, ScheduleError
from ir.schedule.analysis import writers
from ir.schedule.state import all_blocks, block_name, find_block, find_loop, loop_name, loops_above
from ir.schedule.tensorize import operand_buffers
from tuner.space.analysis import is_legal, loop_role
from tuner.space.context import SpaceContext
from tuner.space.rules.base import RULES, ScheduleRule
from tuner.space.rules.multi_level_tiling import MultiLevelTiling
from tuner.trace.sampling import sample_cover_tile, sample_perfect_tile
from tuner.trace.traced_schedule import BlockRef, IntRV, LoopRef, TracedSchedule

PREFERENCE = ("amx_int8", "amx_bf16", "vnni", "avx512_bf16")
"""Intrinsics in the order the rule tries them: the widest first. vdpbf16ps (`avx512_bf16`)
issues at 0.88x vfmadd231ps's rate on Zen 5 with twice the multiply-adds (~1.75x the
float32 peak); on Emerald Rapids it ran slower than float32 FMAs, but there AMX comes first."""

_DRAWS = 64
_PACK_UNROLL = 64
"""The packing copy's innermost loops are unrolled up to this many elements (vnni: 16 x 4)."""


@RULES.register("multi-level-tiling-intrin")
class MultiLevelTilingIntrin(ScheduleRule):
    def __init__(
        self,
        *,
        intrinsics: Sequence[str] = PREFERENCE,
        max_innermost_factor: int = 16,
        max_reduce_factor: int = 64,
        min_reduce_factor: int = 8,
        max_intrinsic_tiles: int = 4,
        max_accumulators: int = 24,
        min_accumulators: int = 8,
        write_levels: Sequence[int] = (1, 2),
    ) -> None:
        self.intrinsics = tuple(intrinsics)
        self.max_innermost_factor = max_innermost_factor
        self.max_reduce_factor = max_reduce_factor
        self.min_reduce_factor = min_reduce_factor
        self.max_intrinsic_tiles = max_intrinsic_tiles
        self.max_accumulators = max_accumulators
        self.min_accumulators = min_accumulators
        self.write_levels = tuple(write_levels)
        self._chosen: dict[tuple[int, str], TensorIntrinsic | None] = {}

    def choose(self, program: Program, block: str, ctx: SpaceContext) -> TensorIntrinsic | None:
        """The first intrinsic (in preference order) the target has and the block fits
        (remembered for the space's naive program: every sample starts from it)."""
        key = (id(ctx), block)
        if program is ctx.program and key in self._chosen:
            return self._chosen[key]
        chosen = self._choose(program, block, ctx)
        if program is ctx.program:
            self._chosen[key] = chosen
        return chosen

    def _choose(self, program: Program, block: str, ctx: SpaceContext) -> TensorIntrinsic | None:
        if not MultiLevelTiling.applies(program, block):
            return None
        for name in self.intrinsics:
            intrin = INTRINSICS.get(name)
            if intrin is None or intrin.missing_features(ctx.target.features):
                continue
            if self._fits(program, block, intrin, ctx):
                return intrin
        return None

    def _fits(
        self, program: Program, block: str, intrin: TensorIntrinsic, ctx: SpaceContext
    ) -> bool:
        """Whether the skeleton (intrinsic loops split off, operands packed) tensorizes."""
        if operand_buffers(program, block, intrin.name) is None:
            return False
        sch = Schedule(program)
        try:
            inner = _skeleton(sch, block, intrin)
            if inner is None:
                return False
            sch.tensorize(inner, intrin.name, features=ctx.target.features)
        except ScheduleError:
            return False
        return True

    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        intrin = self.choose(sch.program, block, ctx)
        if intrin is None:
            return
        r = find_block(sch.program, block)
        roles = [loop_role(r, lp) for lp in loops_above(sch.program, block)]
        plan = _plan(roles, intrin)
        assert plan is not None  # `_fits` made the same plan
        b = sch.get_block(block)
        padding = _padding(sch.program, block, plan)
        if padding is not None:
            sch.pad_einsum(b, padding)
        loops = sch.get_loops(b)
        # 1. the intrinsic's loops split off each mapped loop, innermost
        outer: list[LoopRef] = []
        intrin_loops: list[list[LoopRef]] = []
        for lp, tail in zip(loops, plan):
            if tail:
                parts = sch.split(lp, [None, *tail])
                outer.append(parts[0])
                intrin_loops.append(parts[1:])
            else:
                outer.append(lp)
                intrin_loops.append([])
        # 2. the operands packed into the instruction's layout
        packings = _pack(sch, block, intrin, unroll=False)
        # 3. SSRSRS over what is left, then the intrinsic's loops in the description's order
        tiles = self._tiles(sch, outer, roles, [bool(t) for t in plan], intrin)
        parts = [sch.split(lp, f) for lp, f in zip(outer, tiles)]
        levels = {"S": 0, "R": 0}
        groups: list[tuple[str, list[LoopRef]]] = []
        for ch in "SSRSRS":
            level = levels[ch]
            levels[ch] += 1
            picked = [
                p[level] for p, role in zip(parts, roles) if (role == "spatial") == (ch == "S")
            ]
            groups.append((ch, picked))
        order = [lp for _, g in groups for lp in g]
        sch.reorder(*order, *_description_order(intrin_loops, roles, intrin))
        # the packing up front, or per column tile while it is in cache (a sampled location)
        columns = max(k for k, role in enumerate(roles) if role == "spatial")
        placed: list[tuple[str, LoopRef]] = []
        for packed in packings:
            MultiLevelTiling._place_pack(sch, packed.block, parts[columns][:2])
            above = {lp.var.name for lp in loops_above(sch.program, block_name(packed.block))}
            under = [lp for lp in parts[columns][:2] if loop_name(lp) in above]
            if under:
                placed.append((packed.source, under[-1]))
        for lp in groups[-1][1]:  # the register tile: unrolled, so accumulators stay in registers
            sch.unroll(lp)
        if intrin.unroll_reduction:  # AMX: tiles stay in registers only in straight-line code
            for lp in groups[-2][1]:
                sch.unroll(lp)
        # 4. the accumulator and its write-back, as multi-level-tiling
        output = find_block(sch.program, block).block.writes[0].buffer.name
        writeback = sch.cache_write(b, 0, "local")
        MultiLevelTiling._fold_consumers(sch, output)
        choices = [groups[lv - 1][1][-1] for lv in self.write_levels if groups[lv - 1][1]]
        at = (
            choices[0]
            if len(choices) == 1
            else sch.sample_loop(choices, [1 / len(choices)] * len(choices))
        )
        sch.reverse_compute_at(writeback, at)
        for source, loop in placed:
            _colocate_sums(sch, source, loop)
        # the copy's rows and the sums through the instructions, unless a model's load
        # hoists them (a constant weight: `ir.prepack` hoists plain copies and sums)
        features = ctx.target.features
        constant = set(layout_free(sch.program))
        for packed in packings:
            if packed.source not in constant:
                _sum_packed(sch, packed, intrin, features)
            if packed.source in constant or not _copy_rows(sch, packed.block, intrin, features):
                _unroll_copy(sch, packed.block)
        # 5. the intrinsic's loops as one block, replaced by the instruction
        # (`decompose-reduction` later moves the block's init out of its reduction loops)
        first = _description_order(intrin_loops, roles, intrin)[0]
        sch.tensorize(sch.blockize(first), intrin.name, features=ctx.target.features)

    def _tiles(
        self,
        sch: TracedSchedule,
        loops: list[LoopRef],
        roles: list[str],
        mapped: list[bool],
        intrin: TensorIntrinsic,
    ) -> list[list[IntRV]]:
        """Sampled tiles (4 spatial levels, 2 reduction levels), the register tile (S3)
        between `min_accumulators` and `max_accumulators` intrinsic outputs (at most the
        intrinsic's `max_outputs`: AMX's 8 tile registers hold 4 C tiles) and the inner
        reduction tile (R1) at least `min_reduce_factor` intrinsic steps where the shape
        allows (redrawn up to `_DRAWS` times; recorded as ordinary decisions). A short R1
        reloads the accumulators from memory every few instructions: at 1024^3 every
        candidate with R1 of 1 or 2 steps ran 15-50 ms, those with 16 or 32 ran 3-7 ms.
        A loop the intrinsic splits gets at most `max_intrinsic_tiles` of its tiles in the
        register tile: vnni's 16-column panels lie K/4 x 64 bytes apart (16 KB at K = 1024,
        the same L1 sets), and 8 of them streamed at once ran at 100-125 GOPS.

        Spatial loops the intrinsic does not split get covering tiles (a guard on the
        block's own axis); the outer parts of split ones perfect tiles, whose guard
        `reverse_compute_at` could not read as a bound of the block's domain."""
        most = intrin.max_outputs or self.max_accumulators
        least = min(self.min_accumulators, most)
        cover = [role == "spatial" and not m for role, m in zip(roles, mapped)]
        extents = [int(find_loop(sch.program, lp.name).extent.value) for lp in loops]  # type: ignore[attr-defined]
        shapes = [
            (e, 4, self.max_intrinsic_tiles if m else self.max_innermost_factor)
            if role == "spatial"
            else (e, 2, self.max_reduce_factor)
            for e, role, m in zip(extents, roles, mapped)
        ]
        drawn: list[list[int] | None] = [None] * len(loops)
        if sch.rng is not None:
            fallback: tuple[bool, list[list[int]]] | None = None
            for _ in range(_DRAWS):
                draw = [
                    (sample_cover_tile if c else sample_perfect_tile)(sch.rng, *shape)
                    for shape, c in zip(shapes, cover)
                ]
                acc = math.prod(t[-1] for t, role in zip(draw, roles) if role == "spatial")
                deep = all(
                    t[-1] >= self.min_reduce_factor or t[-1] == e
                    for t, (e, _, _), role in zip(draw, shapes, roles)
                    if role == "reduce"
                )
                if acc > most:
                    continue
                if deep and acc >= least:
                    fallback = (True, draw)
                    break
                if fallback is None or (deep and not fallback[0]):
                    fallback = (deep, draw)
            drawn = list(fallback[1]) if fallback else drawn  # type: ignore[arg-type]
        return [
            sch.sample_perfect_tile(lp, n=n, max_innermost_factor=bound, decision=d, cover=c)
            for lp, (_, n, bound), d, c in zip(loops, shapes, drawn, cover)
        ]


def _plan(roles: list[str], intrin: TensorIntrinsic) -> list[list[int]] | None:
    """Per block loop, the description's extents split off it: its spatial loops onto the
    block's last spatial loops (in order), its reduction loops onto the last reduction loop."""
    d_prog = intrin.program
    d_r = all_blocks(d_prog)[0]
    d_loops = loops_above(d_prog, d_r.block.name)
    d_roles = [loop_role(d_r, lp) for lp in d_loops]
    spatial = [int(lp.extent.value) for lp, x in zip(d_loops, d_roles) if x == "spatial"]  # type: ignore[attr-defined]
    reduce = [int(lp.extent.value) for lp, x in zip(d_loops, d_roles) if x == "reduce"]  # type: ignore[attr-defined]
    s_pos = [k for k, x in enumerate(roles) if x == "spatial"]
    r_pos = [k for k, x in enumerate(roles) if x == "reduce"]
    if len(s_pos) < len(spatial) or (reduce and not r_pos) or (r_pos and not reduce):
        return None
    plan: list[list[int]] = [[] for _ in roles]
    for k, e in zip(s_pos[len(s_pos) - len(spatial) :], spatial):
        plan[k] = [e]
    if reduce:
        plan[r_pos[-1]] = reduce
    return plan


def _description_order(
    intrin_loops: list[list[LoopRef]], roles: list[str], intrin: TensorIntrinsic
) -> list[LoopRef]:
    """The split-off loops in the description's loop order: spatial ones, then reduction ones."""
    spatial = [lp for ls, role in zip(intrin_loops, roles) if role == "spatial" for lp in ls]
    reduce = [lp for ls, role in zip(intrin_loops, roles) if role == "reduce" for lp in ls]
    return spatial + reduce


def _skeleton(sch: Schedule, block: str, intrin: TensorIntrinsic) -> LoopRV | None:
    """The intrinsic's loops split off, innermost, operands packed: the first of them, or None."""
    r = find_block(sch.program, block)
    roles = [loop_role(r, lp) for lp in loops_above(sch.program, block)]
    plan = _plan(roles, intrin)
    if plan is None:
        return None
    padding = _padding(sch.program, block, plan)
    if padding is not None:
        sch.pad_einsum(block, padding)
    loops = sch.get_loops(block)
    outer, inner = [], []
    for lp, tail in zip(loops, plan):
        if tail:
            parts = sch.split(lp, [None, *tail])
            outer.append(parts[0])
            inner.append(parts[1:])
        else:
            outer.append(lp)
            inner.append([])
    _pack(sch, block, intrin)
    ordered = _description_order(inner, roles, intrin)  # type: ignore[arg-type]
    sch.reorder(*outer, *ordered)
    return ordered[0]


def _padding(program: Program, block: str, plan: list[list[int]]) -> list[int] | None:
    """Factors padding each loop to whole intrinsic tiles, or None when the shape has them."""
    factors = [math.prod(tail) for tail in plan]
    extents = [int(lp.extent.value) for lp in loops_above(program, block)]  # type: ignore[attr-defined]
    return factors if any(e % f for e, f in zip(extents, factors)) else None


class _Packed(NamedTuple):
    """A buffer packed for the instruction: its packed copy and the block writing it."""

    source: str
    block: BlockRV | BlockRef
    buffer: str
    index_map: Callable[..., tuple]


def _pack(
    sch: Schedule | TracedSchedule, block: str, intrin: TensorIntrinsic, unroll: bool = True
) -> list[_Packed]:
    """The operands the instruction wants in another layout, packed;
    a zero-padded copy (`pad_einsum`) is folded into the packing, so the weight is copied
    once. `unroll`: the copies unrolled now, not after they are placed."""
    buffers = operand_buffers(sch.program, block, intrin.name) or {}
    packings: list[_Packed] = []
    for operand, index_map, inverse in intrin.packs:
        source = buffers[operand]
        ndim = next(
            len(rd.buffer.shape)
            for rd in find_block(sch.program, block).block.reads
            if rd.buffer.name == source
        )
        fwd, inv = _leading(index_map, inverse, ndim)
        packing = sch.transform_layout(sch.get_block(block), source, fwd, inv)
        buffer = block_name(packing)  # the copy's block is named after its buffer
        padded = writers(sch.program, source)
        if padded and is_legal(sch.program, lambda s, n=source: s.compute_inline(n)):
            sch.compute_inline(sch.get_block(padded[0].block.name))
        if unroll:
            _unroll_copy(sch, packing)
        packings.append(_Packed(source, packing, buffer, fwd))
    return packings


def _copy_rows(
    sch: TracedSchedule, packing: BlockRef, intrin: TensorIntrinsic, features: Sequence[str]
) -> bool:
    """The packing copy's rows written by the intrinsic's `pack_copy` (whole rows loaded and
    permuted at once); False where it does not apply (no such intrinsic, a target without
    it, a zero-padded copy), leaving the copy as loops."""
    copy = INTRINSICS.get(intrin.pack_copy or "")
    if copy is None or copy.missing_features(features):
        return False
    try:
        _tensorize_rows(Schedule(sch.program), block_name(packing), copy, features)
    except ScheduleError:
        return False
    _tensorize_rows(sch, packing, copy, features)
    return True


def _tensorize_rows(
    sch: Schedule | TracedSchedule,
    packing: str | BlockRef,
    copy: TensorIntrinsic,
    features: Sequence[str],
) -> None:
    """Split the copy's innermost loop into the packed row's columns and rows where it is
    one loop over both (AMX's [.., 16·pack]), then tensorize from the columns' loop."""
    columns, pack = copy.extents
    loops = sch.get_loops(packing)  # type: ignore[arg-type]
    extents = [int(find_loop(sch.program, lp.name).extent.value) for lp in loops]  # type: ignore[attr-defined]
    if extents[-1] == columns * pack:
        first = sch.split(loops[-1], [columns, pack])[0]  # type: ignore[arg-type]
    elif extents[-2:] == [columns, pack]:
        first = loops[-2]
    else:
        raise ScheduleError(f"no packed rows of {columns} x {pack} in the copy")
    sch.tensorize(sch.blockize(first), copy.name, features=features)  # type: ignore[arg-type]


def _unroll_copy(sch: Schedule | TracedSchedule, packing: BlockRV | BlockRef) -> None:
    """One tile row of the packed layout per unrolled copy: contiguous stores from a few
    vector loads and shuffles (LLVM's SLP), ~6x faster than the scattered bytes."""
    loops = sch.get_loops(packing)
    product = 1
    for lp in reversed(loops):
        product *= int(find_loop(sch.program, lp.name).extent.value)  # type: ignore[attr-defined]
        if product > _PACK_UNROLL:
            break
        sch.unroll(lp)


def _sums_of(program: Program, source: str) -> list[str]:
    """The reductions of `source` alone (dense_int8's column sums of W, for the zero-point
    correction)."""
    out = []
    for r in all_blocks(program):
        written = {w.buffer.name for w in r.block.writes}
        reads = {rd.buffer.name for rd in r.block.reads} - written
        if r.block.init is not None and reads == {source}:
            out.append(r.block.name)
    return out


def _colocate_sums(sch: TracedSchedule, source: str, loop: LoopRef) -> None:
    """Sums of the packed operand alone computed under the loop its packing went under,
    reduction outside the columns: each iteration sums the columns it packs, from cache,
    where a separate pass would read the whole weight from memory again."""
    for name in _sums_of(sch.program, source):
        at = loop_name(loop)
        if not _computes_once(sch.program, name, at):
            continue
        b = sch.get_block(name)
        sch.compute_at(b, loop)
        mine = sch.get_loops(b)
        inner = mine[[loop_name(lp) for lp in mine].index(at) + 1 :]
        body = find_block(sch.program, name)
        role = {lp.var.name: loop_role(body, lp) for lp in loops_above(sch.program, name)}
        reduce = [lp for lp in inner if role[loop_name(lp)] == "reduce"]
        spatial = [lp for lp in inner if role[loop_name(lp)] != "reduce"]
        if reduce and spatial:
            sch.reorder(*reduce, *spatial)


def _sum_packed(
    sch: TracedSchedule, packed: _Packed, intrin: TensorIntrinsic, features: Sequence[str]
) -> None:
    """Sums of the packed operand read from its packed copy (`read_through`) and computed
    by the intrinsic's `pack_sum`, a packed row per instruction (vpdpbusd against ones: one
    instruction per 64 bytes where the plain sums sign-extend and add 16 bytes in two).
    Left as they are where that does not apply (the sums and the copy in different nests,
    shapes not in whole packed rows)."""
    colsum = INTRINSICS.get(intrin.pack_sum or "")
    if colsum is None or colsum.missing_features(features):
        return
    for name in _sums_of(sch.program, packed.source):
        try:
            _tensorize_sums(Schedule(sch.program), name, packed, colsum, features)
        except ScheduleError:
            continue
        _tensorize_sums(sch, sch.get_block(name), packed, colsum, features)


def _tensorize_sums(
    sch: Schedule | TracedSchedule,
    block: str | BlockRef,
    packed: _Packed,
    colsum: TensorIntrinsic,
    features: Sequence[str],
) -> None:
    """Read through the packed copy; the sums' innermost column and reduction loops split
    into a packed row's (columns, rows), those innermost; tensorized from the columns."""
    sch.read_through(block, packed.source, packed.buffer, packed.index_map)  # type: ignore[arg-type]
    name = block if isinstance(block, str) else block_name(block)
    r = find_block(sch.program, name)
    loops = sch.get_loops(block)  # type: ignore[arg-type]
    roles = [loop_role(r, lp) for lp in loops_above(sch.program, name)]
    spatial = [lp for lp, role in zip(loops, roles) if role == "spatial"]
    reduce = [lp for lp, role in zip(loops, roles) if role == "reduce"]
    if not spatial or not reduce:
        raise ScheduleError(f'block "{name}": not a column sum')
    columns, rows = colsum.extents
    c_out, c_in = sch.split(spatial[-1], [None, columns])  # type: ignore[arg-type]
    r_out, r_in = sch.split(reduce[-1], [None, rows])  # type: ignore[arg-type]
    sch.reorder(c_out, r_out, c_in, r_in)  # type: ignore[arg-type]
    sch.tensorize(sch.blockize(c_in), colsum.name, features=features)  # type: ignore[arg-type]


def _computes_once(program: Program, block: str, loop: str) -> bool:
    """Whether `block` may be computed at `loop` without repeating itself: every loop around
    it that repeats feeds its iteration variables (under a row-tile loop, the sums would
    be summed again for every row tile; the verify postprocessor rejects that)."""
    scratch = Schedule(program)
    try:
        scratch.compute_at(block, loop)
    except ScheduleError:
        return False
    r = find_block(scratch.program, block)
    return all(
        loop_role(r, lp) != "none"
        for lp in loops_above(scratch.program, block)
        if int(lp.extent.value) != 1  # type: ignore[attr-defined]
    )


def _leading(
    index_map: Callable[..., tuple], inverse: Callable[..., tuple], ndim: int
) -> tuple[Callable[..., tuple], Callable[..., tuple]]:
    """A [K, N] packing applied to the last two axes of an `ndim`-axis operand, the leading
    axes kept (conv2d_nhwc's weight [kh, kw, ci, co] packs as kh x kw [ci, co] matrices)."""
    if ndim == 2:
        return index_map, inverse
    lead = ndim - 2

    def fwd(*x: Expr) -> tuple:
        return (*x[:lead], *index_map(*x[lead:]))

    def inv(*y: Expr) -> tuple:
        return (*y[:lead], *inverse(*y[lead:]))

    return fwd, inv
