"""``python -m benchmarks run [--suite NAME] [--quick] [--out DIR] [--seed S]`` · ``models`` · ``report``.

Every ``run`` and ``tune`` writes its full result into ``--out`` (default
``benchmarks/results/``, ignored by git) and appends one line to the record
(``--record``, default the committed ``benchmarks/results.jsonl``); ``report``
regenerates docs/results.md (and README.md's results block) from the record.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the environment before
numpy is imported: OpenBLAS reads them once when it loads, and a forced core
type or cache size (set for other tools on some machines) makes numpy slower,
which would flatter loomtune. Only this process is affected: importing this
module (as the tests do) changes nothing.
"""

import os
import sys

_SLOW_BLAS_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
UNSET_ENVIRONMENT: dict[str, str] = {}
if __name__ == "__main__":
    if "numpy" in sys.modules:  # too late to matter; say so rather than pretend
        print("warning: numpy was imported before the environment was cleaned", file=sys.stderr)
    UNSET_ENVIRONMENT = {k: os.environ.pop(k) for k in _SLOW_BLAS_VARIABLES if k in os.environ}

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

RECORD_HELP = "append the run's line to this record (default benchmarks/results.jsonl)"


def _parser() -> argparse.ArgumentParser:
    from benchmarks.programs import SUITES

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="measure a suite and write a result file")
    run.add_argument("--suite", choices=sorted(SUITES), default="default")
    run.add_argument(
        "--quick", action="store_true", help="small sizes, few repeats: a smoke test (< 30 s)"
    )
    run.add_argument(
        "--out", type=Path, default=None, help="result folder (default benchmarks/results)"
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the inputs (default 0)")
    run.add_argument("--record", type=Path, default=None, help=RECORD_HELP)
    run.add_argument(
        "--wait-quiet",
        type=float,
        default=None,
        metavar="S",
        help="before each timing wait up to S seconds for other processes to leave the CPUs "
        "(default 60, quick 0)",
    )
    _tune_parser(sub)
    _models_parser(sub)
    _lowp_parser(sub)
    report = sub.add_parser(
        "report", help="regenerate docs/results.md (and README.md's results block) from the record"
    )
    report.add_argument(
        "--record", type=Path, default=None, help="the record (default benchmarks/results.jsonl)"
    )
    report.add_argument(
        "--doc", type=Path, default=None, help="the page to write (default docs/results.md)"
    )
    report.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="README whose results block to update, where it has the markers (default the "
        "repository's)",
    )
    return parser


def _tune_parser(sub: argparse._SubParsersAction) -> None:
    tune = sub.add_parser(
        "tune", help="tune the suite workloads, time the best kernels against numpy and PyTorch"
    )
    tune.add_argument("--trials", type=int, default=256, help="budget per workload (default 256)")
    tune.add_argument(
        "--only",
        default=None,
        metavar="NAMES",
        help="comma-separated workloads (matmul, dense, ...); also evo_replay's",
    )
    tune.add_argument(
        "--extras",
        default="",
        metavar="NAMES",
        help="comma-separated: evo_replay, reuse, scheduler (default none)",
    )
    tune.add_argument("--strategy", default="evolutionary")
    tune.add_argument(
        "--seeds",
        "--evo-seeds",
        dest="evo_seeds",
        type=int,
        default=1,
        help="evo_replay, reuse, scheduler: seeds to take the median over (1)",
    )
    tune.add_argument(
        "--suite-name",
        default=None,
        help="the result's suite (default tune; tune_only with --only; tune_extras)",
    )
    tune.add_argument(
        "--replay-trials",
        type=int,
        default=64,
        help="evo_replay's budget per workload and seed (64; at most --trials)",
    )
    tune.add_argument(
        "--no-main",
        action="store_true",
        help="no main table: only the extras (scheduler; evo_replay runs its own evolutionary "
        "curves on each workload); suite tune_extras",
    )
    tune.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    tune.add_argument(
        "--threads",
        type=_thread_counts,
        default=[1, 2],
        metavar="N[,N…]",
        help="tune and compare every workload at each thread count (default 1,2)",
    )
    tune.add_argument(
        "--parallel-only",
        default=None,
        metavar="NAMES",
        help="comma-separated workloads: thread counts above 1 only for these (default every "
        "workload at every count)",
    )
    tune.add_argument(
        "--layers",
        action="store_true",
        help="BERT-base's and ResNet-18's layer shapes as extra rows (slow: 7 more workloads)",
    )
    tune.add_argument(
        "--with-tvm",
        action="store_true",
        help="TVM MetaSchedule on the same workloads and budget, its best kernel timed beside "
        "ours (needs the bench extra; tuned records cached, see --tvm-cache)",
    )
    tune.add_argument(
        "--tvm-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="TVM's tuned records (default benchmarks/.tvm_cache): a cached run is re-timed, "
        "not re-tuned",
    )
    tune.add_argument(
        "--tvm-time-limit",
        type=float,
        default=None,
        metavar="S",
        help="most seconds of TVM tuning per workload (default 900)",
    )
    tune.add_argument(
        "--tvm-retune", action="store_true", help="tune with TVM again even when cached"
    )
    tune.add_argument(
        "--neighbour",
        action="store_true",
        help="also time each 1-thread final kernel, numpy and PyTorch beside a memory-bandwidth "
        "neighbour on the other core (a child process the run starts and stops): slowdowns",
    )
    tune.add_argument("--quick", action="store_true", help="tiny workloads: a smoke test")
    tune.add_argument("--out", type=Path, default=None, help="result folder")
    tune.add_argument("--record", type=Path, default=None, help=RECORD_HELP)
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--wait-quiet", type=float, default=None, metavar="S")


def _models_parser(sub: argparse._SubParsersAction) -> None:
    models = sub.add_parser(
        "models",
        help="whole models (BERT-base, ResNet-18, MobileNetV2) against ONNX Runtime "
        "and PyTorch (needs torch, the bench extra)",
    )
    models.add_argument(
        "--models",
        default="bert,resnet18,mobilenetv2",
        metavar="NAMES",
        help="comma-separated: bert, resnet18, mobilenetv2, resnet34 (default the first three)",
    )
    models.add_argument(
        "--threads", type=_thread_counts, default=[1], metavar="N[,N…]",
        help="threads of every engine; several: each model at each (default 1)",
    )  # fmt: skip
    models.add_argument(
        "--tune-minutes", type=_minutes, default=None, metavar="M[,M…]",
        help="tune each model for up to M minutes in all (finalists' re-times included) before "
        "timing it: one M for every thread "
        "count, or one per thread count in --threads order (e.g. 30,10)",
    )  # fmt: skip
    models.add_argument(
        "--repeat", type=int, default=3, metavar="N",
        help="interleaved timing rounds per model and thread count (default 3)",
    )  # fmt: skip
    models.add_argument(
        "--tune-trials", type=int, default=100_000, metavar="N",
        help="with --tune-minutes: the model's whole budget of trials (default no limit)",
    )  # fmt: skip
    models.add_argument(
        "--database", default=None, metavar="URL",
        help="the tuning database (default: LOOMTUNE_DATABASE_URL, else the local file)",
    )  # fmt: skip
    models.add_argument("--quick", action="store_true", help="tiny models: a smoke test")
    models.add_argument("--no-memory", action="store_true", help="skip the peak-RSS children")
    models.add_argument("--out", type=Path, default=None, help="result folder")
    models.add_argument("--record", type=Path, default=None, help=RECORD_HELP)
    models.add_argument("--seed", type=int, default=0, help="seed of weights and inputs (0)")
    models.add_argument(
        "--wait-quiet", type=float, default=None, metavar="S",
        help="before each timing wait up to S seconds for a quiet machine (default 60, quick 0)",
    )  # fmt: skip


def _lowp_parser(sub: argparse._SubParsersAction) -> None:
    lowp = sub.add_parser(
        "lowp",
        help="int8 / bf16: tune matmul_int8, matmul_bf16 and dense_int8, time them against "
        "numpy float32 and PyTorch's int8 / bf16 paths (1 thread)",
    )
    lowp.add_argument("--trials", type=int, default=64, help="budget per workload (default 64)")
    lowp.add_argument(
        "--only", default=None, metavar="OPS", help="comma-separated operators (matmul_int8, ...)"
    )
    lowp.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    lowp.add_argument("--quick", action="store_true", help="tiny workloads: a smoke test")
    lowp.add_argument("--out", type=Path, default=None, help="result folder")
    lowp.add_argument("--record", type=Path, default=None, help=RECORD_HELP)
    lowp.add_argument("--seed", type=int, default=0)
    lowp.add_argument(
        "--wait-quiet", type=float, default=None, metavar="S",
        help="before each timing wait up to S seconds for a quiet machine (default 60, quick 0)",
    )  # fmt: skip


def _thread_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected thread counts like 1,2, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"thread counts must be at least 1, got {text!r}")
    return counts


def _quiet_wait(args: argparse.Namespace) -> float:
    """--wait-quiet, else 60 s (0 for a --quick smoke run)."""
    if args.wait_quiet is not None:
        return args.wait_quiet
    return 0.0 if args.quick else 60.0


def _names(text: str | None) -> list[str] | None:
    """A comma-separated --only, or None for every workload."""
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


def _minutes(text: str) -> list[float]:
    try:
        minutes = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected minutes like 30 or 30,10, got {text!r}"
        ) from None
    if not minutes or min(minutes) <= 0:
        raise argparse.ArgumentTypeError(f"minutes must be positive, got {text!r}")
    return minutes


def _models(args: argparse.Namespace, command: str) -> int:
    from benchmarks import common, report
    from benchmarks.models import definitions

    try:
        import torch  # noqa: F401
    except ImportError:
        print("the models benchmark needs PyTorch: pip install torch==2.13.0", file=sys.stderr)
        return 2
    names = _names(args.models) or []
    unknown = sorted(set(names) - set(definitions.MODELS))
    if unknown or not names:
        print(
            f"unknown models {unknown}; expected some of {list(definitions.MODELS)}",
            file=sys.stderr,
        )
        return 2
    from benchmarks.models.run import Tuning, report_tables, run_and_write

    tuning = None
    if args.tune_minutes is not None:
        minutes = args.tune_minutes
        if len(minutes) not in (1, len(args.threads)):
            print(
                f"--tune-minutes gives {len(minutes)} values for {len(args.threads)} thread "
                "counts: give one, or one per thread count",
                file=sys.stderr,
            )
            return 2
        per_threads = tuple(zip(args.threads, minutes)) if len(minutes) > 1 else ()
        tuning = Tuning(minutes[0], args.tune_trials, per_threads)
    if args.repeat < 1:
        print(f"--repeat must be at least 1, got {args.repeat}", file=sys.stderr)
        return 2

    result, path = run_and_write(
        models=names,
        threads=args.threads,
        quick=args.quick,
        seed=args.seed,
        quiet_wait_s=_quiet_wait(args),
        memory=not args.no_memory,
        out_dir=args.out or common.RESULTS_DIR,
        record=args.record or common.RECORD,
        command=command,
        environment={"unset": UNSET_ENVIRONMENT},
        log=common.log,
        tuning=tuning,
        database_url=args.database,
        repeat=args.repeat,
    )
    for caption, table, note in report_tables(result):
        if caption:
            print(caption)
        print(report.text_table(table))
        if note:
            print(note)
    print(f"\nwrote {path}", file=sys.stderr)
    return 0 if all(row["correct"] for row in result["rows"]) else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point; `argv` defaults to the command line (tests pass their own)."""
    args = _parser().parse_args(argv)
    command = "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv)
    from benchmarks import common

    if args.command == "run":
        from benchmarks import harness, report

        result, path = harness.run_suite(
            harness.SUITES[args.suite],
            quick=args.quick,
            out_dir=args.out or common.RESULTS_DIR,
            seed=args.seed,
            quiet_wait_s=args.wait_quiet,
            command=command,
            environment={"unset": UNSET_ENVIRONMENT},
            record=args.record or common.RECORD,
        )
        print(report.text_report(result))
        print(f"\nwrote {path}", file=sys.stderr)
        return 0 if all(row["correct"] for row in result["rows"]) else 1

    if args.command == "tune":
        return _tune(args, command)
    if args.command == "models":
        return _models(args, command)
    if args.command == "lowp":
        return _lowp(args, command)

    from benchmarks import results_doc

    record = args.record or common.RECORD
    if not record.exists():
        print(f"no record at {record}", file=sys.stderr)
        return 1
    for path in results_doc.write(
        record, args.doc or results_doc.DOC, args.readme or results_doc.README
    ):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _lowp(args: argparse.Namespace, command: str) -> int:
    from benchmarks import common, report
    from benchmarks.lowp.report import tables
    from benchmarks.lowp.run import run_and_write

    try:
        result, path = run_and_write(
            out_dir=args.out or common.RESULTS_DIR,
            record=args.record or common.RECORD,
            command=command,
            environment={"unset": UNSET_ENVIRONMENT},
            log=common.log,
            trials=args.trials,
            quick=args.quick,
            only=_names(args.only),
            seed=args.seed,
            quiet_wait_s=_quiet_wait(args),
            with_torch=not args.no_torch,
        )
    except ValueError as error:  # an unknown workload in --only
        print(error, file=sys.stderr)
        return 2
    for caption, table in tables(result):
        if caption:
            print(caption)
        print(report.text_table(table))
    print(f"\nwrote {path}", file=sys.stderr)
    return 0 if all(row["correct"] for row in result["rows"]) else 1


def _tune(args: argparse.Namespace, command: str) -> int:
    from benchmarks import common, report
    from benchmarks.tune import report as tune_report
    from benchmarks.tune.run import run_and_write
    from benchmarks.tune.suite import EXTRAS, select, thread_rows

    if args.with_tvm:
        from benchmarks.tune import tvm_ref

        try:
            tvm_ref.require_tvm()
        except tvm_ref.TVMMissing as error:
            print(error, file=sys.stderr)
            return 2
    extras = [e for e in args.extras.split(",") if e]
    unknown = sorted(set(extras) - set(EXTRAS))
    if unknown:
        print(f"unknown extras {unknown}; expected some of {list(EXTRAS)}", file=sys.stderr)
        return 2
    try:  # a --parallel-only name this run has no workload of: one line, before any tuning
        thread_rows(
            select(quick=args.quick, only=_names(args.only), layers=args.layers, small=True),
            args.threads,
            _names(args.parallel_only),
        )
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    result, path = run_and_write(
        out_dir=args.out or common.RESULTS_DIR,
        record=args.record or common.RECORD,
        command=command,
        environment={"unset": UNSET_ENVIRONMENT},
        log=common.log,
        trials=args.trials,
        quick=args.quick,
        only=_names(args.only),
        extras=extras,
        layers=args.layers,
        threads=args.threads,
        parallel_only=_names(args.parallel_only),
        seed=args.seed,
        quiet_wait_s=_quiet_wait(args),
        strategy=args.strategy,
        replay_trials=args.replay_trials,
        with_torch=not args.no_torch,
        main=not args.no_main,
        evo_seeds=args.evo_seeds,
        suite=args.suite_name,
        with_tvm=args.with_tvm,
        tvm_cache_dir=args.tvm_cache,
        tvm_time_limit_s=args.tvm_time_limit,
        tvm_retune=args.tvm_retune,
        neighbour=args.neighbour,
    )
    for caption, table, note in tune_report.report_tables(result):
        if caption:
            print(caption)
        print(report.text_table(table))
        if note:
            print(note)
    print(f"\nwrote {path}", file=sys.stderr)
    return 0 if all(row["correct"] for row in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
