"""`loomtune jobs submit|list|show|cancel` and `loomtune best --coordinator URL`: a coordinator over HTTP.

`jobs submit --model FILE.onnx` sends the model's structure without its weights
(`frontend.stripped`); the coordinator tunes its distinct tasks under one budget and
`jobs show` prints each task's trials, best and share of the model's time.

The coordinator is `--coordinator URL` or LOOMTUNE_COORDINATOR, the token
`--token T` or LOOMTUNE_TOKEN (a client token; an admin's sees every job).
All of it goes through `service.client.Client`; a refusal of the API prints
one line (`loomtune: error: coordinator: 404 job 7 not found`) and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from service.cli.common import (
    Parser,
    UsageError,
    best_line,
    log,
    parse_workload_args,
    positive_int,
    print_json,
)

JOB_FIELDS = ("id", "status", "trials", "trials_done", "best_latency_ms", "error", "waiting_reason")
"""The fields of `jobs submit --json` and `jobs show --json` (DESIGN.md); a few more follow them."""
EXTRA_FIELDS = (
    "note",
    "op",
    "params",
    "workload_key",
    "target",
    "strategy",
    "seed",
    "best_record_id",
    "model",
)
TASK_FIELDS = ("key", "op", "pattern", "count", "job_id", "trials", "best_ms", "share")
"""A model job's per-task fields in --json (`model.tasks`)."""
EXIT_JOB_FAILED = 1


def add_connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--coordinator", metavar="URL", help="the coordinator (default: LOOMTUNE_COORDINATOR)"
    )
    p.add_argument("--token", metavar="T", help="API token (default: LOOMTUNE_TOKEN)")


def add_jobs_parsers(sub: Any) -> None:
    jobs = sub.add_parser("jobs", help="a coordinator's tuning jobs: submit, list, show, cancel")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True, parser_class=Parser)

    submit = jobs_sub.add_parser("submit", help="submit a tuning job to the coordinator")
    submit.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    submit.add_argument(
        "--workload", dest="workload_file", metavar="FILE.json", help="custom workload definition"
    )
    submit.add_argument(
        "--model",
        metavar="FILE.onnx",
        help="tune a model's distinct tasks under one budget (its weights are not sent)",
    )
    submit.add_argument(
        "--trials",
        type=positive_int,
        default=64,
        metavar="N",
        help="measurements to make (default 64; for --model, the whole model's)",
    )
    submit.add_argument(
        "--target",
        metavar="T",
        default="host",
        help="'host' (the workers' CPU, default) or 'llvm -mcpu=... -mattr=... -num-threads=N'",
    )
    submit.add_argument(
        "--strategy",
        metavar="S",
        help="search strategy (default: the coordinator's best available)",
    )
    submit.add_argument(
        "--seed", type=int, default=None, metavar="S", help="random seed of the search"
    )
    submit.add_argument(
        "--wait",
        action="store_true",
        help="follow the job until it ends (a progress bar on a terminal)",
    )
    submit.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_args(submit)

    listing = jobs_sub.add_parser(
        "list", help="your jobs (an admin's token: everyone's), newest first"
    )
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_args(listing)

    show = jobs_sub.add_parser("show", help="a job: status, trials, best so far")
    show.add_argument("id", type=positive_int, metavar="ID", help="the job's id")
    show.add_argument(
        "--plot", metavar="FILE.png", help="write the tuning curve (best so far vs trials)"
    )
    show.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_args(show)

    cancel = jobs_sub.add_parser("cancel", help="stop a job, keeping its records")
    cancel.add_argument("id", type=positive_int, metavar="ID", help="the job's id")
    cancel.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_args(cancel)


def make_client(args: argparse.Namespace) -> Any:
    """The API client of a command's --coordinator / --token (tests replace this)."""
    from service.client import Client

    return Client(args.coordinator, args.token)


def job_json(job: dict[str, Any]) -> dict[str, Any]:
    """The command's JSON for a job: DESIGN.md's fields first, then a few more."""
    workload = job.get("workload") or {}
    model = job.get("model")
    out = {k: job.get(k) for k in JOB_FIELDS}
    out.update(
        note=job.get("note"),
        op=workload.get("op") if not model else "model",
        params=workload.get("params"),
        workload_key=workload.get("key"),
        target=job.get("target"),
        strategy=job.get("strategy"),
        seed=job.get("seed"),
        best_record_id=job.get("best_record_id"),
        model=None
        if not model
        else {
            "name": model["name"],
            "model_key": model["model_key"],
            "tasks": [{k: t.get(k) for k in TASK_FIELDS} for t in model["tasks"]],
        },
    )
    return out


def _describe(job: dict[str, Any]) -> str:
    model = job.get("model")
    if model:
        return f"model {model['name']} ({len(model['tasks'])} tasks)"
    workload = job.get("workload") or {}
    params = " ".join(f"{k}={v}" for k, v in (workload.get("params") or {}).items())
    return f"{workload.get('op', '?')} {params}".strip()


def short_target(text: str) -> str:
    """`llvm -mcpu=znver3 -mattr=+a,+b -num-threads=2` -> `znver3 (2 features), 2 thread(s)` (the full string is in --json)."""
    words = dict(w.partition("=")[::2] for w in text.split()[1:])
    if "-mcpu" not in words:
        return text
    features = len([f for f in words.get("-mattr", "").split(",") if f])
    return f"{words['-mcpu']} ({features} features), {words.get('-num-threads', '1')} thread(s)"


def _best_text(job: dict[str, Any]) -> str:
    best = job.get("best_latency_ms")
    return f"{best:.4f} ms" if best is not None else "-"


def cmd_jobs(args: argparse.Namespace) -> int:
    return {"submit": _submit, "list": _list, "show": _show, "cancel": _cancel}[args.jobs_command](
        args
    )


def _submit(args: argparse.Namespace) -> int:

    if args.model is not None and (args.workload or args.workload_file):
        raise UsageError("--model tunes a whole model: name no operator or --workload with it")
    if args.model is None and args.workload_file is None and not args.workload:
        raise UsageError(
            "name an operator (see `loomtune ops`), or pass --workload FILE.json or --model FILE.onnx"
        )
    options = dict(trials=args.trials, target=args.target, strategy=args.strategy, seed=args.seed)
    with make_client(args) as client:
        if args.model is not None:
            job = client.submit_model(args.model, **options)
        else:
            op, params = parse_workload_args(args.workload, args.workload_file)
            workload: Any = Path(args.workload_file) if op is None else op
            job = client.submit(workload, params, **options)
        log(
            f"submitted job {job['id']}: {_describe(job)}, {job['trials']} trials on {short_target(job['target'])} ({job['status']})"
        )
        if job.get("waiting_reason"):
            log(f"job {job['id']}: {job['waiting_reason']}")
        if args.wait:
            try:
                job = _follow(client, job)
            except KeyboardInterrupt:
                log(
                    f"stopped following job {job['id']}; it goes on (`loomtune jobs show {job['id']}`)"
                )
                return 130
    if args.json:
        print_json(job_json(job))
    else:
        _print_job(job)
    return _job_exit(job) if args.wait else 0


def _job_exit(job: dict[str, Any]) -> int:

    if job["status"] == "failed":
        log(f"loomtune: job {job['id']} failed: {job.get('error') or 'no reason given'}")
        return EXIT_JOB_FAILED
    if job["status"] == "cancelled":
        log(f"loomtune: job {job['id']} was cancelled after {job['trials_done']} trial(s)")
        return EXIT_JOB_FAILED
    return 0


POLL_SECONDS = 1.0


def _follow(client: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Poll the job until it ends: a progress bar when stderr is a terminal, else a line per change of state."""

    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        progress = Progress(
            TextColumn(f"job {job['id']}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[state]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        bar = progress.add_task(
            "job", total=job["trials"], completed=job["trials_done"], state=job["status"]
        )

        def on_progress(j: dict[str, Any]) -> None:
            state = f"{j['status']}  best: {_best_text(j)}"
            if j.get("waiting_reason"):
                state += f"  ({j['waiting_reason']})"
            progress.update(bar, completed=j["trials_done"], state=state)

        with progress:
            return client.wait(job["id"], poll_seconds=POLL_SECONDS, on_progress=on_progress)

    seen: list[tuple[Any, ...]] = [(job["status"], job.get("waiting_reason"))]
    last_log = [time.monotonic()]

    def on_change(j: dict[str, Any]) -> None:
        state = (j["status"], j.get("waiting_reason"))
        now = time.monotonic()
        # A line per change of state; while running, at most one every 10 s.
        if state != seen[0] or (j["status"] == "running" and now - last_log[0] >= 10):
            seen[0] = state
            last_log[0] = now
            why = f" ({j['waiting_reason']})" if j.get("waiting_reason") else ""
            log(
                f"job {j['id']}: {j['status']}, {j['trials_done']}/{j['trials']} trials, best {_best_text(j)}{why}"
            )

    return client.wait(job["id"], poll_seconds=POLL_SECONDS, on_progress=on_change)


def _print_job(job: dict[str, Any]) -> None:
    print(f"job {job['id']}: {_describe(job)} on {short_target(job['target'])}")
    print(
        f"status: {job['status']}   trials: {job['trials_done']}/{job['trials']}   strategy: {job.get('strategy')}"
    )
    if job.get("model"):
        print(f"best: {_best_text(job)} (the sum over its tasks of count × best)")
    else:
        print(
            f"best: {_best_text(job)}"
            + (f" (record {job['best_record_id']})" if job.get("best_record_id") else "")
        )
    if job.get("waiting_reason"):
        print(f"waiting: {job['waiting_reason']}")
    if job.get("note"):
        print(f"note: {job['note']}")
    if job.get("error"):
        print(f"error: {job['error']}")
    if job.get("model"):
        _print_tasks(job["model"]["tasks"])


def _print_tasks(tasks: list[dict[str, Any]]) -> None:
    """A model job's tasks: trials, best and share of the model's time each."""
    print(f"{'task':<14} {'pattern':<32} {'count':>5} {'trials':>6} {'best':>12} {'share':>6}")
    for t in tasks:
        best = f"{t['best_ms']:.4f} ms" if t.get("best_ms") is not None else "-"
        share = f"{100 * t['share']:.1f}%" if t.get("share") is not None else "-"
        print(
            f"{t['key'][:12]:<14} {t['pattern'][:32]:<32} {t['count']:>5} {t['trials']:>6} {best:>12} {share:>6}"
        )


def _list(args: argparse.Namespace) -> int:

    with make_client(args) as client:
        jobs = client.jobs()
    if args.json:
        print_json({"jobs": [job_json(j) for j in jobs]})
        return 0
    if not jobs:
        print("no jobs")
        return 0
    print(f"{'id':>6}  {'status':<10} {'trials':>13}  {'best':>12}  workload")
    for j in jobs:
        trials = f"{j['trials_done']}/{j['trials']}"
        print(
            f"{j['id']:>6}  {j['status']:<10} {trials:>13}  {_best_text(j):>12}  {_describe(j)} on {short_target(j['target'])}"
        )
    return 0


def _show(args: argparse.Namespace) -> int:

    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot writes a PNG file; got {args.plot!r}")
    with make_client(args) as client:
        job = client.job(args.id)
        points = client.history(args.id)["points"] if (args.plot is not None or args.json) else []
    history = [p["best_ms"] for p in points]
    if args.plot is not None:
        from service.cli.tune import write_plot

        write_plot(args.plot, history, None, f"job {job['id']}: {_describe(job)}")
        log(f"wrote {args.plot}")
    if args.json:
        print_json({**job_json(job), "history": history})
    else:
        _print_job(job)
    return 0


def _cancel(args: argparse.Namespace) -> int:

    with make_client(args) as client:
        job = client.cancel(args.id)
    if args.json:
        print_json(job_json(job))
    else:
        print(
            f"job {job['id']} {job['status']} after {job['trials_done']}/{job['trials']} trials; its records are kept"
        )
    return 0


# -- best --coordinator -------------------------------------------------------------------


def remote_target(text: str, threads: int | None) -> str:
    """`--target` with `--threads` applied, for the coordinator to resolve (`host`: its workers' CPU)."""

    if threads is None:
        return text
    words = text.split()
    given = [w for w in words if w.startswith("-num-threads=")]
    if given:
        if given[0] != f"-num-threads={threads}":
            raise UsageError(f"--threads {threads} contradicts {given[0]} in --target")
        return text
    return " ".join([*words, f"-num-threads={threads}"])


def cmd_best_remote(args: argparse.Namespace) -> int:
    """`loomtune best OP k=v --coordinator URL`: the coordinator's best record (same output as the local one)."""
    from tuner.trace.file import TraceFile

    op, params = parse_workload_args(args.workload, None)
    target = remote_target(args.target, args.threads)
    with make_client(args) as client:
        best = client.best(op, params, target=target)
    if args.output is not None:
        trace_file = TraceFile.from_json(best["trace_file"])
        try:
            trace_file.save(args.output)
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e.strerror}") from None
        log(f"wrote {args.output}")
    result = {
        "op": best["op"],
        "params": best["params"],
        "workload_key": best["workload_key"],
        "target": best["target"],
        "record_id": best["record_id"],
        "measured_at": best["measured_at"],
        "latency_ms": best["latency_ms"],
        "retimed_ms": best.get("retimed_ms"),
        "run_times_ms": best["run_times_ms"],
        "trace": best["trace"],
    }
    if args.json:
        print_json(result)
    else:
        params_text = " ".join(f"{k}={v}" for k, v in best["params"].items())
        print(
            f"{best['op']} {params_text} on {short_target(best['target'])} (coordinator {client.url})"
        )
        print(best_line(best["latency_ms"], len(best["run_times_ms"]), best.get("retimed_ms")))
        print(
            f"record {best['record_id']}, measured {best['measured_at']} by {best.get('worker') or '?'}"
        )
    return 0
