"""Evolutionary search guided by the cost model: the default strategy.

Each proposal round:

1. the population starts from the best traces already measured for this
   workload (the database's top records and this run's results) and fresh
   samples of the design space;
2. for `generations` rounds, parents are drawn with probability rising with
   their predicted score and mutated (`DesignSpace.mutate`); the best-scored
   `population` of parents and children survive;
3. the batch is the model's top picks among everything seen that was never
   measured nor proposed (de-duplicated by trace hash, across runs), with an
   `epsilon` share of fresh random samples so the model keeps learning about
   parts of the space it rates badly, and (once each) the best measured
   trace's structural variants, so a run does not stall on one side of a
   choice such as packing.

While there are fewer than `early_samples` results of the workload (and no
other shape's best to start from) there is no evolution: smaller batches of
the model's top picks among many fresh samples (`_propose_early`).

A workload's records at other thread counts of the same CPU seed it too, their
parallel extents re-chosen for this count (`_rethreaded`).

Results train the model (`observe`), which is saved to the database for the
target. The model is warm-started from the target's stored records of this
and other workloads; under the task scheduler the tasks' searches share one
(`SearchContext.cost_model`). The other shapes' bests are looked up again
before each batch: tuned beside this one (by the scheduler, or by another job
on the database), they improve during the run. All randomness comes from one
`random.Random(seed)` (and a seeded, single-threaded XGBoost), so a seeded
search proposes the same traces in any process.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ir.errors import LoomtuneError
from ir.library import OPS
from ir.node import walk
from ir.program import For, Program
from ir.serialize import structural_hash
from ir.target import Target, TargetError
from ir.task import Task, custom_task, library_task
from tuner.cost_model.features import program_features
from tuner.cost_model.model import DEFAULT_OBJECTIVE, XGBCostModel
from tuner.database import TuningRecord
from tuner.runner import MeasureResult
from tuner.search.pool import REJECTED, Job, SearchPool, trace_features
from tuner.search.strategy import SearchContext, register_strategy
from tuner.space.base import SpaceRejected
from tuner.space.mutators.base import annotated_categoricals
from tuner.space.rules.base import PARALLEL
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace


@dataclass(frozen=True)
class EvolutionaryConfig:
    """Hyper-parameters of the evolutionary search (defaults sized for Python on a few cores).

    Attributes:
        population: traces kept per generation.
        generations: rounds of mutation and selection per proposal.
        init_measured: best measured traces that seed each population.
        epsilon: share of each batch given to fresh random samples.
        objective: the cost model's objective ("regression" or "rank").
        min_samples: results before the model is trusted (random scores before).
        warm_start_records: stored records of the target the model learns from at the start.
        other_shapes: best traces of the same operator at other parameters
            (repaired to this shape) that join the first population.
        other_threads: this workload's fastest records at the nearest other thread count
            on the same CPU (the finalists' choice first) that join the first population,
            and the best at each farther count, each re-derived for this thread count
            with every parallel extent (`_rethreaded`): the target string includes the
            thread count, so without them a new thread count starts from nothing.
        runner_ups: further traces of the nearest other shape that join them: the
            fastest record of each structure other than its best's first (pack a
            weight or not: the best choice often differs between shapes), then its
            next best. The best there is not always the best here.
        best_variants: most traces per batch that are the best measured trace with
            one structural choice changed (`_variants_of_best`).
        early_batch: most traces per batch while the workload has fewer than
            `early_samples` results (`_propose_early`).
        early_pool: fresh samples the model picks the first early batch from; later early
            batches pick from what the earlier ones left (at most `early_pool`) and
            `early_refill` new samples.
        early_refill: fresh samples added to that pool per early batch after the first.
        early_samples: results of this workload (stored or measured by this search) after
            which it evolves full batches; a search seeded from other shapes evolves at once.
        processes: processes that make and featurize children
            (`tuner.search.pool`; default: the usable cores).
    """

    population: int = 48
    generations: int = 2
    init_measured: int = 16
    epsilon: float = 0.125
    objective: str = DEFAULT_OBJECTIVE
    min_samples: int = 16
    warm_start_records: int = 256
    other_shapes: int = 8
    other_threads: int = 4
    runner_ups: int = 3
    best_variants: int = 2
    early_batch: int = 8
    early_pool: int = 128
    early_refill: int = 32
    early_samples: int = 64
    processes: int | None = None


RUNNER_UP_POOL = 64
"""Records of the nearest other shape searched for runner-ups of other structures."""


def _task_of(record: TuningRecord) -> Task:
    if record.op in OPS:
        try:
            return library_task(record.op, record.params)
        except LoomtuneError:
            pass
    return custom_task(record.definition, record.params)


def shape_distance(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    """How far apart two parameter sets of one operator are: the summed |log ratio| of
    their values (1024 is nearer 1000 than 512 is); another set of names is farthest."""
    if set(a) != set(b):
        return math.inf
    return sum(abs(math.log(max(a[k], 1) / max(b[k], 1))) for k in a)


class EvolutionaryStrategy:
    def __init__(
        self, context: SearchContext, seed: int, config: EvolutionaryConfig | None = None
    ) -> None:
        self.context = context
        self.config = config or EvolutionaryConfig()
        self.rng = random.Random(seed)
        shared = context.cost_model
        self.model = (
            shared
            if shared is not None
            else XGBCostModel(
                objective=self.config.objective, seed=seed, min_samples=self.config.min_samples
            )
        )
        self.proposed: set[str] = set()
        self._expanded: set[str] = set()  # best traces whose structural variants were queued
        self._early_left: list[Trace] = []  # an early batch's candidates not proposed
        self._variants: list[Trace] = []
        self.measured: dict[str, tuple[Trace, float]] = {}  # hash -> (trace, latency) of ok results
        self._features: dict[str, np.ndarray | None] = {}
        self.pool = SearchPool(context.space, context.task.program, self.config.processes)
        # Results of this workload known (stored, then observed): the early batches last
        # until there are `early_samples`, however many a shared model has of other tasks.
        self._own_results = len(
            context.database.top_k(context.task.key, context.target, self.config.early_samples)
        )
        self._warm_start()

    def _other_bests(self) -> list[TuningRecord]:
        """The best record of each other shape of the operator on the target, nearest shape first."""
        c = self.context
        others = c.database.best_of_op(
            c.task.op, c.target, exclude_workload_key=c.task.key, limit=self.config.other_shapes
        )
        return sorted(others, key=lambda r: shape_distance(r.params, c.task.params))

    def _other_thread_counts(self) -> list[TuningRecord]:
        """This workload's records at other thread counts of this CPU: the `other_threads`
        fastest at the nearest count (the finalists' choice first), then the best of each
        farther count."""
        c, k = self.context, self.config.other_threads
        out: list[TuningRecord] = []
        if k <= 0:
            return out
        for i, target in enumerate(c.database.other_thread_counts(c.task.key, c.target)):
            best = c.database.best(c.task.key, target)
            top = c.database.top_k(c.task.key, target, k) if i == 0 else []
            picked = [best] if best is not None else []
            picked += [r for r in top if best is None or r.record_id != best.record_id]
            out += picked[: k if i == 0 else 1]
        return out

    def _other_shapes(self) -> list[tuple[TuningRecord, bool]]:
        """What a new shape starts from, each with whether its structural variants come too:
        the best record of each other shape of the operator, nearest shape first, then the
        runner-ups of the nearest one (`_runner_ups`, without variants)."""
        c = self.context
        others = self._other_bests()
        picked = [(r, True) for r in others]
        if others and self.config.runner_ups > 0:
            nearest = others[0]
            top = c.database.top_k(nearest.workload_key, c.target, RUNNER_UP_POOL)
            picked += [(r, False) for r in self._runner_ups(nearest, top, self.config.runner_ups)]
        return picked

    def _runner_ups(
        self, best: TuningRecord, records: Sequence[TuningRecord], n: int
    ) -> list[TuningRecord]:
        """n of `records` (fastest first) besides `best`: the fastest of each structure that
        has none picked yet (best's counts), then the fastest of the rest.

        A structural variant of the best keeps its tiles, which may suit only its own
        structure, so the other structure's own fastest record is the better start for it.
        """
        structure = getattr(self.context.space, "structure", None)

        def key(r: TuningRecord) -> object:
            try:
                return structure(Trace.from_json(r.trace)) if structure is not None else None
            except TraceError:
                return None

        rest = [r for r in records if r.record_id != best.record_id]
        seen = {key(best)}
        first: list[TuningRecord] = []
        for r in rest:
            k = key(r)
            if k not in seen:
                seen.add(k)
                first.append(r)
        ids = {r.record_id for r in first}
        return (first + [r for r in rest if r.record_id not in ids])[:n]

    def _add_seeds(self, sources: Sequence[tuple[TuningRecord, bool]]) -> None:
        """Each source record not used before, repaired to this shape, joins the seeds."""
        for r, variants in sources:
            if r.record_id not in self._seed_sources:
                self._seed_sources.add(r.record_id)
                self._queue_seeds(self._repaired(r, variants))

    def _add_thread_seeds(self, records: Sequence[TuningRecord]) -> None:
        """Records of other thread counts (`_other_thread_counts`) re-derived here join the
        seeds: each one's best balanced trace, then the first record's other parallel
        extents (the runner-ups' tiles are as likely to win as the best's other extents)."""
        derived = []
        for r in records:
            if r.record_id not in self._seed_sources:
                self._seed_sources.add(r.record_id)
                derived.append(self._repaired(r, variants=False))
        self._queue_seeds(
            [ts[0] for ts in derived if ts] + [t for ts in derived[:1] for t in ts[1:]]
        )

    def _queue_seeds(self, traces: Sequence[Trace]) -> None:
        known = {s.hash for s in self.seeds}
        for t in traces:
            if t.hash not in known:
                known.add(t.hash)
                self.seeds.append(t)

    def _refresh_seeds(self) -> None:
        """Other shapes' bests that appeared since the last batch join the seeds.

        Other shapes are tuned beside this one under the task scheduler (the layers of one
        model often share an operator: matmul 512³ and 1024³ in the benchmark suite) and in
        concurrent jobs on one database, so their best keeps improving during this run;
        each new best is repaired once, with its structural variants.
        """
        self._add_seeds([(r, True) for r in self._other_bests()])

    def _repaired(self, record: TuningRecord, variants: bool = True) -> list[Trace]:
        """Another shape's (or thread count's) trace made to fit this program, and its
        structural variants.

        A rule-based space re-derives the rule part on this program (the rules run
        again taking the old decisions, repaired where they no longer fit) and adds
        the variants with one structural choice changed (`RuleSpace.variants`: pack
        or not, rfactor or not), because the best choice often differs between
        shapes. A record of another thread count is re-derived with each parallel extent
        (`_rethreaded`). Any other trace is replayed whole with repair.
        """
        space = self.context.space
        try:
            trace = Trace.from_json(record.trace)
            rule_part = getattr(space, "rule_part", None)
            rules = rule_part(trace) if rule_part is not None else None
            if rules is None or not hasattr(space, "rederive"):
                return [trace.apply(self.context.task.program, repair=True, rng=self.rng).trace]
            fitted = space.rederive(rules, self.rng)
            if record.target != self.context.target:
                rethreaded = self._rethreaded(rules, fitted)
                if not variants:
                    return rethreaded
                fitted = rethreaded[0]
        except (*REJECTED, RecursionError):
            return []
        if not variants:
            return [fitted]
        try:
            return [fitted, *space.variants(fitted, self.rng)]
        except (*REJECTED, RecursionError):
            return [fitted]

    def _rethreaded(self, source: Trace, fitted: Trace) -> list[Trace]:
        """A rule part of another thread count (`source`), re-derived here (`fitted`), with
        each parallel extent: one trace per distinct program, the best balanced first
        (`parallel_balance`; only the first when none has a parallel loop).

        Re-deriving keeps the tiles and structure (the block rules decide before the
        root rule) and each nest's unroll depth (`RuleSpace.rederive` gives a root
        annotation's decision to its nest); the parallel extent, which the source
        chose for its own thread count or not at all, is tried at each value: a
        1-thread best often has only a few outer tiles, and which fused extent splits
        them evenly over this count is what varies.

        Where no extent gives a parallel loop, the blocks placed by a compute location
        (a conv's padding, a packed weight) are tried at the root: placed under an outer
        tile loop they do not depend on, they are redone for each of its iterations,
        so no outer loop can be parallel.
        """
        space = self.context.space
        rules = space.rule_part(fitted)
        if rules is None:
            return [fitted]
        if not annotated_categoricals(rules, PARALLEL):  # one thread: nothing to choose
            return [space.complete(rules)]
        ranked = self._parallel_extents(rules)
        if not ranked:
            raise SpaceRejected("no parallel extent of the re-derived trace lowers")
        if ranked[0][0] < 0:
            return [t for b, _, t in ranked if b < 0]
        for moved in self._at_root(rules):
            found = [t for b, _, t in self._parallel_extents(moved) if b < 0]
            if found:
                return found
        return [ranked[0][2]]

    def _parallel_extents(self, rules: Trace) -> list[tuple[float, int, Trace]]:
        """`rules` completed with each value of its parallel annotations (all nests alike),
        one per distinct program: (-balance, value, trace), the best balanced first."""
        space = self.context.space
        parallel = annotated_categoricals(rules, PARALLEL)
        if not parallel:
            return [(0.0, 0, space.complete(rules))]
        threads = self._threads()
        scored: dict[str, tuple[float, int, Trace]] = {}
        for value in range(len(rules.instructions[parallel[0]].attr("candidates"))):
            changed = rules
            for i in parallel:
                changed = changed.with_decision(i, value)
            try:
                trace = space.complete(changed)
            except (*REJECTED, RecursionError):
                continue
            program = space.scheduled_program(trace)
            if program is None:
                program = trace.apply(self.context.task.program).program
            key = structural_hash(program)
            if key not in scored:
                scored[key] = (-parallel_balance(program, threads), value, trace)
        return sorted(scored.values(), key=lambda s: s[:2])

    def _at_root(self, rules: Trace) -> list[Trace]:
        """`rules` with every block a compute location placed under a loop moved to the
        root, then with each alone (re-derived where that makes a new root nest): rule parts."""
        space = self.context.space
        sites = [
            i
            for i, inst in enumerate(rules.instructions)
            if inst.kind == "sample_compute_location" and rules.decisions.get(i, -1) >= 0
        ]
        tries = [sites] + ([[i] for i in sites] if len(sites) > 1 else [])
        out = []
        for moved in tries if sites else []:
            changed = rules
            for i in moved:
                changed = changed.with_decision(i, -1)
            try:
                part = space.rule_part(space.complete(changed, rederive_rng=self.rng, source=rules))
            except (*REJECTED, RecursionError):
                continue
            if part is not None:
                out.append(part)
        return out

    def _threads(self) -> int:
        try:
            return Target.parse(self.context.target).num_threads
        except TargetError:
            return 1

    # -- features --------------------------------------------------------------------

    def _feature(self, trace: Trace) -> np.ndarray | None:
        h = trace.hash
        if h not in self._features:
            self._features[h] = trace_features(self.context.space, self.context.task.program, trace)
        return self._features[h]

    def _warm_start(self) -> None:
        c = self.context
        for r in c.database.top_k(c.task.key, c.target, self.config.init_measured):
            try:
                self.measured[r.trace_hash] = (Trace.from_json(r.trace), float(r.median_ms or 0.0))
            except TraceError:
                continue
        # Reuse across shapes: the best traces of the same operator at other
        # parameters, re-derived here (stale tile sizes repaired), each followed
        # by its structural variants.
        self.seeds: list[Trace] = []
        self._seed_sources: set[str] = set()
        # Other thread counts first: the same workload's tiles, only the parallel
        # extent re-chosen, are nearer than another shape's at this count.
        self._add_thread_seeds(self._other_thread_counts())
        self._add_seeds(self._other_shapes())
        if self.model.samples > 0:  # a shared model another task's search already warm-started
            return
        records = c.database.training_records(c.target)[-self.config.warm_start_records :]
        feats, lats, groups = [], [], []
        tasks: dict[str, Task | None] = {}
        for r in records:
            if r.workload_key not in tasks:
                try:
                    tasks[r.workload_key] = c.task if r.workload_key == c.task.key else _task_of(r)
                except LoomtuneError:
                    tasks[r.workload_key] = None
            task = tasks[r.workload_key]
            if task is None:
                continue
            try:
                f = program_features(Trace.from_json(r.trace).apply(task.program).program)
            except (*REJECTED, RecursionError):
                continue
            feats.append(f)
            lats.append(r.median_ms)
            groups.append(r.workload_key)
        if feats:
            self.model.update(feats, lats, groups)

    # -- proposing ---------------------------------------------------------------------

    def _is_new(self, trace: Trace) -> bool:
        h = trace.hash
        return h not in self.proposed and h not in self.measured and self.context.is_new(h)

    def _children(self, parents: Sequence[Trace | None]) -> list[Trace]:
        """One child per parent (a fresh sample for None), made by the search pool.

        Seeds are drawn here, in order, so the children do not depend on how
        many processes made them. Refused and unlowerable children are dropped.
        """
        jobs = [Job(self.rng.getrandbits(64), parent) for parent in parents]
        out = []
        for trace, features in self.pool.children(jobs):
            if trace is not None:
                self._features.setdefault(trace.hash, features)
                out.append(trace)
        return out

    def _score(self, traces: Sequence[Trace]) -> list[float]:
        feats = [self._feature(t) for t in traces]
        valid = [i for i, f in enumerate(feats) if f is not None]
        scores = [-math.inf] * len(traces)
        if valid:
            predicted = self.model.predict([feats[i] for i in valid])
            for i, s in zip(valid, predicted):
                scores[i] = float(s)
        return scores

    def _pick_parent(self, population: Sequence[Trace], scores: Sequence[float]) -> Trace:
        finite = [s for s in scores if math.isfinite(s)]
        low = min(finite) if finite else 0.0
        weights = [(s - low + 1e-3) if math.isfinite(s) else 0.0 for s in scores]
        if sum(weights) <= 0:
            return self.rng.choice(list(population))
        return self.rng.choices(list(population), weights=weights, k=1)[0]

    def propose(self, n: int) -> list[Trace]:
        self._refresh_seeds()
        if not self.model.trained and not self.measured:
            # Nothing to evolve from and an untrained model's scores are random:
            # evolving would only shuffle random samples. Measure fresh ones.
            return self._fresh(self._seeds_first(n, n), n)
        cfg = self.config
        if self.model.trained and self._own_results < cfg.early_samples and not self.seeds:
            return self._propose_early(min(n, cfg.early_batch))
        seen: dict[str, Trace] = {}

        def add(t: Trace | None) -> None:
            if t is not None and t.hash not in seen and self._feature(t) is not None:
                seen[t.hash] = t

        best = sorted(self.measured.values(), key=lambda tl: tl[1])[: cfg.init_measured]
        for trace, _ in best:
            add(trace)
        for trace in self.seeds:
            add(trace)
        for _ in range(2):  # a space that refuses many samples gets a second round
            missing = cfg.population - len(seen)
            if missing <= 0:
                break
            for t in self._children([None] * missing):
                add(t)
        population = list(seen.values())
        if not population:
            return []
        for _ in range(cfg.generations):
            scores = self._score(population)
            for t in self._children(
                [self._pick_parent(population, scores) for _ in range(cfg.population)]
            ):
                add(t)
            everyone = list(seen.values())
            ranked = sorted(zip(self._score(everyone), range(len(everyone))), key=lambda si: -si[0])
            population = [everyone[i] for _, i in ranked[: cfg.population]]
        everyone = list(seen.values())
        scores = self._score(everyone)
        order = sorted(range(len(everyone)), key=lambda i: -scores[i])
        n_random = min(n, max(0, round(cfg.epsilon * n)))
        out = self._seeds_first(n, n - n_random)
        out += self._variants_of_best(min(cfg.best_variants, n - n_random - len(out)))
        for i in order:
            if len(out) >= n - n_random:
                break
            if self._is_new(everyone[i]):
                out.append(everyone[i])
                self.proposed.add(everyone[i].hash)
        return self._fresh(out, n)

    def _propose_early(self, n: int) -> list[Trace]:
        """A batch of n while there are fewer than `early_samples` results of this workload
        and no other shape's best to start from: the best's variants first, then the model's
        top picks among `early_pool` fresh samples; no evolution yet.

        The count is this workload's, not the model's: under the task scheduler the tasks
        share one model, which has its 64 results after the first few tasks' first batches.

        Trained on 16-48 results the model's top picks overall are nearly all mutants of the
        first batch's best few, and where those lie far from the good region the early
        batches stall around them while random samples keep finding better ones. Its ranking
        of fresh samples is already better than chance, and it sharpens with every batch:
        small batches from a large pool use it best. The pool is kept from batch to batch,
        re-ranked by the updated model and topped up with `early_refill` new samples: a
        model's tasks spend all their trials in early batches, and sampling and featurizing
        128 candidates per 8 measured was most of their tuning time.
        """
        cfg = self.config
        out = self._variants_of_best(min(cfg.best_variants, n))
        left = [t for t in self._early_left if self._is_new(t)]
        fresh = max(cfg.early_refill, cfg.early_pool - len(left))
        candidates = left + [
            t for t in self._children([None] * fresh) if self._feature(t) is not None
        ]
        ranked = sorted(zip(self._score(candidates), range(len(candidates))), key=lambda si: -si[0])
        order = [candidates[i] for _, i in ranked]
        out += self._take_new(order, n - len(out))
        self._early_left = [t for t in order if self._is_new(t)][: cfg.early_pool]
        return self._fresh(out, n)

    def _seeds_first(self, n: int, room: int) -> list[Trace]:
        """Other shapes' best, repaired, and their variants are measured first, in order (at
        most half of a batch of n, and `room`, per batch): a new shape starts from them."""
        return self._take_new(self.seeds, min(room, max(1, n // 2)))

    def _take_new(self, queue: Sequence[Trace], room: int) -> list[Trace]:
        """The first `room` traces of `queue` not yet measured nor proposed, now proposed."""
        out: list[Trace] = []
        for t in queue:
            if len(out) >= room:
                break
            if self._is_new(t):
                out.append(t)
                self.proposed.add(t.hash)
        return out

    def _variants_of_best(self, room: int) -> list[Trace]:
        """The best measured trace with one structural choice changed (pack the weight or
        not, rfactor or not: `RuleSpace.variants`), each measured once, at most `room` per batch.

        Evolution changes such a choice rarely (the `structure` mutator's 5%), and a model
        trained mostly on one side scores the other side's few samples, drawn with random
        tiles, badly: a run can stall on one side. A new best's variants keep its tiles, so
        each side is judged at its best.
        """
        variants = getattr(self.context.space, "variants", None)
        if variants is None or room <= 0 or not self.measured:
            return []
        best, _ = min(self.measured.values(), key=lambda tl: tl[1])
        if best.hash not in self._expanded:
            self._expanded.add(best.hash)
            try:
                self._variants.extend(
                    t for t in variants(best, self.rng) if self._feature(t) is not None
                )
            except (*REJECTED, RecursionError):
                pass
        return self._take_new(self._variants, room)

    def _fresh(self, out: list[Trace], n: int) -> list[Trace]:
        """`out` topped up to n with new random samples of the space that lower."""
        attempts = 16 * n + 64  # a small space repeats itself often
        while len(out) < n and attempts > 0:
            batch = min(attempts, 2 * (n - len(out)) + 4)
            attempts -= batch
            for t in self._children([None] * batch):
                if len(out) < n and self._is_new(t) and self._feature(t) is not None:
                    out.append(t)
                    self.proposed.add(t.hash)
        return out

    # -- learning ----------------------------------------------------------------------

    def observe(self, traces: Sequence[Trace], results: Sequence[MeasureResult]) -> None:
        self._own_results += len(results)
        feats, lats = [], []
        for t, r in zip(traces, results):
            if r.ok and r.median_ms is not None:
                self.measured[t.hash] = (t, r.median_ms)
            f = self._feature(t)
            if f is None:
                continue
            feats.append(f)
            lats.append(r.median_ms)
        if feats:
            self.model.update(feats, lats, [self.context.task.key] * len(feats))
        if self.model.trained:
            self.context.database.save_cost_model(
                self.context.target, self.model.to_bytes(), self.model.samples
            )


def parallel_balance(program: Program, threads: int) -> float:
    """How evenly the program's parallel loops split over `threads` contiguous chunks: the
    least of extent / (threads x the largest chunk) over its parallel loops (1.0: even;
    7 iterations on 2 threads: 7/8), 0.0 without a parallel loop."""
    loops = [n for n in walk(program.body) if isinstance(n, For) and n.kind == "parallel"]
    if not loops:
        return 0.0
    out = 1.0
    for lp in loops:
        extent = int(getattr(lp.extent, "value", 0) or 0)
        if extent <= 0:
            continue
        out = min(out, extent / (threads * math.ceil(extent / threads)))
    return out


@register_strategy("evolutionary")
def _make(context: SearchContext, seed: int) -> EvolutionaryStrategy:
    return EvolutionaryStrategy(context, seed)
