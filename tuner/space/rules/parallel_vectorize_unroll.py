"""Parallelize-vectorize-unroll: annotations on each top-level nest, turned into loops later.

Each top-level nest's first block gets
- `loomtune.parallel`: the largest extent of fused outer loops to run in
  parallel, threads x a sampled factor (0: stay serial; only with several threads);
- `loomtune.vectorize`: the widest vector loop (4 registers of float32; 0: none);
- `loomtune.unroll`: a sampled depth, the largest product of extents of
  inner loops to unroll (0: none).
The postprocessors read them (tuner/space/postprocs/). Annotating first and
rewriting loops afterwards is what keeps mutation simple: a new tile size or
unroll depth is re-planned by replaying the rules and rerunning the
postprocessors, never by editing loops that no longer exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.space.analysis import nest_subject, root_nests
from tuner.space.context import SpaceContext
from tuner.space.rules.base import PARALLEL, RULES, UNROLL, VECTORIZE, ScheduleRule
from tuner.trace.traced_schedule import TracedSchedule


@RULES.register("parallel-vectorize-unroll")
class ParallelVectorizeUnroll(ScheduleRule):
    scope = "root"

    def __init__(
        self,
        *,
        parallel_factors: Sequence[int] = (0, 1, 4, 16, 64),
        parallel_probabilities: Sequence[float] = (0.1, 0.225, 0.225, 0.225, 0.225),
        unroll_depths: Sequence[int] = (0, 16, 64),
        unroll_probabilities: Sequence[float] | None = None,
        vectorize: bool = True,
    ) -> None:
        self.parallel_factors = list(parallel_factors)
        self.parallel_probabilities = list(parallel_probabilities)
        self.unroll_depths = list(unroll_depths)
        self.unroll_probabilities = list(
            unroll_probabilities or [1 / len(self.unroll_depths)] * len(self.unroll_depths)
        )
        self.vectorize = vectorize

    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        for names in root_nests(sch.program):
            if not names:
                continue
            b = sch.get_block(names[0])
            nest = nest_subject(names)
            if ctx.threads > 1:
                extents = [ctx.threads * f for f in self.parallel_factors]
                sch.annotate(
                    b,
                    PARALLEL,
                    sch.sample_categorical(
                        extents, self.parallel_probabilities, subject=(PARALLEL, nest)
                    ),
                )
            sch.annotate(b, VECTORIZE, ctx.max_vector_extent if self.vectorize else 0)
            sch.annotate(
                b,
                UNROLL,
                sch.sample_categorical(
                    self.unroll_depths, self.unroll_probabilities, subject=(UNROLL, nest)
                ),
            )
