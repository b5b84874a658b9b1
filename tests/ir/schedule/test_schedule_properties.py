"""Seeded property test: random sequences of primitives are legal-or-refused, never wrong.

300 sequences over several library operators at odd shapes. Arguments are drawn
from the current program (its loops, blocks and buffers), split factors include
non-divisors. Every refusal must be a ScheduleError; every sequence that applies
must compile to a kernel that matches numpy.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from ir.expr import Const
from ir.node import walk
from ir.program import BlockRealize, For, Program
from ir.schedule import Schedule, ScheduleError
from ir.schedule.analysis import binds_reduce, readers, writers
from ir.schedule.layout import IndexMap, panel_map
from ir.schedule.state import all_blocks, blocks_under
from ir.task import Task, library_task
from tests.ir.schedule.schedcheck import assert_correct

SEQUENCES = 300
SEED = 20261122

OPS: list[tuple[str, dict[str, int]]] = [
    ("matmul", {"m": 37, "n": 19, "k": 23}),
    ("batch_matmul", {"b": 3, "m": 7, "n": 13, "k": 9}),
    ("dense", {"m": 11, "n": 21, "k": 17, "bias": 1, "relu": 1}),
    ("conv2d_nhwc", {"n": 1, "h": 9, "w": 7, "ci": 5, "co": 6, "kh": 3, "kw": 3, "stride": 1, "pad": 1, "dilation": 1}),
    ("softmax", {"m": 7, "n": 29}),
    ("layer_norm", {"m": 9, "n": 27}),
    ("reduce_sum", {"m": 5, "n": 61}),
    ("avg_pool2d", {"n": 1, "h": 9, "w": 9, "c": 5, "kh": 3, "kw": 3, "stride": 2, "pad": 1}),
    ("gelu", {"m": 13, "n": 31}),
]  # fmt: skip

Step = tuple[str, Callable[[Schedule], object]]


def _loops(p: Program) -> list[For]:
    return [n for n in walk(p.body) if isinstance(n, For)]


def _extent(f: For) -> int:
    return int(f.extent.value) if isinstance(f.extent, Const) else 0


def _data_parallel(p: Program, f: For) -> bool:
    return not any(binds_reduce(r, f.var) for r in blocks_under(f))


def _reduce_only(f: For) -> bool:
    rs = blocks_under(f)
    return len(rs) == 1 and all(
        (iv.kind == "reduce") for iv, v in zip(rs[0].block.iter_vars, rs[0].values) if f.var in walk(v)
    )


def candidates(p: Program, rng: random.Random) -> dict[str, list[Step]]:
    """Plausible steps per primitive for the current program."""
    loops = _loops(p)
    blocks = all_blocks(p)
    out: dict[str, list[Step]] = {}

    def add(name: str, fn: Callable[[Schedule], object]) -> None:
        out.setdefault(name, []).append((name, fn))

    for f in loops:
        n = _extent(f)
        if f.kind == "serial" and n >= 2:
            inner = rng.randint(2, min(n, 16))  # often not a divisor: an imperfect split
            add("split", lambda s, f=f, inner=inner: s.split(f.var.name, [None, inner]))
        if f.kind == "serial" and isinstance(f.body, For) and f.body.kind == "serial":
            add("fuse", lambda s, f=f: s.fuse(f.var.name, f.body.var.name))  # type: ignore[attr-defined]
        if isinstance(f.body, For):
            add("reorder", lambda s, f=f: s.reorder(f.body.var.name, f.var.name))  # type: ignore[attr-defined]
        if f.kind == "serial" and _data_parallel(p, f):
            add("parallel", lambda s, f=f: s.parallel(f.var.name))
            if not any(isinstance(x, For) for x in walk(f.body)) and n <= 64:
                add("vectorize", lambda s, f=f: s.vectorize(f.var.name))
        if f.kind == "serial" and 2 <= n <= 16:
            add("unroll", lambda s, f=f: s.unroll(f.var.name))
        add("annotate", lambda s, f=f: s.annotate(f.var.name, "note", rng.randint(0, 9)))
        if f.kind == "serial" and _reduce_only(f):
            add("rfactor", lambda s, f=f: s.rfactor(f.var.name, 0))
    names = {r.block.name for r in blocks}
    for r in blocks:
        b = r.block
        loops_of_b = [f for f in loops if any(x is r for x in blocks_under(f))]
        for w in b.writes:
            consumers = readers(p, w.buffer.name)
            if consumers:
                c = consumers[0].block.name
                c_loops = [f.var.name for f in loops if any(x.block.name == c for x in blocks_under(f))]
                if c_loops:
                    at = rng.choice(c_loops)
                    add("compute_at", lambda s, b=b.name, at=at: s.compute_at(b, at))
                add("compute_inline", lambda s, b=b.name: s.compute_inline(b))
        for rd in b.reads:
            producers = [x for x in writers(p, rd.buffer.name) if x.block.name != b.name]
            if producers:
                pr = producers[0].block.name
                p_loops = [f.var.name for f in loops if any(x.block.name == pr for x in blocks_under(f))]
                if p_loops:
                    at = rng.choice(p_loops)
                    add("reverse_compute_at", lambda s, b=b.name, at=at: s.reverse_compute_at(b, at))
                add("reverse_compute_inline", lambda s, b=b.name: s.reverse_compute_inline(b))
        if b.reads:
            idx = rng.randrange(len(b.reads))
            scope = rng.choice(["global", "local"])
            add("cache_read", lambda s, b=b.name, idx=idx, scope=scope: s.cache_read(b, idx, scope))
            two_d = [rd.buffer.name for rd in b.reads if len(rd.buffer.shape) == 2]
            if two_d:
                buf = rng.choice(two_d)
                imap = rng.choice([panel_map(rng.choice([4, 8, 16])), IndexMap.from_callable(2, lambda a, c: (c, a))])
                add("transform_layout", lambda s, b=b.name, buf=buf, imap=imap: s.transform_layout(b, buf, imap))
        add("cache_write", lambda s, b=b.name: s.cache_write(b, 0, rng.choice(["global", "local"])))
        if b.init is not None and loops_of_b:
            at = rng.choice(loops_of_b).var.name
            add("decompose_reduction", lambda s, b=b.name, at=at: s.decompose_reduction(b, at))
    assert names
    return out


PRIMITIVES = (
    "split", "fuse", "reorder", "parallel", "vectorize", "unroll", "annotate",
    "compute_at", "reverse_compute_at", "compute_inline", "reverse_compute_inline",
    "cache_read", "cache_write", "decompose_reduction", "rfactor", "transform_layout",
)  # fmt: skip


def run_sequence(task: Task, rng: random.Random, applied: Counter[str], length: int) -> tuple[bool, Schedule, list[str]]:
    sch = Schedule(task.program)
    log: list[str] = []
    for _ in range(length):
        options = candidates(sch.program, rng)
        # Favour primitives applied least so far, so every one gets exercised.
        names = sorted(options, key=lambda n: (applied[n], rng.random()))[:4]
        name, fn = rng.choice(options[rng.choice(names)])
        before = sch.program
        try:
            fn(sch)
        except ScheduleError:
            assert sch.program == before, f"refused {name} changed the program"
            log.append(f"{name}: refused")
            return False, sch, log
        applied[name] += 1
        log.append(name)
    return True, sch, log


@pytest.mark.slow
def test_random_schedules_are_legal_or_refused() -> None:
    rng = random.Random(SEED)
    applied: Counter[str] = Counter()
    n_applied = 0
    lengths = []
    for k in range(SEQUENCES):
        op, params = OPS[k % len(OPS)]
        task = library_task(op, params)
        length = rng.randint(3, 7)
        lengths.append(length)
        ok, sch, log = run_sequence(task, rng, applied, length)
        if ok:
            n_applied += 1
            try:
                assert_correct(task, sch.program, threads=2)
            except AssertionError as e:
                raise AssertionError(f"{op} after {log}: {e}") from None
    report = ", ".join(f"{p}={applied[p]}" for p in PRIMITIVES)
    print(f"\napplied {n_applied}/{SEQUENCES} sequences; mean length {sum(lengths) / len(lengths):.2f}; {report}")
    assert sum(lengths) / len(lengths) >= 4
    assert n_applied >= 0.7 * SEQUENCES, f"only {n_applied} of {SEQUENCES} sequences applied ({report})"
    low = [p for p in PRIMITIVES if applied[p] < 20]
    assert not low, f"primitives applied fewer than 20 times: {low} ({report})"
