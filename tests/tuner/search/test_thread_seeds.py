"""A new thread count starts from the workload's bests at another one, on a real SQLite database."""

from __future__ import annotations

from random import Random
from typing import Any

from codegen.host import host_target
from ir.serialize import structural_hash
from ir.task import library_task
from service.db.schema import ensure_schema
from service.db.store import SQLDatabase
from tests.tuner.space.spacecheck import unrolls_by_nest
from tuner.search.evolutionary import EvolutionaryConfig, EvolutionaryStrategy, parallel_balance
from tuner.search.loop import make_record
from tuner.search.strategy import SearchContext
from tuner.simulated import SimulatedRunner
from tuner.space import default_space
from tuner.space.mutators.base import annotated_categoricals
from tuner.space.rules.base import PARALLEL
from tuner.space.space import RuleSpace
from tuner.trace.trace import Trace


def _tiles(trace: Trace) -> list[Any]:
    return [
        trace.decisions[i]
        for i, x in enumerate(trace.instructions)
        if x.kind == "sample_perfect_tile"
    ]


def test_a_second_thread_count_first_measures_the_first_ones_bests_rethreaded(
    sqlite_engine: Any,
) -> None:
    ensure_schema(sqlite_engine)
    db = SQLDatabase(sqlite_engine)
    task = library_task("matmul", {"m": 96, "n": 128, "k": 64})
    # On an AVX-512 host the best packs B inside the kernel's nest, and at 2 threads the
    # pack leaves it for a nest of its own (tests/tuner/space/test_space_nest_decisions.py
    # makes that case on any host).
    one, two = host_target(1), host_target(2)
    space1, runner, rng = default_space(task.program, one), SimulatedRunner(threads=1), Random(3)
    samples = [space1.sample(rng) for _ in range(6)]
    db.commit_records(
        make_record(task, one.canonical(), t, runner.measure(task, t)) for t in samples
    )
    top = db.top_k(task.key, one.canonical(), 4)
    assert len(top) == 4

    space = default_space(task.program, two)
    config = EvolutionaryConfig(processes=1, population=8, generations=1)
    warm = EvolutionaryStrategy(SearchContext(task, two.canonical(), space, db), 0, config)
    first = warm.propose(8)
    rederived = [t for t in first if t.hash in {s.hash for s in warm.seeds}]
    assert rederived and first[: len(rederived)] == rederived  # measured first, in order
    # the 1-thread best first, then its 3 runner-ups, one trace each
    rules = [RuleSpace.rule_part(Trace.from_json(r.trace)) for r in top]
    assert [_tiles(t) for t in rederived] == [_tiles(r) for r in rules]  # type: ignore[arg-type]
    best = rules[0]
    assert best is not None and not annotated_categoricals(best, PARALLEL)  # 1 thread
    from_best = [t for t in warm.seeds if _tiles(t) == _tiles(best)]
    assert from_best[0] == first[0]
    kept = unrolls_by_nest(space1, best)
    assert kept
    for t in from_best:  # its tiles kept, and each nest's unroll depth, wherever it now is
        mine = unrolls_by_nest(space, RuleSpace.rule_part(t))  # type: ignore[arg-type]
        assert {n: mine.get(n) for n in kept} == kept, (mine, kept)
    # the best re-derived with each parallel extent chosen for 2 threads: one trace per
    # program, the best balanced first (a serial one only when nothing runs in parallel)
    balances = [parallel_balance(t.apply(task.program).program, 2) for t in from_best]
    assert balances == sorted(balances, reverse=True)
    assert balances[0] > 0 or len(from_best) == 1
    programs = {structural_hash(t.apply(task.program).program) for t in from_best}
    assert len(programs) == len(from_best)


def test_a_thread_count_with_no_other_starts_cold(sqlite_engine: Any) -> None:
    ensure_schema(sqlite_engine)
    db = SQLDatabase(sqlite_engine)
    task = library_task("matmul", {"m": 96, "n": 128, "k": 64})
    two = host_target(2)
    warm = EvolutionaryStrategy(
        SearchContext(task, two.canonical(), default_space(task.program, two), db), 0
    )
    assert warm.seeds == []


def test_a_padding_placed_under_an_output_tile_is_moved_to_the_root(sqlite_engine: Any) -> None:
    """A 1-thread conv whose padding sits under an output tile loop it does not depend on
    has no loop that can run in parallel; its 2-thread seed computes the padding up front."""
    ensure_schema(sqlite_engine)
    db = SQLDatabase(sqlite_engine)
    task = library_task("conv2d_nhwc", {"n": 1, "h": 6, "w": 6, "ci": 8, "co": 32})
    one, two = host_target(1), host_target(2)
    space1, rng = default_space(task.program, one), Random(0)
    space2 = default_space(task.program, two)
    warm = EvolutionaryStrategy(
        SearchContext(task, two.canonical(), space2, db), 0, EvolutionaryConfig(processes=1)
    )
    found = 0
    for _ in range(40):
        trace = space1.sample(rng)
        rules = RuleSpace.rule_part(trace)
        assert rules is not None
        fitted = space2.rederive(rules, Random(1))
        if warm._parallel_extents(RuleSpace.rule_part(fitted))[0][0] < 0:  # type: ignore[arg-type]
            continue  # something runs in parallel where it is
        seeds = warm._rethreaded(rules, fitted)
        program = seeds[0].apply(task.program).program
        if parallel_balance(program, 2) == 0:
            continue  # nothing could: the output tiles are all inner
        found += 1
        assert _tiles(seeds[0]) == _tiles(rules)
        moved = [
            i
            for i, x in enumerate(seeds[0].instructions)
            if x.kind == "sample_compute_location" and seeds[0].decisions[i] == -1
        ]
        assert moved  # something placed under a loop now at the root
        break
    assert found
