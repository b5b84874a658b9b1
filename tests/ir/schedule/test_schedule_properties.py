"""Seeded property test: random sequences of primitives are legal-or-refused, never wrong.

140 sequences over several library operators at odd shapes, each primitive applied at
least 20 times (22 to 36 with this seed). Arguments are drawn from the current program (its
loops, blocks and buffers), split factors include non-divisors. Every refusal must be a
ScheduleError; every sequence that applies must compile to a kernel that matches numpy.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from ir.expr import Const, Var
from ir.node import walk
from ir.program import BlockRealize, BufferStore, For, Program
from ir.schedule import Schedule, ScheduleError
from ir.schedule.analysis import binds_reduce, readers, writers
from ir.schedule.layout import IndexMap, panel_map
from ir.schedule.state import all_blocks, blocks_under
from ir.task import Task, custom_task, library_task
from tests.ir.schedule.schedcheck import assert_correct

SEQUENCES = 140
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
    ("chain", {}),
]  # fmt: skip

# A custom element-wise chain (with a transposed last stage): what the inlining
# primitives are for, and something the library operators have little of.
CHAIN = {
    "format": "loomtune.workload/1", "name": "chain", "sizes": {"m": 13, "n": 21},
    "inputs": [{"name": "A", "shape": ["m", "n"]}],
    "computes": [
        {"name": "B", "shape": ["m", "n"], "axes": ["i", "j"], "body": ["mul", ["load", "A", "i", "j"], 2.0]},
        {"name": "T", "shape": ["m", "n"], "axes": ["i", "j"], "body": ["tanh", ["load", "B", "i", "j"]]},
        {"name": "D", "shape": ["n", "m"], "axes": ["j", "i"], "body": ["add", ["load", "T", "i", "j"], 1.0]},
    ],
    "outputs": ["D"],
}  # fmt: skip


def make_task(op: str, params: dict[str, int]) -> Task:
    return custom_task(CHAIN) if op == "chain" else library_task(op, params)


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
        (iv.kind == "reduce")
        for iv, v in zip(rs[0].block.iter_vars, rs[0].values)
        if f.var in walk(v)
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
    outputs = {b.name for b in p.outputs}

    def spatial(r: BlockRealize) -> bool:
        return r.block.init is None and all(iv.kind == "spatial" for iv in r.block.iter_vars)

    def loops_over(name: str) -> list[For]:
        return [f for f in loops if any(x.block.name == name for x in blocks_under(f))]

    for r in blocks:
        b = r.block
        intermediates = [w.buffer.name for w in b.writes if w.buffer.name not in outputs]
        for buf in intermediates:
            consumers = readers(p, buf)
            if not consumers:
                continue
            common = set.intersection(
                *({f.var.name for f in loops_over(c.block.name)} for c in consumers)
            )
            at_options = [
                f.var.name for f in loops_over(consumers[0].block.name) if f.var.name in common
            ]
            if at_options:
                at = rng.choice(at_options)
                add("compute_at", lambda s, b=b.name, at=at: s.compute_at(b, at))
            plain = isinstance(b.body, BufferStore) and all(
                isinstance(i, Var) for i in b.body.indices
            )
            if spatial(r) and plain and len(writers(p, buf)) == 1:
                add("compute_inline", lambda s, b=b.name: s.compute_inline(b))
        for rd in b.reads:
            producers = [x for x in writers(p, rd.buffer.name) if x.block.name != b.name]
            if len(producers) != 1 or rd.buffer.name in outputs:
                continue
            pr = producers[0]
            spatial_loops = [
                f.var.name
                for f in loops_over(pr.block.name)
                if not binds_reduce(pr, f.var) and f.kind in ("serial", "parallel")
            ]
            if spatial_loops and spatial(r):
                at = rng.choice(spatial_loops)
                add("reverse_compute_at", lambda s, b=b.name, at=at: s.reverse_compute_at(b, at))
            if spatial(r) and spatial(pr) and len(readers(p, rd.buffer.name)) == 1:
                add("reverse_compute_inline", lambda s, b=b.name: s.reverse_compute_inline(b))
        if b.reads:
            idx = rng.randrange(len(b.reads))
            scope = rng.choice(["global", "local"])
            add("cache_read", lambda s, b=b.name, idx=idx, scope=scope: s.cache_read(b, idx, scope))
            two_d = [rd.buffer.name for rd in b.reads if len(rd.buffer.shape) == 2]
            if two_d:
                buf = rng.choice(two_d)
                imap = rng.choice(
                    [
                        panel_map(rng.choice([4, 8, 16])),
                        IndexMap.from_callable(2, lambda a, c: (c, a)),
                    ]
                )
                add(
                    "transform_layout",
                    lambda s, b=b.name, buf=buf, imap=imap: s.transform_layout(b, buf, imap),
                )
        if len(b.writes) == 1 and len(writers(p, b.writes[0].buffer.name)) == 1:
            add(
                "cache_write",
                lambda s, b=b.name: s.cache_write(b, 0, rng.choice(["global", "local"])),
            )
        if b.init is not None:
            above = loops_over(b.name)
            # Loops outside the chosen one must not feed a reduction axis.
            ok = []
            for pos, f in enumerate(above):
                feeds_spatial = any(
                    iv.kind == "spatial" and f.var in walk(v)
                    for iv, v in zip(b.iter_vars, r.values)
                )
                if not any(binds_reduce(r, g.var) for g in above[:pos]) and not (
                    feeds_spatial and binds_reduce(r, f.var)
                ):
                    ok.append(f.var.name)
            if ok:
                at = rng.choice(ok)
                add("decompose_reduction", lambda s, b=b.name, at=at: s.decompose_reduction(b, at))
            for f in above:
                if f.kind == "serial" and binds_reduce(r, f.var) and _reduce_only(f):
                    add("rfactor", lambda s, f=f: s.rfactor(f.var.name, 0))
    return out


PRIMITIVES = (
    "split", "fuse", "reorder", "parallel", "vectorize", "unroll", "annotate",
    "compute_at", "reverse_compute_at", "compute_inline", "reverse_compute_inline",
    "cache_read", "cache_write", "decompose_reduction", "rfactor", "transform_layout",
)  # fmt: skip


def run_sequence(
    task: Task, rng: random.Random, applied: Counter[str], length: int
) -> tuple[bool, Schedule, list[str]]:
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
        task = make_task(op, params)
        length = rng.randint(3, 6)
        lengths.append(length)
        ok, sch, log = run_sequence(task, rng, applied, length)
        if ok:
            n_applied += 1
            try:
                assert_correct(task, sch.program, threads=2)
            except AssertionError as e:
                raise AssertionError(f"{op} after {log}: {e}") from None
    report = ", ".join(f"{p}={applied[p]}" for p in PRIMITIVES)
    print(
        f"\napplied {n_applied}/{SEQUENCES} sequences; mean length {sum(lengths) / len(lengths):.2f}; {report}"
    )
    assert sum(lengths) / len(lengths) >= 4
    assert n_applied >= 0.7 * SEQUENCES, (
        f"only {n_applied} of {SEQUENCES} sequences applied ({report})"
    )
    low = [p for p in PRIMITIVES if applied[p] < 20]
    assert not low, f"primitives applied fewer than 20 times: {low} ({report})"
