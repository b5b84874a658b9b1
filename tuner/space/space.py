"""`RuleSpace`: the design space built from schedule rules, postprocessors and mutators.

A sample is made in two parts, recorded on one `TracedSchedule`:

    [rule part]     the rules, block by block (consumers first), then the root
                    rules: tiling, inlining, compute locations, and annotations
                    (`loomtune.parallel`, `loomtune.vectorize`, `loomtune.unroll`)
                    with every sampled decision;
    [marker]        get_block(<first block>); annotate(..., "loomtune.postprocs",
                    "<postprocessor names>") - a no-op for codegen;
    [postproc part] the postprocessors: annotations turned into parallel,
                    vectorized and unrolled loops, reductions decomposed, checks.

The whole trace is complete: `Trace.apply(program)` gives exactly the program
to compile, and it is what the database stores and `loomtune apply` replays.

Mutation stays correct because the postprocessor part is never edited. The
marker tells where the rule part ends (`rule_part`); a mutator changes
decisions there only (a tile size, an unroll depth, a parallel extent, a
compute location); the space replays that rule part strictly on the naive
program and reruns the postprocessors, which are deterministic functions of
the program. A tile size that changes which loops exist therefore changes the
fused parallel loop, the vectorized loop and the decomposed init consistently,
and a mutated trace is as complete as a fresh sample. The postprocessors rerun
are this space's own (the marker's value names those that made the trace, for
the reader). A trace without the marker (hand-written, or from a space without
it) cannot be mutated: `mutate` returns None.

Choices that change the trace's structure (pack a weight or not, rfactor or
not) are sampled categoricals that decide in the rule's Python code, so no
recorded instruction takes their value and replaying a changed decision would
change nothing. A mutator that changes one (`structure`) asks for the rule
part to be *re-derived* (`rederive`): the rules run again on the naive
program, each sampling call taking the old decisions in order (repaired where
they no longer fit) until the derivation takes another path, after which the
rest is sampled. (Where a write-back goes is a `sample_loop`, which replay
follows directly.)
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from ir.program import Program
from ir.schedule import ScheduleError
from ir.schedule.state import all_blocks
from ir.target import Target
from tuner.space.analysis import nest_subject, root_nests
from tuner.space.base import SpaceRejected
from tuner.space.context import SpaceContext
from tuner.space.mutators import DEFAULT_MUTATORS, MUTATORS, Mutator
from tuner.space.mutators.base import structural_categoricals
from tuner.space.postprocs import DEFAULT_POSTPROCS, POSTPROCS, Postproc
from tuner.space.rules import DEFAULT_RULES, RULES, ScheduleRule
from tuner.space.rules.base import PARALLEL, UNROLL, VECTORIZE
from tuner.trace.errors import TraceError
from tuner.trace.forced import signature
from tuner.trace.instruction import RV
from tuner.trace.trace import Trace
from tuner.trace.traced_schedule import TracedSchedule

MARKER = "loomtune.postprocs"
"""The block annotation that separates a trace's rule part from its postprocessor part."""


class RuleSpace:
    """A `DesignSpace` (tuner/space/base.py) over one program, for one target."""

    def __init__(
        self,
        program: Program,
        target: Target,
        *,
        rules: Sequence[str | ScheduleRule] = DEFAULT_RULES,
        postprocs: Sequence[str | Postproc] = DEFAULT_POSTPROCS,
        mutators: Mapping[str | Mutator, float] = DEFAULT_MUTATORS,
        mutate_tries: int = 8,
    ) -> None:
        self.program = program
        self.target = target
        self.context = SpaceContext(program, target)
        self.rules = [RULES.create(r) if isinstance(r, str) else r for r in rules]
        self.postprocs = [POSTPROCS.create(p) if isinstance(p, str) else p for p in postprocs]
        self.mutators = [
            (MUTATORS.create(m) if isinstance(m, str) else m, float(w)) for m, w in mutators.items()
        ]
        self.mutate_tries = mutate_tries
        self._programs: OrderedDict[str, Program] = OrderedDict()

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the programs it built (the search ships spaces to its processes)."""
        state = dict(self.__dict__)
        state["_programs"] = OrderedDict()
        return state

    # -- the DesignSpace contract ----------------------------------------------------

    def sample(self, rng: random.Random) -> Trace:
        return self.sample_schedule(rng).trace

    def sample_schedule(self, rng: random.Random) -> TracedSchedule:
        """`sample`, keeping the schedule (its program is what the trace replays to)."""
        sch = TracedSchedule(self.program, rng=rng)
        try:
            self.apply_rules(sch)
        except (ScheduleError, TraceError) as e:
            raise SpaceRejected(f"a rule was refused: {e}") from None
        self.finish(sch)
        return sch

    def mutate(self, trace: Trace, rng: random.Random) -> Trace | None:
        """A complete neighbour of `trace`; None when no mutator can change it, or when
        `mutate_tries` changed candidates were all illegal."""
        rules = self.rule_part(trace)
        if rules is None:
            return None
        pool = [(m, w) for m, w in self.mutators if w > 0]
        for _ in range(self.mutate_tries):
            if not pool:
                return None
            mutator = rng.choices([m for m, _ in pool], weights=[w for _, w in pool], k=1)[0]
            changed = mutator.apply(rules, rng, self.context)
            if changed is None:
                pool = [(m, w) for m, w in pool if m is not mutator]
                continue
            try:
                if mutator.rederives:
                    return self.rederive(changed, rng, source=rules)
                return self.complete(changed, rederive_rng=rng, source=rules)
            except SpaceRejected:
                continue
        return None

    # -- the parts -----------------------------------------------------------------------

    def apply_rules(self, sch: TracedSchedule) -> None:
        """Block rules on every block (consumers first, in the order given), then root rules."""
        names = [r.block.name for r in all_blocks(sch.program)]
        block_rules = [r for r in self.rules if r.scope == "block"]
        for name in reversed(names):
            for rule in block_rules:
                if name not in {r.block.name for r in all_blocks(sch.program)}:
                    break  # inlined by an earlier rule
                rule.apply(sch, name, self.context)
        for rule in self.rules:
            if rule.scope == "root":
                rule.apply(sch, None, self.context)

    def finish(self, sch: TracedSchedule) -> Trace:
        """Mark the end of the rule part and run the postprocessors: a complete trace."""
        try:
            first = all_blocks(sch.program)[0].block.name
            sch.annotate(sch.get_block(first), MARKER, ",".join(p.name for p in self.postprocs))
            for p in self.postprocs:
                p.apply(sch, self.context)
        except (ScheduleError, TraceError) as e:
            raise SpaceRejected(f"a postprocessor was refused: {e}") from None
        trace = sch.trace
        self._programs[trace.hash] = sch.program
        while len(self._programs) > PROGRAM_CACHE:
            self._programs.popitem(last=False)
        return trace

    def scheduled_program(self, trace: Trace) -> Program | None:
        """The program a recently sampled or mutated trace replays to, without replaying it.

        The search scores every candidate by the features of its program; the
        space has just built that program, so it keeps the last few.
        """
        return self._programs.get(trace.hash)

    def complete(
        self,
        rules: Trace,
        rederive_rng: random.Random | None = None,
        source: Trace | None = None,
    ) -> Trace:
        """Replay a rule part (every decision given) and postprocess it.

        With `rederive_rng`, a rule part that replays but whose root nests are no longer
        the ones the rules annotated is re-derived instead (`rederive`, with `source`):
        moving a block can add or remove a nest, and a replayed mutant left the new nest
        without its vectorize and unroll annotations, which stalled the search on such
        programs.
        """
        try:
            sch = rules.apply(self.program)
        except (ScheduleError, TraceError) as e:
            raise SpaceRejected(str(e)) from None
        if rederive_rng is not None and not nests_annotated(sch.program, rules):
            return self.rederive(rules, rederive_rng, source=source)
        return self.finish(sch)

    def rederive(self, rules: Trace, rng: random.Random, source: Trace | None = None) -> Trace:
        """Run the rules again taking the decisions of a rule part in order: a complete trace.

        Unlike `complete`, which replays the recorded instructions, this follows a
        changed structural choice (the rules decide which instructions come after
        it) and fits another shape's decisions to this program (each repaired where
        it no longer fits). Decisions past the point where the derivation differs
        are sampled from `rng`. A root annotation's decision (parallel extent, unroll
        depth) goes to the nest it was for, found in the program `source` makes: the rule
        part `rules` was changed from (its changed decision may have moved a block to a
        nest of its own, so `rules` itself no longer tells), or `rules`.
        """
        same = source is not None and source.instructions == rules.instructions
        subjects = self.nest_subjects(source if same else rules)  # type: ignore[arg-type]
        forced = [
            (signature(inst), rules.decisions.get(i), subjects.get(i))
            for i, inst in enumerate(rules.instructions)
            if inst.is_sampling
        ]
        sch = TracedSchedule(self.program, rng=rng, repair=True, forced=forced)
        try:
            self.apply_rules(sch)
        except (ScheduleError, TraceError) as e:
            raise SpaceRejected(f"a rule was refused: {e}") from None
        return self.finish(sch)

    def nest_subjects(self, rules: Trace) -> dict[int, tuple[str, str]]:
        """The categoricals of a rule part that a root annotation (parallel extent, unroll
        depth) takes, by (key, the nest's subject) in the program the rule part makes:
        re-derived, a nest keeps its own even where another nest comes before it (a
        packed weight moved to a nest of its own). Empty where the part does not replay."""
        try:
            program = rules.apply(self.program, rng=random.Random(0), repair=True).program
        except (ScheduleError, TraceError, RecursionError):
            return {}
        nest_of = {name: nest_subject(names) for names in root_nests(program) for name in names}
        blocks: dict[str, str] = {}
        made_by = {out: i for i, inst in enumerate(rules.instructions) for out in inst.outputs}
        out: dict[int, tuple[str, str]] = {}
        for inst in rules.instructions:
            if inst.kind == "get_block":
                blocks[inst.outputs[0]] = inst.attr("name")
            elif inst.kind == "annotate" and inst.attr("key") in (PARALLEL, UNROLL):
                block, value = inst.inputs[0], inst.inputs[1]
                if isinstance(block, RV) and isinstance(value, RV):
                    name = blocks.get(block.name)
                    if name in nest_of and value.name in made_by:
                        out[made_by[value.name]] = (inst.attr("key"), nest_of[name])
        return out

    def variants(self, trace: Trace, rng: random.Random) -> list[Trace]:
        """`trace` with one structural choice changed, for each choice and each other value.

        Reuse across shapes measures these beside another shape's best: whether to
        pack a weight often differs between shapes (a power-of-two row stride
        thrashes the cache, its neighbours do not), and the tuner's evolution
        changes such a choice only rarely.
        """
        rules = self.rule_part(trace)
        if rules is None:
            return []
        out = []
        for i in structural_categoricals(rules):
            for value in range(len(rules.instructions[i].attr("candidates"))):
                if value == rules.decisions.get(i):
                    continue
                try:
                    out.append(self.rederive(rules.with_decision(i, value), rng, source=rules))
                except SpaceRejected:
                    continue
        return out

    def structure(self, trace: Trace) -> tuple[object, ...] | None:
        """The trace's structural choices (`variants` changes one of them), in order: two
        traces with the same structure differ only in tiles and annotations. None without
        a rule part."""
        rules = self.rule_part(trace)
        if rules is None:
            return None
        return tuple(rules.decisions.get(i) for i in structural_categoricals(rules))

    @staticmethod
    def rule_part(trace: Trace) -> Trace | None:
        """The instructions (and decisions) before the marker; None when there is no marker."""
        for i, inst in enumerate(trace.instructions):
            if inst.kind == "annotate" and inst.attr("key") == MARKER:
                start = i
                handle = inst.inputs[0]
                before = trace.instructions[i - 1] if i else None
                if (
                    isinstance(handle, RV)
                    and before is not None
                    and before.kind == "get_block"
                    and before.outputs == (handle.name,)
                ):
                    start = i - 1
                return Trace(
                    trace.instructions[:start],
                    {k: v for k, v in trace.decisions.items() if k < start},
                )
        return None


def nests_annotated(program: Program, rules: Trace) -> bool:
    """Whether the blocks a rule part annotates with `loomtune.vectorize` are the heads of
    `program`'s root nests (true of every derivation: parallel-vectorize-unroll annotates
    each root nest's first block; a rule part without such annotations passes)."""
    block_of = {i.outputs[0]: i.attr("name") for i in rules.instructions if i.kind == "get_block"}
    annotated = {
        block_of.get(i.inputs[0].name)
        for i in rules.instructions
        if i.kind == "annotate" and i.attr("key") == VECTORIZE and isinstance(i.inputs[0], RV)
    }
    if not annotated:
        return True
    return annotated == {names[0] for names in root_nests(program) if names}


PROGRAM_CACHE = 1024
"""Scheduled programs kept by a space (`scheduled_program`), newest last."""


def default_space(program: Program, target: Target, **options: object) -> RuleSpace:
    """The design space the tuner samples: the default rules, postprocessors and mutators.

    `options` are RuleSpace's keywords (`rules=`, `postprocs=`, `mutators=`, `mutate_tries=`).
    """
    return RuleSpace(program, target, **options)  # type: ignore[arg-type]
