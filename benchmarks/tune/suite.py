"""The tuning benchmark's workloads, checkpoints and per-workload goals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ir.task import Task, library_task

CHECKPOINTS = (16, 32, 64, 128, 256)
EXTRAS = ("evo_replay", "reuse", "scheduler")


def checkpoints(trials: int) -> list[int]:
    """The trial counts the table reports: 16, 32, ... below the budget, and the budget."""
    return sorted({c for c in CHECKPOINTS if c < trials} | {trials})


@dataclass(frozen=True)
class SuiteWorkload:
    name: str
    op: str
    params: dict[str, int]
    weight: float = 1.0  # in the scheduler extra

    def task(self) -> Task:
        return library_task(self.op, self.params)


SUITE = (
    SuiteWorkload("matmul 512³", "matmul", {"m": 512, "n": 512, "k": 512}, 1),
    SuiteWorkload("matmul 1024³", "matmul", {"m": 1024, "n": 1024, "k": 1024}, 1),
    SuiteWorkload(
        "dense+bias+relu 128×768→3072",
        "dense",
        {"m": 128, "k": 768, "n": 3072, "bias": 1, "relu": 1},
        4,
    ),
    SuiteWorkload(
        "conv2d_nhwc 1×56×56×64→64 3×3",
        "conv2d_nhwc",
        {
            "n": 1,
            "h": 56,
            "w": 56,
            "ci": 64,
            "co": 64,
            "kh": 3,
            "kw": 3,
            "stride": 1,
            "pad": 1,
            "dilation": 1,
        },
        4,
    ),
    SuiteWorkload(
        "batch_matmul 12×128×128×64", "batch_matmul", {"b": 12, "m": 128, "n": 128, "k": 64}, 2
    ),
    SuiteWorkload("softmax 4096×1024", "softmax", {"m": 4096, "n": 1024}, 2),
)

SMALL = (
    SuiteWorkload(
        "batch_matmul 16×64×64×96", "batch_matmul", {"b": 16, "m": 64, "n": 64, "k": 96}, 2
    ),
)
"""Rows of the full run's table after the suite's six (not in the extras, which take the six):
small batched matmuls, where per-batch packing and remainders cost more than they save."""

QUICK_SUITE = (
    SuiteWorkload("matmul 32³", "matmul", {"m": 32, "n": 32, "k": 32}, 1),
    SuiteWorkload("softmax 16×64", "softmax", {"m": 16, "n": 64}, 2),
)


def _conv3x3(name: str, hw: int, c: int, weight: float = 1.0) -> SuiteWorkload:
    """A 3×3, stride 1, pad 1 convolution keeping `c` channels, NHWC, batch 1."""
    params = {"n": 1, "h": hw, "w": hw, "ci": c, "co": c, "kh": 3, "kw": 3}
    return SuiteWorkload(
        name, "conv2d_nhwc", {**params, "stride": 1, "pad": 1, "dilation": 1}, weight
    )


LAYERS = (
    SuiteWorkload("BERT-base matmul 128×768×768", "matmul", {"m": 128, "k": 768, "n": 768}),
    SuiteWorkload("BERT-base matmul 128×768×3072", "matmul", {"m": 128, "k": 768, "n": 3072}),
    SuiteWorkload("BERT-base matmul 128×3072×768", "matmul", {"m": 128, "k": 3072, "n": 768}),
    _conv3x3("ResNet-18 conv 56²×64→64 3×3", 56, 64),
    _conv3x3("ResNet-18 conv 28²×128→128 3×3", 28, 128),
    _conv3x3("ResNet-18 conv 14²×256→256 3×3", 14, 256),
    _conv3x3("ResNet-18 conv 7²×512→512 3×3", 7, 512),
)
"""The layer shapes of BERT-base (sequence 128: attention projections, FFN up and down)
and of ResNet-18's four stages: extra rows (``--layers``), too slow for the default run."""

QUICK_LAYERS = (
    SuiteWorkload("layer matmul 16×24×40", "matmul", {"m": 16, "k": 24, "n": 40}),
    _conv3x3("layer conv 6²×8→8 3×3", 6, 8),
)

REUSE_FROM = {"m": 1024, "n": 1024, "k": 1024}
REUSE_TO = {"m": 1000, "n": 1000, "k": 1000}


def short_name(w: SuiteWorkload) -> str:
    return w.name.split()[0]


def select(
    *,
    quick: bool = False,
    only: Sequence[str] | None = None,
    layers: bool = False,
    small: bool = False,
) -> list[SuiteWorkload]:
    """The suite (or the quick suite), with the small rows (`SMALL`, not in a quick run) after
    it when `small` and the layer shapes when `layers`, restricted to the names in `only`
    (short or full)."""
    workloads = list(QUICK_SUITE if quick else SUITE)
    if small and not quick:
        workloads += SMALL
    if layers:
        workloads += QUICK_LAYERS if quick else LAYERS
    if only:
        workloads = [w for w in workloads if is_named(w, only)]
    return workloads


def is_named(w: SuiteWorkload, names: Sequence[str]) -> bool:
    """Whether one of `names` (short or full, any case) names `w`."""
    return bool({short_name(w).lower(), w.name.lower()} & {n.strip().lower() for n in names})


def thread_rows(
    workloads: Sequence[SuiteWorkload],
    threads: Sequence[int],
    parallel_only: Sequence[str] | None = None,
) -> list[tuple[SuiteWorkload, int]]:
    """(workload, thread count) for each row, workload by workload: every workload at every
    count, or, with `parallel_only` (short or full names), the counts above one only for the
    workloads it names (issue 36's 2-thread rows are two of the seventeen)."""
    if parallel_only is not None:
        unknown = [n for n in parallel_only if not any(is_named(w, [n]) for w in workloads)]
        if unknown:
            raise ValueError(f"--parallel-only: no workload named {', '.join(unknown)} in this run")
    return [
        (w, n)
        for w in workloads
        for n in threads
        if n == 1 or parallel_only is None or is_named(w, parallel_only)
    ]


# The tuning suite's goals, per workload: (op, params) -> (ratio to numpy, after how many
# trials (None: the final kernel), most seconds of tuning (None: no limit)).
GOALS: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[float, int | None, float | None]] = {
    ("matmul", (("k", 1024), ("m", 1024), ("n", 1024))): (0.9, None, None),
    ("matmul", (("k", 512), ("m", 512), ("n", 512))): (0.7, 64, None),
    ("dense", (("bias", 1), ("k", 768), ("m", 128), ("n", 3072), ("relu", 1))): (1.2, None, None),
    ("conv2d_nhwc", tuple(sorted(SUITE[3].params.items()))): (2.0, None, None),
    ("batch_matmul", (("b", 12), ("k", 64), ("m", 128), ("n", 128))): (1.0, None, None),
    ("batch_matmul", (("b", 16), ("k", 96), ("m", 64), ("n", 64))): (1.0, None, None),
    ("softmax", (("m", 4096), ("n", 1024))): (3.0, None, 600.0),
}
