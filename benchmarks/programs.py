"""The benchmark cases: a workload, the program that computes it, a thread count.

A case is an operator's default loop nest, that nest with some loops made
parallel / vectorized / unrolled by schedule primitives, or a hand-written
trace (the GEMM gate).
Cases that share a ``group`` are timed interleaved with each other, so their
ratio (e.g. 2 threads over 1) is not skewed by the machine drifting between
them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ir.program import Program
from ir.schedule import Schedule
from ir.task import Task, library_task

__all__ = [
    "COMPILE_GOAL_MS",
    "SPEEDUP_GOAL",
    "SUITES",
    "Case",
    "LoopSpec",
    "Suite",
    "build_case",
    "par",
    "unroll",
    "vec",
]


# The acceptance targets: 2 threads at least this much faster than 1 on
# the large element-wise program and the large matmul...
SPEEDUP_GOAL = 1.6
# ...and the default 1024³ matmul nest compiled (IR to callable) in under this.
COMPILE_GOAL_MS = 100.0


@dataclass(frozen=True)
class LoopSpec:
    """One hand-made loop decision: loop `loop` becomes `kind` with `annotations`."""

    loop: str
    kind: str
    annotations: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"loop": self.loop, "kind": self.kind, "annotations": dict(self.annotations)}

    def describe(self) -> str:
        """Short text for tables, e.g. ``j:vec16``, ``i:par``, ``rh:unroll``."""
        short = {"parallel": "par", "vectorized": "vec", "unrolled": "unroll"}.get(
            self.kind, self.kind
        )
        width = dict(self.annotations).get("vector_width")
        return f"{self.loop}:{short}{width if width else ''}"


def par(loop: str) -> LoopSpec:
    return LoopSpec(loop, "parallel")


def vec(loop: str, width: int | None = None) -> LoopSpec:
    """Vectorized; without `width` codegen picks it (the extent, capped at 4 registers)."""
    return LoopSpec(loop, "vectorized", (("vector_width", width),) if width else ())


def unroll(loop: str) -> LoopSpec:
    return LoopSpec(loop, "unrolled")


@dataclass(frozen=True)
class Case:
    """A named workload, the program to compile for it, and the threads to run it on."""

    name: str
    task: Task
    program: Program
    threads: int = 1
    loops: tuple[LoopSpec, ...] = ()
    group: str | None = None
    speedup_goal: float | None = None
    compile_goal_ms: float | None = None
    described: str = ""  # the schedule's name when it is not a list of loop kinds (a trace)

    @property
    def schedule(self) -> str:
        """How the program differs from the default nest, for tables."""
        if self.described:
            return self.described
        return " ".join(spec.describe() for spec in self.loops) or "default nest"

    @property
    def label(self) -> str:
        """Unique within a suite: workload, schedule and threads."""
        return f"{self.name} [{self.schedule}] {self.threads}T"


def build_case(
    name: str,
    op: str,
    params: dict[str, int],
    *loops: LoopSpec,
    threads: int = 1,
    group: str | None = None,
    speedup_goal: float | None = None,
    compile_goal_ms: float | None = None,
) -> Case:
    """The library task `op` with `loops` applied to its default nest, in order."""
    task = library_task(op, params)
    sch = Schedule(task.program)
    for spec in loops:
        {"parallel": sch.parallel, "vectorized": sch.vectorize, "unrolled": sch.unroll}[spec.kind](
            spec.loop
        )
        for key, value in spec.annotations:
            sch.annotate(spec.loop, key, value)
    program = sch.program
    return Case(name, task, program, threads, tuple(loops), group, speedup_goal, compile_goal_ms)


@dataclass(frozen=True)
class Suite:
    """A list of cases (full or `quick` sizes) and how to measure them.

    `kind` is ``timed`` (verify, then time against numpy), ``compile``
    (verify, then repeat the cold compile), ``db`` (no cases: the tuning
    database's queries, benchmarks/db_queries.py), ``cost_model`` (no
    cases: the cost model's ranking quality, benchmarks/cost_model.py) or
    ``tuning`` (no cases: the tuning loop's throughput, benchmarks/throughput.py).
    """

    name: str
    description: str
    kind: str
    build: Callable[[bool], list[Case]]
    # Longer repeats keep OpenBLAS's worker threads, which spin for ~0.1 s after a
    # multi-threaded numpy call, from overlapping the next kernel's timing.
    min_repeat_ms: float | None = None


def _conv3x3(hw: int, channels: int) -> dict[str, int]:
    """A 1×hw×hw×channels image, 3×3 kernel, same padding, channels in and out."""
    return {
        "n": 1,
        "h": hw,
        "w": hw,
        "ci": channels,
        "co": channels,
        "kh": 3,
        "kw": 3,
        "stride": 1,
        "pad": 1,
        "dilation": 1,
    }


def _window3x3(hw: int, channels: int, *, stride: int) -> dict[str, int]:
    """Pools and depthwise convolutions: a 3×3 window with padding 1."""
    return {"n": 1, "h": hw, "w": hw, "c": channels, "kh": 3, "kw": 3, "stride": stride, "pad": 1}


# -- default: the naive loop nest of every library operator ------------------------


def _default_cases(quick: bool) -> list[Case]:
    mm = 64 if quick else 256
    bm = (2, 32) if quick else (8, 64)
    hw, ch = (8, 8) if quick else (28, 32)
    phw, pch = (16, 16) if quick else (56, 64)
    rows, cols = (32, 128) if quick else (256, 1024)
    big = 128 if quick else 1024
    i8 = 32 if quick else 128
    conv = _conv3x3(hw, ch)
    pool, dw = _window3x3(phw, pch, stride=2), _window3x3(phw, pch, stride=1)
    return [
        build_case(f"matmul {mm}³", "matmul", {"m": mm, "n": mm, "k": mm}),
        build_case(
            f"batch_matmul {bm[0]}×{bm[1]}³",
            "batch_matmul",
            {"b": bm[0], "m": bm[1], "n": bm[1], "k": bm[1]},
        ),
        build_case(
            f"dense {mm}³ +bias +relu", "dense", {"m": mm, "n": mm, "k": mm, "bias": 1, "relu": 1}
        ),
        build_case(f"conv2d_nhwc 1×{hw}×{hw}×{ch}→{ch} 3×3", "conv2d_nhwc", conv),
        build_case(f"conv2d_nchw 1×{ch}×{hw}×{hw}→{ch} 3×3", "conv2d_nchw", conv),
        build_case(f"depthwise_conv2d_nhwc 1×{phw}×{phw}×{pch} 3×3", "depthwise_conv2d_nhwc", dw),
        build_case(f"max_pool2d 1×{phw}×{phw}×{pch} 3×3/2", "max_pool2d", pool),
        build_case(f"avg_pool2d 1×{phw}×{phw}×{pch} 3×3/2", "avg_pool2d", pool),
        build_case(f"softmax {rows}×{cols}", "softmax", {"m": rows, "n": cols}),
        build_case(f"layer_norm {rows}×{cols}", "layer_norm", {"m": rows, "n": cols}),
        build_case(f"reduce_sum {big}×{big}", "reduce_sum", {"m": big, "n": big}),
        build_case(f"reduce_max {big}×{big}", "reduce_max", {"m": big, "n": big}),
        build_case(f"gelu {rows * 2}×{cols}", "gelu", {"m": rows * 2, "n": cols}),
        build_case(f"transpose {big}×{big}", "transpose", {"m": big, "n": big}),
        build_case(f"matmul_int8 {i8}³", "matmul_int8", {"m": i8, "n": i8, "k": i8}),
    ]


# -- loopkinds: hand-marked vectorized, unrolled and parallel loops ---------------


def _loopkinds_cases(quick: bool) -> list[Case]:
    rows, cols = (32, 128) if quick else (256, 1024)
    big = 128 if quick else 1024
    hw, ch = (8, 8) if quick else (28, 32)
    phw, pch = (16, 16) if quick else (56, 64)
    i8 = 32 if quick else 128
    ew = 256 if quick else 2048  # the large element-wise program
    mm = 64 if quick else 512  # the large matmul
    conv = _conv3x3(hw, ch)
    pool, dw = _window3x3(phw, pch, stride=2), _window3x3(phw, pch, stride=1)
    gelu = {"m": rows * 2, "n": cols}
    soft = {"m": rows, "n": cols}
    cases = [
        # vectorized innermost loops
        build_case(f"gelu {rows * 2}×{cols}", "gelu", gelu, vec("j", 8)),
        build_case(f"gelu {rows * 2}×{cols}", "gelu", gelu, vec("j", 16)),
        build_case(f"softmax {rows}×{cols}", "softmax", soft, vec("j_1", 16)),  # the normalize loop
        build_case(
            f"softmax {rows}×{cols}", "softmax", soft, vec("j", 16), vec("j_1", 16)
        ),  # + exp
        build_case(f"layer_norm {rows}×{cols}", "layer_norm", soft, vec("j", 16)),
        build_case(
            f"transpose {big}×{big}", "transpose", {"m": big, "n": big}, vec("i", 8)
        ),  # gathers
        build_case(f"matmul_int8 {i8}³", "matmul_int8", {"m": i8, "n": i8, "k": i8}, vec("j")),
        # unrolled 3×3 windows (vectorized over channels)
        build_case(
            f"conv2d_nhwc 1×{hw}×{hw}×{ch}→{ch} 3×3",
            "conv2d_nhwc",
            conv,
            vec("o"),
            unroll("rh"),
            unroll("rw"),
        ),
        build_case(
            f"depthwise_conv2d_nhwc 1×{phw}×{phw}×{pch} 3×3",
            "depthwise_conv2d_nhwc",
            dw,
            vec("ch"),
            unroll("rh"),
            unroll("rw"),
        ),
        build_case(
            f"max_pool2d 1×{phw}×{phw}×{pch} 3×3/2", "max_pool2d", pool, unroll("rh"), unroll("rw")
        ),
        build_case(
            f"avg_pool2d 1×{phw}×{phw}×{pch} 3×3/2",
            "avg_pool2d",
            pool,
            vec("ch"),
            unroll("rh"),
            unroll("rw"),
        ),
    ]
    # parallel: 1 and 2 threads of one program, timed interleaved with each other
    large_gelu = {"m": ew, "n": ew}
    large_mm = {"m": mm, "n": mm, "k": mm}
    large_soft = {"m": big, "n": big}
    soft_loops = (par("i"), par("i_1"), par("i_2"), par("i_3"), vec("j", 16), vec("j_1", 16))
    for threads in (1, 2):
        cases += [
            build_case(
                f"gelu {ew}×{ew}",
                "gelu",
                large_gelu,
                par("i"),
                vec("j", 16),
                threads=threads,
                group=f"gelu {ew}×{ew} vec16",
                speedup_goal=SPEEDUP_GOAL,
            ),
            build_case(
                f"gelu {ew}×{ew}",
                "gelu",
                large_gelu,
                par("i"),
                vec("j", 8),
                threads=threads,
                group=f"gelu {ew}×{ew} vec8",
                speedup_goal=SPEEDUP_GOAL,
            ),
            build_case(
                f"matmul {mm}³",
                "matmul",
                large_mm,
                par("i"),
                vec("j"),
                threads=threads,
                group=f"matmul {mm}³",
                speedup_goal=SPEEDUP_GOAL,
            ),
            build_case(
                f"softmax {big}×{big}",
                "softmax",
                large_soft,
                *soft_loops,
                threads=threads,
                group=f"softmax {big}×{big}",
            ),
            # nearly no work: what one fork-join (thread create + join) costs
            build_case(
                "gelu 2×64",
                "gelu",
                {"m": 2, "n": 64},
                par("i"),
                vec("j", 16),
                threads=threads,
                group="gelu 2×64 (fork-join cost)",
            ),
        ]
    return cases


# -- compile: IR to callable, cold cache -------------------------------------------


def _compile_cases(quick: bool) -> list[Case]:
    mm = 128 if quick else 1024
    hw, ch = (8, 8) if quick else (28, 32)
    rows, cols = (32, 128) if quick else (256, 1024)
    ew = 256 if quick else 2048
    conv = _conv3x3(hw, ch)
    return [
        build_case(
            f"matmul {mm}³", "matmul", {"m": mm, "n": mm, "k": mm}, compile_goal_ms=COMPILE_GOAL_MS
        ),
        build_case(
            f"matmul {mm}³", "matmul", {"m": mm, "n": mm, "k": mm}, par("i"), vec("j"), threads=2
        ),
        build_case(f"conv2d_nhwc 1×{hw}×{hw}×{ch}→{ch} 3×3", "conv2d_nhwc", conv),
        build_case(
            f"conv2d_nhwc 1×{hw}×{hw}×{ch}→{ch} 3×3",
            "conv2d_nhwc",
            conv,
            vec("o"),
            unroll("rh"),
            unroll("rw"),
        ),
        build_case(
            f"conv2d_nhwc 1×{hw}×{hw}×{ch}→{ch} 3×3",
            "conv2d_nhwc",
            conv,
            unroll("rh"),
            unroll("rw"),
        ),
        build_case(f"softmax {rows}×{cols}", "softmax", {"m": rows, "n": cols}),
        build_case(f"layer_norm {rows}×{cols}", "layer_norm", {"m": rows, "n": cols}),
        build_case(
            f"gelu {ew}×{ew}", "gelu", {"m": ew, "n": ew}, par("i"), vec("j", 16), threads=2
        ),
    ]


# -- gemm: the kernel-quality gate's hand-written traces (docs/gemm.md) --------------

GEMM_SPEEDUP_GOAL = 1.7


def _gemm_cases(quick: bool) -> list[Case]:
    import importlib.util
    from pathlib import Path

    from codegen.host import host_target
    from tuner.trace.file import TraceFile

    examples = Path(__file__).resolve().parent.parent / "examples"
    spec = importlib.util.spec_from_file_location("gemm_traces", examples / "gemm_traces.py")
    assert spec is not None and spec.loader is not None
    gemm_traces = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gemm_traces)
    n = 192 if quick else 1024
    cases = []
    for name, threads in gemm_traces.trace_files(host_target().vector_bits):
        trace_file = TraceFile.load(examples / name)
        task = trace_file.task({"m": str(n), "n": str(n), "k": str(n)})
        program = trace_file.trace.apply(task.program, repair=True).program
        cases.append(
            Case(
                f"matmul {n}³",
                task,
                program,
                threads,
                (),
                f"gemm {n}³",
                GEMM_SPEEDUP_GOAL,
                None,
                f"examples/{name}",
            )
        )
    return cases


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(
            "default",
            "the default loop nest of each library operator, 1 thread",
            "timed",
            _default_cases,
        ),
        Suite(
            "loopkinds",
            "hand-marked vectorized, unrolled and parallel loops; 1- and 2-thread runs of one "
            "program are timed interleaved with each other",
            "timed",
            _loopkinds_cases,
        ),
        Suite(
            "gemm",
            "the hand-written GEMM traces at 1 and 2 threads, timed interleaved with each other "
            "and with numpy (packing inside the kernel)",
            "timed",
            _gemm_cases,
            min_repeat_ms=300.0,
        ),
        Suite(
            "db",
            "the search's queries on the tuning database (100,000 records: 50 workloads × 2 "
            "targets, 10% failures) in a SQLite file and in PostgreSQL on this machine, through "
            "SQLDatabase",
            "db",
            lambda quick: [],  # no kernels: benchmarks/db_queries.py fills and asks the databases
        ),
        Suite(
            "service",
            "the coordinator under load: result submissions/s and lease round trips of simulated "
            "workers over HTTP on PostgreSQL, and 2 real workers against embedded tuning",
            "service",
            lambda quick: [],  # no kernels: benchmarks/service_bench.py runs the processes
        ),
        Suite(
            "cost_model",
            "ranking quality of the cost model (XGBoost regression and rank objectives, a "
            "scikit-learn random forest, random) on real measurements of replay-sampled "
            "candidates, held-out workloads",
            "cost_model",
            lambda quick: [],  # no kernels: benchmarks/cost_model.py measures and evaluates
        ),
        Suite(
            "tuning",
            "the tuning loop's throughput: candidates measured per second (replay, compile, "
            "verify, time, record) by the local pool on every core and on one, small kernels",
            "tuning",
            lambda quick: [],  # no cases: benchmarks/throughput.py runs the loop itself
        ),
        Suite(
            "compile",
            "compile time, loomtune IR to callable (lower, emit LLVM IR, O3, JIT) with a cold cache",
            "compile",
            _compile_cases,
        ),
    )
}
