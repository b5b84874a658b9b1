"""``python -m benchmarks run [--suite NAME] [--quick] [--out DIR] [--seed S]`` · ``python -m benchmarks report``.

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
    run.add_argument(
        "--wait-quiet",
        type=float,
        default=None,
        metavar="S",
        help="before each timing wait up to S seconds for other processes to leave the CPUs "
        "(default 60, quick 0)",
    )
    report = sub.add_parser("report", help="regenerate README.md's results from the result files")
    report.add_argument(
        "--results", type=Path, default=None, help="result folder (default benchmarks/results)"
    )
    report.add_argument(
        "--readme", type=Path, default=None, help="README to update (default the repository's)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; `argv` defaults to the command line (tests pass their own)."""
    args = _parser().parse_args(argv)
    command = "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        from benchmarks import harness, report

        result, path = harness.run_suite(
            harness.SUITES[args.suite],
            quick=args.quick,
            out_dir=args.out or harness.RESULTS_DIR,
            seed=args.seed,
            quiet_wait_s=args.wait_quiet,
            command=command,
            environment={"unset": UNSET_ENVIRONMENT},
        )
        print(report.text_report(result))
        print(f"\nwrote {path}", file=sys.stderr)
        return 0 if all(row["correct"] for row in result["rows"]) else 1

    from benchmarks import harness, report

    readme = args.readme or report.README
    used = report.update_readme(args.results or harness.RESULTS_DIR, readme)
    if not used:
        print(f"no full result files in {args.results or harness.RESULTS_DIR}", file=sys.stderr)
        return 1
    for path in used:
        print(f"used {path}", file=sys.stderr)
    print(f"updated {readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
