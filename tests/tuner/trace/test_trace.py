"""Traces: exact replay across processes, JSON and Python forms, decisions, repair."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ir.program import Program
from ir.serialize import structural_hash
from ir.task import Task, library_task
from tests.ir.schedule.schedcheck import assert_correct
from tuner.trace.errors import TraceError
from tuner.trace.file import TraceFile
from tuner.trace.trace import Trace, run_python
from tuner.trace.traced_schedule import TracedSchedule

ROOT = Path(__file__).resolve().parents[3]
PARAMS = {"m": 64, "n": 48, "k": 32}


def tiled_matmul(
    rng: random.Random | None, decisions: dict[str, list[int]] | None = None
) -> TracedSchedule:
    task = library_task("matmul", PARAMS)
    sch = TracedSchedule(task.program, rng=rng)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    d = decisions or {}
    ti = sch.sample_perfect_tile(i, n=2, max_innermost_factor=16, decision=d.get("i"))
    tj = sch.sample_perfect_tile(j, n=2, max_innermost_factor=16, decision=d.get("j"))
    i0, i1 = sch.split(i, ti)
    j0, j1 = sch.split(j, tj)
    sch.reorder(i0, j0, k, i1, j1)
    unroll = sch.sample_categorical([0, 16, 64], [0.2, 0.4, 0.4])
    sch.annotate(i0, "unroll_limit", unroll)
    sch.sample_perfect_tile(k, n=2, max_innermost_factor=8)  # unused: simplified() drops it
    sch.vectorize(j1)
    sch.parallel(i0)
    return sch


def _subprocess(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_json_round_trip_is_exact_and_replays_identically() -> None:
    sch = tiled_matmul(random.Random(5))
    trace = sch.trace
    text = json.dumps(trace.to_json())
    again = Trace.from_json(json.loads(text))
    assert again == trace and again.hash == trace.hash
    assert structural_hash(
        again.apply(library_task("matmul", PARAMS).program).program
    ) == structural_hash(sch.program)


def test_replay_in_another_process_gives_the_same_program(tmp_path: Path) -> None:
    sch = tiled_matmul(random.Random(5))
    path = tmp_path / "t.json"
    TraceFile.for_task(library_task("matmul", PARAMS), "host", sch.trace).save(path)
    code = (
        "from tuner.trace.file import TraceFile\n"
        "from ir.serialize import structural_hash\n"
        f"f = TraceFile.load({str(path)!r})\n"
        "print(structural_hash(f.trace.apply(f.task().program).program))\n"
    )
    assert _subprocess(code) == structural_hash(sch.program)


def test_python_form_rebuilds_the_same_program_here_and_in_another_process() -> None:
    sch = tiled_matmul(random.Random(5))
    code = sch.trace.as_python()
    assert "sch.sample_perfect_tile(" in code and "decision=" in code
    program = library_task("matmul", PARAMS).program
    assert structural_hash(run_python(code, program).program) == structural_hash(sch.program)
    script = (
        "from ir.task import library_task\nfrom ir.serialize import structural_hash\n"
        "from tuner.trace.trace import run_python\n"
        f"code = {code!r}\n"
        f"print(structural_hash(run_python(code, library_task('matmul', {PARAMS!r}).program).program))\n"
    )
    assert _subprocess(script) == structural_hash(sch.program)


def test_replay_without_decisions_resamples_deterministically_per_seed() -> None:
    trace = tiled_matmul(random.Random(5)).trace
    program = library_task("matmul", PARAMS).program
    seen = {
        json.dumps(
            trace.apply(program, rng=random.Random(s), keep_decisions=False).trace.to_json()[
                "decisions"
            ]
        )
        for s in range(12)
    }
    assert len(seen) > 1, "re-sampling never changed a decision"
    mine = trace.apply(program, rng=random.Random(99), keep_decisions=False).trace.decisions
    code = (
        "import json, random\nfrom ir.task import library_task\nfrom tuner.trace.trace import Trace\n"
        f"t = Trace.from_json(json.loads({json.dumps(json.dumps(trace.to_json()))}))\n"
        f"s = t.apply(library_task('matmul', {PARAMS!r}).program, rng=random.Random(99), keep_decisions=False)\n"
        "print(json.dumps(s.trace.to_json()['decisions'], sort_keys=True))\n"
    )
    assert json.loads(_subprocess(code)) == {str(k): v for k, v in mine.items()}


def test_replay_without_decisions_or_rng_is_a_clear_error() -> None:
    trace = tiled_matmul(random.Random(5)).trace.without_decisions()
    with pytest.raises(TraceError, match="no decision and no rng"):
        trace.apply(library_task("matmul", PARAMS).program)


def test_with_decision_gives_a_different_correct_kernel() -> None:
    task = library_task("matmul", PARAMS)
    trace = tiled_matmul(random.Random(0), {"i": [8, 8], "j": [12, 4]}).trace
    changed = trace.with_decision(2, [4, 16])
    a = trace.apply(task.program).program
    b = changed.apply(task.program).program
    assert structural_hash(a) != structural_hash(b)
    assert changed.hash != trace.hash
    assert_correct(task, b, threads=2)
    with pytest.raises(TraceError, match="not a sampling instruction"):
        trace.with_decision(0, [1])


def test_stale_decision_is_refused_and_repair_fixes_it() -> None:
    trace = tiled_matmul(random.Random(0), {"i": [8, 8], "j": [12, 4]}).trace
    other = library_task("matmul", {"m": 50, "n": 45, "k": 32})
    with pytest.raises(
        TraceError,
        match=r"sample_perfect_tile on loop i: decision no longer fits .*replay with repair",
    ):
        trace.apply(other.program)
    repaired = trace.apply(other.program, repair=True)
    assert repaired.trace.decisions[2] == [5, 10]  # the divisor of 50 nearest the old 8, within 16
    assert_correct(other, repaired.program, threads=2)


def test_simplified_drops_unused_samples() -> None:
    trace = tiled_matmul(random.Random(3)).trace
    simple = trace.simplified()
    assert len(simple.instructions) == len(trace.instructions) - 1
    assert [i.kind for i in simple.instructions].count("sample_perfect_tile") == 2
    program = library_task("matmul", PARAMS).program
    assert structural_hash(simple.apply(program).program) == structural_hash(
        trace.apply(program).program
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a trace file is a JSON object"),
        ({"format": "loomtune.trace/99"}, "unknown trace file format"),
        (
            {"format": "loomtune.trace/1", "workload": {"op": 3}, "target": "host", "trace": {}},
            "workload must be",
        ),
        (
            {
                "format": "loomtune.trace/1",
                "workload": {"op": "matmul"},
                "target": "host",
                "trace": {"version": 7},
            },
            "unknown trace version 7",
        ),
        (
            {
                "format": "loomtune.trace/1",
                "workload": {"op": "matmul"},
                "target": "host",
                "trace": {
                    "version": 1,
                    "instructions": [
                        {"kind": "frobnicate", "inputs": [], "attrs": {}, "outputs": []}
                    ],
                },
            },
            "unknown instruction 'frobnicate'",
        ),
        (
            {
                "format": "loomtune.trace/1",
                "workload": {"op": "matmul"},
                "target": "host",
                "trace": {"version": 1, "instructions": [], "decisions": {"0": 1}},
            },
            "not the index of a sampling instruction",
        ),
    ],
)
def test_corrupt_trace_files_are_refused(data: object, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        TraceFile.from_json(data)


def test_unknown_workload_in_a_trace_file() -> None:
    f = TraceFile.from_json(
        {
            "format": "loomtune.trace/1",
            "workload": {"op": "nope", "params": {}},
            "target": "host",
            "trace": {"version": 1, "instructions": []},
        }
    )
    with pytest.raises(TraceError, match="unknown operator 'nope'"):
        f.task()


def packed_matmul(params: dict[str, int], j_tile: list[int] | None) -> tuple[Task, TracedSchedule]:
    task = library_task("matmul", params)
    sch = TracedSchedule(task.program, rng=random.Random(0))
    c = sch.get_block("C")
    _, j, _ = sch.get_loops(c)
    tj = sch.sample_perfect_tile(j, n=2, max_innermost_factor=16, decision=j_tile)
    sch.pack_panels(c, "B", tj[-1])
    sch.split(sch.get_loops(sch.get_block("C"))[1], tj)
    return task, sch


def packed_shape(program: Program) -> tuple[int, ...]:
    (packed,) = [b for b in program.allocs if b.name == "B_packed"]
    return tuple(packed.concrete_shape())


def test_pack_panels_follows_its_sampled_width_through_mutation_repair_and_both_forms() -> None:
    task, sch = packed_matmul(PARAMS, [6, 8])
    assert packed_shape(sch.program) == (6, 32, 8)  # B[k=32, n=48] -> [48 // 8, 32, 8]
    trace = sch.trace
    again = Trace.from_json(json.loads(json.dumps(trace.to_json())))
    assert again == trace
    assert structural_hash(run_python(trace.as_python(), task.program).program) == structural_hash(
        sch.program
    )
    # a new tile decision repacks to the new width (a literal index map would keep 8)
    changed = trace.with_decision(2, [3, 16]).apply(task.program).program
    assert packed_shape(changed) == (3, 32, 16)
    assert_correct(task, changed, threads=1)
    # repaired to another shape, the panel is the repaired tile
    other = library_task("matmul", {"m": 64, "n": 40, "k": 32})
    repaired = trace.apply(other.program, repair=True)
    width = repaired.trace.decisions[2][-1]
    assert packed_shape(repaired.program) == (40 // width, 32, width)
    assert_correct(other, repaired.program, threads=1)


def test_pack_panels_refuses_a_width_that_is_not_an_integer() -> None:
    trace = packed_matmul(PARAMS, [6, 8])[1].trace
    data = trace.to_json()
    text = json.dumps(data).replace('[{"rv": "b0"}, {"rv": "v5"}]', '[{"rv": "b0"}, "wide"]')
    assert text != json.dumps(data)
    with pytest.raises(TraceError, match="pack_panels: panel width 'wide' is not an integer"):
        Trace.from_json(json.loads(text)).apply(library_task("matmul", PARAMS).program)


@pytest.mark.parametrize(
    ("decision", "extent", "n", "bound", "expected"),
    [
        (
            [1, 16, 2, 32],
            1000,
            4,
            64,
            [1, 25, 1, 40],
        ),  # the vector tile stays a multiple of 8 lanes
        ([16, 64], 1000, 2, 64, [25, 40]),
        ([8, 8], 50, 2, 16, [5, 10]),  # no multiple of 8 divides 50: the nearest even one
        ([171, 6], 1000, 2, 8, [200, 5]),  # not a vector width: nearest by ratio
    ],
)
def test_repair_keeps_vector_widths_aligned(
    decision: list[int], extent: int, n: int, bound: int, expected: list[int]
) -> None:
    from tuner.trace.sampling import perfect_tile_fits, repair_perfect_tile

    repaired = repair_perfect_tile(decision, extent, n, bound)
    assert repaired == expected
    assert perfect_tile_fits(repaired, extent, n, bound) is None


def _written_back_under(program: Program) -> list[str]:
    """The loops of the write-back block (C_local: it copies the accumulator into C)."""
    from ir.schedule.state import loops_above

    return [lp.var.name for lp in loops_above(program, "C_local")]


def test_repair_aligns_spatial_tiles_but_takes_the_nearest_reduction_tile() -> None:
    """On another shape a vectorized loop's tile keeps its multiple of 8 lanes, while a
    reduction loop's tile (a K block: nothing is vectorized along it) goes to the nearest
    divisor by ratio: 1024's K block of 256 is 250 on 1000, not 200."""
    task = library_task("matmul", {"m": 64, "n": 1024, "k": 1024})
    sch = TracedSchedule(task.program, rng=random.Random(0))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(
        j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=256, decision=[4, 256])
    )
    k0, k1 = sch.split(
        k, sch.sample_perfect_tile(k, n=2, max_innermost_factor=256, decision=[4, 256])
    )
    sch.reorder(j0, k0, i, k1, j1)
    sch.vectorize(j1)
    other = library_task("matmul", {"m": 64, "n": 1000, "k": 1000})
    repaired = sch.trace.apply(other.program, repair=True)
    tiles = [
        repaired.trace.decisions[n]
        for n, inst in enumerate(repaired.trace.instructions)
        if inst.kind == "sample_perfect_tile"
    ]
    assert tiles == [[5, 200], [4, 250]]
    assert_correct(other, repaired.program, threads=1)


def test_sample_loop_moves_what_takes_its_output_through_replay_repair_and_both_forms() -> None:
    task = library_task("matmul", PARAMS)
    sch = TracedSchedule(task.program, rng=random.Random(0))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [4, 16])
    j0, j1 = sch.split(j, [3, 16])
    sch.reorder(i0, j0, k, i1, j1)
    local = sch.cache_write(c, 0, "local")
    at = sch.sample_loop([i0, j0], [0.5, 0.5], decision=0)
    sch.reverse_compute_at(local, at)
    trace = sch.trace
    n = next(i for i, inst in enumerate(trace.instructions) if inst.kind == "sample_loop")
    where = {
        d: _written_back_under(trace.with_decision(n, d).apply(task.program).program)
        for d in (0, 1)
    }
    assert where[0] != where[1]  # the decision, not the recorded loop, says where
    again = Trace.from_json(json.loads(json.dumps(trace.to_json())))
    assert again == trace
    moved = trace.with_decision(n, 1)
    assert structural_hash(run_python(moved.as_python(), task.program).program) == structural_hash(
        moved.apply(task.program).program
    )
    assert_correct(task, moved.apply(task.program).program, threads=1)
    with pytest.raises(TraceError, match="sample_loop: decision 2 is not an index into 2 loops"):
        trace.with_decision(n, 2).apply(task.program)
    assert trace.with_decision(n, 2).apply(task.program, repair=True).trace.decisions[n] == 1


def test_forced_decisions_are_taken_in_order_repaired_until_a_call_differs() -> None:
    """Re-deriving (`forced=`): each sampling call takes the next forced decision while its
    signature matches — a stale one repaired even without repair=True — and samples
    from the rng once a call differs, for every call after it too."""
    other = library_task("matmul", {"m": 50, "n": 45, "k": 32})
    forced = [
        (("sample_perfect_tile", 2), [8, 8]),  # stale on i (50): repaired to [5, 10]
        (("sample_perfect_tile", 2), [9, 5]),  # fits j (45): kept
        (("sample_categorical", 2), 1),  # the call below has 3 candidates: forcing stops
        (("sample_perfect_tile", 2), [4, 8]),  # never taken
    ]
    sch = TracedSchedule(other.program, rng=random.Random(1), forced=forced)
    i, j, k = sch.get_loops(sch.get_block("C"))
    assert list(sch.sample_perfect_tile(i, n=2, max_innermost_factor=16)) == [5, 10]
    assert list(sch.sample_perfect_tile(j, n=2, max_innermost_factor=16, decision=[45, 1])) == [
        9,
        5,
    ]
    draws = random.Random(1)
    sch.sample_categorical([0, 16, 64], [0.2, 0.4, 0.4])
    expected = draws.choices(range(3), weights=[0.2, 0.4, 0.4], k=1)[0]
    assert sch.trace.decisions[len(sch.instructions) - 1] == expected
    tile = sch.sample_perfect_tile(k, n=2, max_innermost_factor=8, decision=[16, 2])
    assert list(tile) == [16, 2]  # the rule's own decision: nothing is forced any more


@pytest.mark.parametrize(
    ("decision", "extent", "why"),
    [
        ([1, 2, 16, 32], 1000, None),  # 1024 covers 1000: 24 to spare in the last 32-wide tile
        ([25, 1, 1, 40], 1000, None),  # a perfect tiling is a cover too
        ([1, 1, 16, 32], 1000, "less than the extent"),
        ([2, 2, 16, 32], 1000, "level 0 to spare"),  # the second outer strip would be all spare
        ([1, 64, 16, 32], 1000, "level 1 to spare"),
        ([1, 2, 16, 128], 1000, "exceeds max_innermost_factor"),
    ],
)
def test_cover_tiles_cover_the_extent_without_a_dead_level(
    decision: list[int], extent: int, why: str | None
) -> None:
    from tuner.trace.sampling import cover_tile_fits

    got = cover_tile_fits(decision, extent, 4, 64)
    assert (got is None) if why is None else (got is not None and why in got)


def test_cover_tiles_sample_aligned_widths_repair_keeps_them_and_replay_checks_them() -> None:
    from tuner.trace.sampling import cover_tile_fits, repair_cover_tile, sample_cover_tile

    rng = random.Random(0)
    drawn = [sample_cover_tile(rng, 1000, 4, 64) for _ in range(300)]
    assert all(cover_tile_fits(d, 1000, 4, 64) is None for d in drawn)
    assert {16, 32, 64} <= {d[-1] for d in drawn}  # widths 1000 is not a multiple of
    assert all(sum(1 for d in drawn if d[-1] == w) > 0 for w in (8, 40))  # and its divisors
    # three times a power of two: register-tile rows (12 x 32 on AVX-512) on a power-of-two extent
    from tuner.trace.sampling import cover_innermost_choices

    assert cover_innermost_choices(1024, 16) == [1, 2, 3, 4, 6, 8, 12, 16]
    assert cover_tile_fits([1, 86, 1, 12], 1024, 4, 16) is None
    # 1024's tiling covers 1000 as it is; a too-wide inner level is cut to what is needed
    assert repair_cover_tile([1, 2, 16, 32], 1000, 4, 64) == [1, 2, 16, 32]
    assert repair_cover_tile([16, 2, 4, 8], 1000, 4, 8) == [16, 2, 4, 8]
    assert repair_cover_tile([1, 64, 16, 32], 1000, 4, 64) == [1, 2, 16, 32]
    assert repair_cover_tile([1, 1, 1, 128], 1000, 4, 64) == [16, 1, 1, 64]
    # replay: a cover decision is checked as a cover (and a perfect tile as a perfect one)
    task = library_task("matmul", {"m": 8, "n": 100, "k": 4})
    sch = TracedSchedule(task.program)
    _, j, _ = sch.get_loops(sch.get_block("C"))
    tile = sch.sample_perfect_tile(j, n=3, max_innermost_factor=32, decision=[2, 4, 16], cover=True)
    sch.split(j, tile)
    trace = sch.trace
    assert Trace.from_json(json.loads(json.dumps(trace.to_json()))) == trace
    assert_correct(task, trace.apply(task.program).program)
    assert "cover=True" in trace.as_python()
    with pytest.raises(TraceError, match="level 0 to spare"):
        trace.with_decision(2, [3, 4, 16]).apply(task.program)
    plain = TracedSchedule(task.program)
    _, j2, _ = plain.get_loops(plain.get_block("C"))
    with pytest.raises(TraceError, match="multiply to 128, not the extent 100"):
        plain.sample_perfect_tile(j2, n=3, max_innermost_factor=32, decision=[2, 4, 16])
