"""Multi-level tiling for CPUs ("SSRSRS"), with a local accumulator and a packed weight.

For a reduction block that reuses data (matmul, conv: some input is indexed
without some output axis), each spatial loop is split in four by sampled
covering tiles (perfect where the innermost divides the extent, else with a
guarded remainder: 1000 columns in 32-wide vector tiles, not 40-wide ones that
span 2.5 registers) and each reduction loop in two by sampled perfect tiles,
and the pieces are ordered

    S0 S1 R0 S2 R1 S3        e.g. matmul: i0 j0 | i1 j1 | k0 | i2 j2 | k1 | i3 j3

so S3 is a register tile (its last loop is vectorized, the others unrolled by
the postprocessors), S2 x R1 a cache tile, and S0 x S1 the outer, parallel
work. A sampled choice puts S0's column tile first (j0 i0 | ...), so each
column block of the weight is read (and packed) once for all row tiles. The
innermost factor of the last spatial loop (the vector axis) is at most 4
vector registers' worth; the others at most `max_innermost_factor` (16:
the accumulator budget below is the real bound; 12 rows x 32 columns is
AVX-512's best matmul tile); a reduction's inner factor at most
`max_reduce_factor` (256: the hand kernel's k-block, whose A strip fits L1).
Tiles are drawn so the register tile is at least one vector wide (where the
extent allows) and its accumulators fit the registers: a uniform draw over
divisors mostly gives tiles that spill or do not vectorize.

Then (each step as in docs/gemm.md):
- packing: a sampled choice rewrites the weight operand (the input read along
  the vector axis that misses another spatial axis, e.g. matmul's B[k, n])
  into column panels as wide as the innermost vector tile (`pack_panels`,
  whose width is the tile's random variable, so a mutated or repaired tile
  packs to its new width): the inner loop then streams one contiguous panel;
  the copy runs over the panels, one panel row per vector, and is computed
  up front or under an outer column-tile loop (a sampled location: there it
  packs the panels that tile reads, while they are in cache);
- a local accumulator: `cache_write`, so the reduction accumulates into a
  buffer that compaction shrinks to the tile (registers), written back once;
- element-wise consumers (dense's bias + relu) are folded into that write-back
  (`reverse_compute_inline`), so the intermediate disappears;
- where the write-back goes is sampled (`sample_loop`, so mutation and
  replay follow the decision): at the end of S0 or of S1 (tile
  levels 1 or 2; both lie outside every reduction loop, as
  `reverse_compute_at` requires). `decompose_reduction` comes later, in a
  postprocessor: `reverse_compute_at` refuses once a reduction is decomposed.

K-outer (a sampled choice where the inner reduction level cannot hold the whole
reduction): the order becomes S0 R0 S1 S2 R1 S3 (matmul: i0 j0 | k0 | i1 j1 |
i2 j2 | k1 | i3 j3), OpenBLAS's blocking: per k-block, the S1 x S2 block of the
output is swept with the weight's k-block (kc x nc, packable under k0) kept in
cache, instead of streaming the whole weight once per row strip. The output is
zeroed before the k-blocks (`decompose_reduction` at k0) and each register tile
is loaded from it, accumulated over one k-block and added back
(`accumulate_at` at S2's last loop), so the accumulators still live in registers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ir.expr import Buffer, Const, Var
from ir.node import walk
from ir.program import PREFETCH, BlockRealize, BufferStore, For, Program
from ir.schedule import Schedule, ScheduleError
from ir.schedule.analysis import readers
from ir.schedule.state import block_name, find_block, loop_name, loops_above
from tuner.space.analysis import (
    has_reuse,
    is_elementwise,
    is_legal,
    is_simple,
    loop_role,
    written_buffer,
)
from tuner.space.context import SpaceContext
from tuner.space.rules.base import RULES, ScheduleRule
from tuner.trace.sampling import cover_innermost_choices, sample_cover_tile, sample_perfect_tile
from tuner.trace.traced_schedule import BlockRef, IntRV, LoopRef, TracedSchedule

_DRAWS = 64
MIN_ACCUMULATORS = 8
"""Independent accumulators a register tile needs: an FMA's latency (4 cycles) times the
FMA pipes (2 on Zen 3 and Zen 4, where a 512-bit FMA takes both). Fewer wait on their own
chains; more are not needed to cover the latency."""
REGISTER_TILE_SHARE = 0.25
"""Share of draws whose cache tile is the register tile (the S levels inside the first R all
1): the accumulators then stay in registers over the whole reduction. A uniform draw gives
that 2% of the time for batch_matmul 16×64×64×96, where it is the fastest kind of kernel
(docs/decisions.md)."""


@RULES.register("multi-level-tiling")
class MultiLevelTiling(ScheduleRule):
    def __init__(
        self,
        *,
        structure: str = "SSRSRS",
        max_innermost_factor: int = 16,
        max_vector_factor: int | None = None,
        max_reduce_factor: int = 256,
        write_levels: Sequence[int] = (1, 2),
        pack_probability: float = 0.5,
        max_accumulators: int | None = None,
        prefetch_distances: Sequence[int] = (0, 2, 4, 8),
        prefetch_probabilities: Sequence[float] = (0.4, 0.2, 0.2, 0.2),
        k_outer_probability: float = 0.25,
        columns_first_probability: float = 0.25,
    ) -> None:
        if set(structure) != {"S", "R"}:
            raise ValueError(f"tiling structure {structure!r} must use both S and R levels")
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        self.max_vector_factor = max_vector_factor
        self.max_reduce_factor = max_reduce_factor
        self.write_levels = tuple(write_levels)
        self.pack_probability = pack_probability
        self.max_accumulators = max_accumulators
        if len(prefetch_distances) != len(prefetch_probabilities):
            raise ValueError("one probability per prefetch distance")
        self.prefetch_distances = list(prefetch_distances)
        self.prefetch_probabilities = list(prefetch_probabilities)
        self.k_outer_probability = k_outer_probability
        self.columns_first_probability = columns_first_probability

    @staticmethod
    def applies(program: Program, block: str) -> bool:
        """A naive reduction nest with data reuse, every loop purely spatial or reduction."""
        r = find_block(program, block)
        if (
            r.block.init is None
            or not isinstance(r.block.body, BufferStore)
            or written_buffer(r) is None
        ):
            return False
        if not is_simple(program, block) or not has_reuse(r):
            return False
        roles = [loop_role(r, lp) for lp in loops_above(program, block)]
        return "spatial" in roles and all(x in ("spatial", "reduce") for x in roles)

    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        if not self.applies(sch.program, block):
            return
        r = find_block(sch.program, block)
        roles = [loop_role(r, lp) for lp in loops_above(sch.program, block)]
        vector_axis = max(k for k, role in enumerate(roles) if role == "spatial")
        structure = self.structure
        fors = loops_above(sch.program, block)
        k_outer = self._maybe_k_outer(
            sch, [lp for lp, role in zip(fors, roles) if role == "reduce"]
        )
        if k_outer:
            structure = k_outer_structure(structure)
        s_levels, r_levels = structure.count("S"), structure.count("R")

        # 1. sampled tile sizes, one perfect tiling per loop
        b = sch.get_block(block)
        loops = sch.get_loops(b)
        shapes = [
            (
                int(lp.extent.value),
                s_levels if role == "spatial" else r_levels,
                self._bound(k, role, vector_axis, ctx),
            )  # type: ignore[attr-defined]
            for k, (lp, role) in enumerate(zip(fors, roles))
        ]
        drawn = self._draw(sch, shapes, roles, vector_axis, ctx, structure)
        tiles: list[list[IntRV]] = [
            sch.sample_perfect_tile(
                lp, n=n, max_innermost_factor=bound, decision=decision, cover=role == "spatial"
            )
            for lp, (_, n, bound), decision, role in zip(loops, shapes, drawn, roles)
        ]

        # 2. a sampled choice: pack the weight into panels as wide as the vector tile
        pack = self._maybe_pack(sch, b, r, vector_axis, tiles[vector_axis][-1])

        # 3. split and reorder S0 S1 R0 S2 R1 S3 (S0's column tile first, if so drawn)
        columns_first = self._maybe_columns_first(sch, r, fors, roles, vector_axis)
        parts = [sch.split(lp, f) for lp, f in zip(loops, tiles)]
        groups: list[tuple[str, list[LoopRef]]] = []
        seen = {"S": 0, "R": 0}
        for ch in structure:
            level = seen[ch]
            seen[ch] += 1
            groups.append(
                (
                    ch,
                    [
                        parts[k][level]
                        for k, role in enumerate(roles)
                        if (role == "spatial") == (ch == "S")
                    ],
                )
            )
        if columns_first:
            column = parts[vector_axis][0]
            groups[0] = ("S", [column, *(lp for lp in groups[0][1] if lp is not column)])
        order = [lp for _, g in groups for lp in g]
        if len(order) > 1:
            sch.reorder(*order)
        first_r = next(i for i, (ch, _) in enumerate(groups) if ch == "R")
        if pack is not None:
            outside = structure[: structure.index("R")].count("S")  # S levels outside every R
            under = list(parts[vector_axis][:outside])
            if k_outer:  # also under the k-block loop, packing one k-block of the panels
                under += groups[first_r][1][-1:]
            self._place_pack(sch, pack, under)
        else:
            self._maybe_prefetch(sch, r, vector_axis, [g for ch, g in groups if ch == "R"])

        if k_outer:
            self._accumulate_per_k_block(sch, b, groups, first_r)
            return

        # 4. the local accumulator, its write-back (with element-wise consumers folded in)
        output = written_buffer(r)
        assert output is not None
        try:
            writeback = sch.cache_write(b, 0, "local")
        except ScheduleError:
            return  # e.g. a consumer in the same nest: stay tiled without a cache
        self._fold_consumers(sch, output)
        outer = [g for ch, g in groups[:first_r] if ch == "S"]
        levels = [lv for lv in self.write_levels if 1 <= lv <= len(outer) and outer[lv - 1]]
        if not levels:
            return
        loops = [outer[lv - 1][-1] for lv in levels]
        # The loop itself is the sampled variable, so a changed decision moves the write-back.
        at = loops[0] if len(loops) == 1 else sch.sample_loop(loops, [1 / len(loops)] * len(loops))
        sch.reverse_compute_at(writeback, at)

    def _maybe_k_outer(self, sch: TracedSchedule, reduce_loops: Sequence[For]) -> bool:
        """A sampled choice: the outer reduction level goes outside the cache tiles (K-outer).

        Offered where the reduction is longer than `max_reduce_factor` (the bound on
        each inner reduction factor), so a matmul always has more than one k-block; a
        convolution's several reduction loops may still fit the inner level whole,
        and the draw then gives an outer level of one iteration.
        """
        p = self.k_outer_probability
        extents = [lp.extent for lp in reduce_loops]
        if p <= 0 or not all(isinstance(e, Const) for e in extents):
            return False
        if math.prod(int(e.value) for e in extents) <= self.max_reduce_factor:  # type: ignore[union-attr]
            return False
        return int(sch.sample_categorical([0, 1], [1 - p, p])) == 1

    def _maybe_columns_first(
        self,
        sch: TracedSchedule,
        r: BlockRealize,
        fors: Sequence[For],
        roles: Sequence[str],
        vector_axis: int,
    ) -> bool:
        """A sampled choice: the outermost level walks the weight's column tiles first.

        With few rows (dense and BERT's matmuls, M = 128) the weight is the large
        operand; rows first, each row tile streams all of it from memory, or packs all
        of it up front and reads the packed copy back per row tile. Columns first,
        each column block of the weight is read once (packed under its loop while in
        cache) and every row tile uses it, as OpenBLAS's outer jc loop does. Offered
        where the block reads a weight and a spatial axis before the column axis has
        more than one iteration.
        """
        p = self.columns_first_probability
        rows = [
            int(lp.extent.value)  # type: ignore[attr-defined]
            for k, (lp, role) in enumerate(zip(fors, roles))
            if role == "spatial" and k < vector_axis
        ]
        if p <= 0 or max(rows, default=1) <= 1 or _weight(sch.program, r, vector_axis) is None:
            return False
        return int(sch.sample_categorical([0, 1], [1 - p, p])) == 1

    @staticmethod
    def _accumulate_per_k_block(
        sch: TracedSchedule,
        block: BlockRef,
        groups: Sequence[tuple[str, Sequence[LoopRef]]],
        first_r: int,
    ) -> None:
        """K-outer: zero the outer tile of the output before its k-blocks, then let each
        register tile start from the output and add its k-block back (`accumulate_at` at
        the innermost spatial loop outside the inner reduction level), as OpenBLAS's
        micro-kernel does. Element-wise consumers stay nests of their own: the output is
        complete only after the last k-block."""
        outer_k = groups[first_r][1]
        last_r = max(i for i, (ch, _) in enumerate(groups) if ch == "R")
        tile = [lp for ch, g in groups[first_r + 1 : last_r] if ch == "S" for lp in g]
        if not outer_k or not tile:
            return
        sch.decompose_reduction(block, outer_k[0])
        sch.accumulate_at(block, tile[-1])

    def _bound(self, k: int, role: str, vector_axis: int, ctx: SpaceContext) -> int:
        if role != "spatial":
            return self.max_reduce_factor
        if k == vector_axis:
            return self.max_vector_factor or ctx.max_vector_extent
        return self.max_innermost_factor

    def _draw(
        self,
        sch: TracedSchedule,
        shapes: list[tuple[int, int, int]],
        roles: list[str],
        vector_axis: int,
        ctx: SpaceContext,
        structure: str,
    ) -> list[list[int] | None]:
        """Perfect tiles whose innermost (register) tile is worth vectorizing and fits the registers.

        Drawn like `sample_perfect_tile` and redrawn (up to `_DRAWS` times) while the
        vector tile is narrower than a register (when the extent allows one) or the
        accumulators need more than `max_accumulators` registers (default: 12 of the
        16 AVX2 registers, 24 of AVX-512's 32) or, where the shape allows, fewer than
        `MIN_ACCUMULATORS` or a vector tile that is not whole registers (a 12-wide
        tile is a register and a half). In a `REGISTER_TILE_SHARE` of the calls the
        cache tile is folded into the level outside it (`_fold_into`). What is drawn is
        recorded as the decisions of ordinary `sample_perfect_tile` instructions, so mutation and
        replay see no difference; mutation may still leave these bounds.
        """
        if sch.rng is None:
            return [None] * len(shapes)
        lanes = ctx.lanes
        budget = self.max_accumulators or (24 if lanes >= 16 else 12)
        outside = structure[: structure.index("R")].count("S")
        in_registers = outside > 0 and sch.rng.random() < REGISTER_TILE_SHARE
        extent, _, bound = shapes[vector_axis]
        wide = [d for d in cover_innermost_choices(extent, bound) if lanes <= d]
        drawn: list[list[int]] = []
        fallback: list[list[int]] | None = None
        for _ in range(_DRAWS):
            drawn = [
                (sample_cover_tile if role == "spatial" else sample_perfect_tile)(
                    sch.rng, ext, n, bnd
                )
                for (ext, n, bnd), role in zip(shapes, roles)
            ]
            if in_registers:
                drawn = [
                    _fold_into(t, outside - 1) if role == "spatial" else t
                    for t, role in zip(drawn, roles)
                ]
            vector = drawn[vector_axis][-1]
            registers = (
                -(-vector // lanes)
                * math.prod(t[-1] for t, role in zip(drawn, roles) if role == "spatial")
                // vector
            )
            if (not wide or vector >= lanes) and registers <= budget:
                if registers >= min(MIN_ACCUMULATORS, budget) and vector % lanes == 0:
                    return list(drawn)
                fallback = fallback or list(drawn)
        return fallback or list(drawn)

    def _maybe_pack(
        self, sch: TracedSchedule, block: BlockRef, r: BlockRealize, axis: int, width: IntRV
    ) -> BlockRef | None:
        weight = _weight(sch.program, r, axis)
        if weight is None or not 1 < width < weight.concrete_shape()[-1]:
            return None
        p = self.pack_probability
        if p <= 0 or int(sch.sample_categorical([0, 1], [1 - p, p])) == 0:
            return None
        return sch.pack_panels(block, weight.name, width)  # width: the tile's RV, not a literal

    def _maybe_prefetch(
        self,
        sch: TracedSchedule,
        r: BlockRealize,
        axis: int,
        levels: Sequence[Sequence[LoopRef]],
    ) -> None:
        """A sampled software prefetch of the unpacked weight's rows a few steps of the
        innermost reduction loop ahead (`codegen.prefetch`; distance 0: none).

        The register tile reads a short row of the weight per step, a row length
        apart; off a cache line, a row of one or two vectors spans one line more, and
        the hardware prefetchers do not cover it (docs/decisions.md). Every
        reduction level's innermost loop is marked with the one sampled distance:
        which of them is the innermost loop left depends on tile sizes that mutation
        changes (a tile of 1 leaves a loop of one iteration), and codegen prefetches in the
        innermost marked loop only.
        """
        weight = _weight(sch.program, r, axis)
        loops = [level[-1] for level in levels if level]
        if weight is None or not loops or self.prefetch_distances == [0]:
            return
        distance = sch.sample_categorical(self.prefetch_distances, self.prefetch_probabilities)
        for loop in loops:
            sch.annotate(loop, f"{PREFETCH}{weight.name}", distance)

    @staticmethod
    def _place_pack(sch: TracedSchedule, pack: BlockRef, loops: Sequence[LoopRef]) -> None:
        """Where the panels are packed: up front (the root), or under an outer column-tile loop.

        Under the loop, each iteration packs the panels its tile reads, just before
        reading them (from cache, where the whole weight would have gone to memory and
        back), at the cost of packing again for each iteration of the loops around
        it. A sampled location (`sample_compute_location`), so the compute-location
        mutator may move it anywhere legal later; here one of the root and `loops`,
        uniformly, among the legal ones.
        """
        name = block_name(pack)
        candidates = sch.compute_location_candidates(pack)
        names = [loop_name(lp) for lp in loops]
        options = [-1] + [
            candidates.index(at)
            for at in names
            if at in candidates and is_legal(sch.program, lambda s, at=at: s.compute_at(name, at))
        ]
        # Without an rng (a forced derivation) the recorded decision decides, as in `_draw`.
        decision = sch.rng.choice(options) if sch.rng is not None else None
        sch.compute_at(pack, sch.sample_compute_location(pack, decision=decision))

    @staticmethod
    def _fold_consumers(sch: TracedSchedule, buffer: str) -> None:
        """Element-wise consumers of the old output become part of the write-back (dense + relu)."""
        for c in readers(sch.program, buffer):
            if not is_elementwise(c):
                continue
            try:
                Schedule(sch.program).reverse_compute_inline(c.block.name)
            except ScheduleError:
                continue
            sch.reverse_compute_inline(sch.get_block(c.block.name))


def k_outer_structure(structure: str) -> str:
    """The structure with its first R level moved right after the first S level:
    SSRSRS -> SRSSRS (matmul: i0 j0 | k0 | i1 j1 | i2 j2 | k1 | i3 j3)."""
    r = structure.index("R")
    return structure[:1] + "R" + structure[1:r] + structure[r + 1 :]


def _weight(program: Program, r: BlockRealize, axis: int) -> Buffer | None:
    """The input read along the vector axis that misses another spatial axis (matmul's
    B[k, n], a convolution's weight): the operand every row of the tile reads again."""
    iv = r.block.iter_vars[axis].var
    spatial = {x.var for x in r.block.iter_vars if x.kind == "spatial"}
    inputs = {b.name for b in program.inputs}
    for rd in r.block.reads:
        shape = rd.buffer.concrete_shape()
        if rd.buffer.name not in inputs or len(shape) < 2 or rd.region[-1].min != iv:
            continue
        used = {n for rng in rd.region for n in walk(rng.min) if isinstance(n, Var)}
        if spatial - used:
            return rd.buffer
    return None


def _fold_into(tile: list[int], level: int) -> list[int]:
    """`tile` with its levels from `level` to the innermost (excluded) multiplied into
    `level`: the same product, the cache tile between them 1."""
    return [*tile[:level], math.prod(tile[level:-1]), *[1] * (len(tile) - level - 2), tile[-1]]
