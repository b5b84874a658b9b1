"""TVM MetaSchedule beside loomtune: the suite's workloads tuned by TVM, then timed with ours.

``python -m benchmarks tune --with-tvm`` calls `prepare` per workload; it
returns the TVM row (tuning time, best-so-far curve) and a callable running
TVM's best kernel, which the benchmark verifies against numpy and times in the
same ``time_interleaved`` call as loomtune's kernel, numpy and PyTorch.
``python -m benchmarks.tune.tvm_ref --trials 256`` fills the cache ahead of time.

How TVM is run (TVM 0.27, ``tvm.s_tir.meta_schedule``):

- the workload is written in ``tvm.te`` exactly as ``ir/library`` defines it
  (same shapes, float32, layouts, argument order: inputs then outputs;
  dense = relu(X·W + bias) with W[k,n]; conv2d NHWC input, HWIO weight,
  zero padding as its own compute), so loomtune's inputs and numpy reference
  apply unchanged;
- the target is a dict, ``{"kind": "llvm", "mcpu": <LLVM's host CPU>,
  "num-cores": 1}`` (a string target does not take ``num-cores``), and
  ``TVM_NUM_THREADS=1``: TVM's kernels run on one thread, as ours do;
- ``tune_tir`` with its defaults otherwise: evolutionary search, XGBoost
  model, 64 candidates per round, the local builder (one process per CPU) and
  runner (number 3, repeat 1, min_repeat_ms 100);
- the builder's build function is our own ``build_module``: TVM's default
  imports ``tvm.s_tir.tensor_intrin`` in every fresh build process, which
  takes about 31 s on these machines, past the builder's 30 s timeout, so
  every candidate failed; the import is not needed for CPU schedules without
  tensorisation;
- the tuning runs in a child process (``python -m benchmarks.tune.tvm_ref
  tune-one``) under a wall-clock limit; each measured batch is appended to
  ``trials.jsonl`` in the work folder (wall time, run time or error per
  candidate, in measurement order), which gives the best-so-far curve;
- the tuned records are cached in ``benchmarks/.tvm_cache/<key>/`` (git
  ignored), the key a hash of the workload, trials, seed, target, time limit and the
  TVM and tvm-ffi versions; a later run re-times the cached best kernel and
  says that TVM's tuning time comes from the cached run and its date.

TVM is optional: nothing here imports it at module level, and the tests do not
need it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(__file__).resolve().parent / ".tvm_cache"
MISSING_MESSAGE = (
    "--with-tvm needs TVM MetaSchedule: install the bench extra "
    "(.venv/bin/pip install -e '.[bench]': apache-tvm 0.27.0.post1, apache-tvm-ffi 0.1.14.post1)"
)
SUPPORTED_OPS = ("matmul", "batch_matmul", "dense", "conv2d_nhwc", "softmax")
DEFAULT_TIME_LIMIT_S = 900.0
TRIALS_FILE = "trials.jsonl"
META_FILE = "run.json"


class TVMMissing(RuntimeError):
    """TVM (the bench extra) is not installed."""


def versions() -> dict[str, str] | None:
    """TVM's and tvm-ffi's versions from the installed metadata, or None without TVM."""
    if importlib.util.find_spec("tvm") is None:
        return None
    out = {}
    for dist in ("apache-tvm", "apache-tvm-ffi"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "?"
    return out


def require_tvm() -> dict[str, str]:
    """The versions; raises `TVMMissing` (with the install hint) when TVM cannot be imported."""
    found = versions()
    if found is None:
        raise TVMMissing(MISSING_MESSAGE)
    _one_thread_env()
    try:
        import tvm  # noqa: F401
        from tvm.s_tir import meta_schedule  # noqa: F401
    except Exception as error:  # a broken install reads the same to the user
        raise TVMMissing(f"{MISSING_MESSAGE} (import failed: {error})") from error
    return found


def _one_thread_env() -> None:
    # TVM's runtime thread pool reads this when it starts: set before any kernel runs.
    os.environ["TVM_NUM_THREADS"] = "1"


def host_target() -> dict[str, Any]:
    """TVM's target for this machine at one thread: LLVM's name for the host CPU."""
    from codegen.host import host_cpu_name

    return {"kind": "llvm", "mcpu": host_cpu_name(), "num-cores": 1}


# -- the workloads in TVM's tensor expressions ----------------------------------------------


def te_workload(op: str, params: dict[str, int]) -> Any:
    """A ``tvm.tirx.PrimFunc`` computing what ``ir/library``'s `op` computes, arguments in its order."""
    from tvm import te, topi

    p = params
    if op == "matmul":
        A = te.placeholder((p["m"], p["k"]), "float32", "A")
        B = te.placeholder((p["k"], p["n"]), "float32", "B")
        r = te.reduce_axis((0, p["k"]), "r")
        C = te.compute((p["m"], p["n"]), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), "C")
        args = [A, B, C]
    elif op == "batch_matmul":
        A = te.placeholder((p["b"], p["m"], p["k"]), "float32", "A")
        B = te.placeholder((p["b"], p["k"], p["n"]), "float32", "B")
        r = te.reduce_axis((0, p["k"]), "r")
        C = te.compute(
            (p["b"], p["m"], p["n"]),
            lambda b, i, j: te.sum(A[b, i, r] * B[b, r, j], axis=r),
            "C",
        )
        args = [A, B, C]
    elif op == "dense":
        X = te.placeholder((p["m"], p["k"]), "float32", "X")
        W = te.placeholder((p["k"], p["n"]), "float32", "W")
        r = te.reduce_axis((0, p["k"]), "r")
        XW = te.compute((p["m"], p["n"]), lambda i, j: te.sum(X[i, r] * W[r, j], axis=r), "XW")
        args = [X, W]
        if not p["bias"] and not p["relu"]:
            args.append(XW)
        else:
            Bias = te.placeholder((p["n"],), "float32", "bias") if p["bias"] else None
            if Bias is not None:
                args.append(Bias)

            def epilogue(i: Any, j: Any) -> Any:
                v = XW[i, j]
                if Bias is not None:
                    v = v + Bias[j]
                if p["relu"]:
                    v = te.max(v, te.const(0.0, "float32"))
                return v

            args.append(te.compute((p["m"], p["n"]), epilogue, "Y"))
    elif op == "conv2d_nhwc":
        s, d, pad = p["stride"], p["dilation"], p["pad"]
        ho = (p["h"] + 2 * pad - d * (p["kh"] - 1) - 1) // s + 1
        wo = (p["w"] + 2 * pad - d * (p["kw"] - 1) - 1) // s + 1
        X = te.placeholder((p["n"], p["h"], p["w"], p["ci"]), "float32", "X")
        W = te.placeholder((p["kh"], p["kw"], p["ci"], p["co"]), "float32", "W")
        P = topi.nn.pad(X, [0, pad, pad, 0], [0, pad, pad, 0], name="pad")
        rh = te.reduce_axis((0, p["kh"]), "rh")
        rw = te.reduce_axis((0, p["kw"]), "rw")
        rc = te.reduce_axis((0, p["ci"]), "rc")
        Y = te.compute(
            (p["n"], ho, wo, p["co"]),
            lambda b, i, j, o: te.sum(
                P[b, i * s + rh * d, j * s + rw * d, rc] * W[rh, rw, rc, o], axis=[rh, rw, rc]
            ),
            "Y",
        )
        args = [X, W, Y]
    elif op == "softmax":
        # Four computes, as ir/library/norm.py (and numpy) do it.
        X = te.placeholder((p["m"], p["n"]), "float32", "X")
        r1 = te.reduce_axis((0, p["n"]), "r")
        r2 = te.reduce_axis((0, p["n"]), "r2")
        x_max = te.compute((p["m"],), lambda i: te.max(X[i, r1], axis=r1), "x_max")
        x_exp = te.compute((p["m"], p["n"]), lambda i, j: te.exp(X[i, j] - x_max[i]), "x_exp")
        exp_sum = te.compute((p["m"],), lambda i: te.sum(x_exp[i, r2], axis=r2), "exp_sum")
        Y = te.compute((p["m"], p["n"]), lambda i, j: x_exp[i, j] / exp_sum[i], "Y")
        args = [X, Y]
    else:
        raise ValueError(f"no TVM version of {op!r} (only {', '.join(SUPPORTED_OPS)})")
    return te.create_prim_func(args)


# -- the build function of the builder's processes ---------------------------------------------


def build_module(mod: Any, target: Any, _params: Any) -> Any:
    """TVM's ``default_build`` without its ``import tvm.s_tir.tensor_intrin`` (~31 s per process)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


# -- tuning (in the child process) -----------------------------------------------------------


def _seconds(run_secs: Any) -> list[float]:
    return [float(getattr(v, "value", v)) for v in run_secs]


def tune_in_this_process(
    op: str,
    params: dict[str, int],
    *,
    trials: int,
    target: dict[str, Any],
    work_dir: Path,
    seed: int,
    preload_intrinsics: bool = True,
) -> None:
    """MetaSchedule's ``tune_tir`` into `work_dir`; every measured batch appended to trials.jsonl."""
    _one_thread_env()
    # The builder's processes unpickle `build_module` by reference: they must find this package.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.target import Target

    work_dir.mkdir(parents=True, exist_ok=True)
    trials_path = work_dir / TRIALS_FILE
    if preload_intrinsics:
        # TuneContext imports the tensor intrinsics (~35 s here) before anything is
        # tuned; paid once per process, so it is done before the clock starts.
        import tvm.s_tir.tensor_intrin
    else:  # tests only: the x86 intrinsics alone (~2 s), which DefaultX86 names on a VNNI host
        import importlib.util
        import types

        spec = importlib.util.find_spec("tvm.s_tir.tensor_intrin")
        package = types.ModuleType("tvm.s_tir.tensor_intrin")
        package.__path__ = list(spec.submodule_search_locations or []) if spec else []
        sys.modules.setdefault("tvm.s_tir.tensor_intrin", package)
        import tvm.s_tir.tensor_intrin.x86  # noqa: F401

    def event(record: dict[str, Any]) -> None:
        append_event(trials_path, record)

    start = time.perf_counter()
    event({"event": "start"})

    @derived_object
    class RecordTrials(ms.measure_callback.PyMeasureCallback):
        """Appends one line per measured batch: when, and each candidate's time or error."""

        def apply(
            self, task_scheduler, task_id, measure_candidates, builder_results, runner_results
        ):  # type: ignore[no-untyped-def]
            now = time.perf_counter() - start
            batch = []
            for built, ran in zip(builder_results, runner_results):
                if built.error_msg is not None:
                    batch.append({"error": "build: " + str(built.error_msg)[-300:]})
                elif ran.error_msg is not None:
                    batch.append({"error": "run: " + str(ran.error_msg)[-300:]})
                else:
                    secs = _seconds(ran.run_secs)
                    batch.append({"ms": 1e3 * float(np.median(secs)) if secs else None})
            event({"t_s": now, "candidates": batch})

    callbacks = [*ms.MeasureCallback.create("default"), RecordTrials()]
    mod = te_workload(op, params)
    ms.tune_tir(
        mod,
        target=Target(target),
        work_dir=str(work_dir),
        max_trials_global=trials,
        builder=ms.builder.LocalBuilder(f_build=build_module),
        runner=ms.runner.LocalRunner(),
        measure_callbacks=callbacks,
        seed=seed,
    )
    event({"event": "done", "t_s": time.perf_counter() - start})


def append_event(path: Path, record: dict[str, Any]) -> None:
    """One line of trials.jsonl: ``{"event": "start" | "done", ...}`` or a measured batch
    ``{"t_s": seconds since the start, "candidates": [{"ms": median} | {"error": text}, ...]}``."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"unix": time.time(), **record}) + "\n")


# -- the cache --------------------------------------------------------------------------------


def cache_key(
    op: str,
    params: dict[str, int],
    *,
    trials: int,
    target: dict[str, Any],
    seed: int,
    time_limit_s: float,
    tvm_versions: dict[str, str],
    variant: str | None = None,
) -> str:
    """sha256 (first 16 hex digits) of everything that changes what TVM's tuning produces."""
    what = {
        "op": op,
        "params": dict(sorted(params.items())),
        "trials": trials,
        "target": dict(sorted(target.items())),
        "seed": seed,
        "time_limit_s": time_limit_s,
        "versions": tvm_versions,
        **({"variant": variant} if variant else {}),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def read_trials(
    work_dir: Path,
) -> tuple[list[float | None], list[float], dict[str, int], str | None, dict[str, Any]]:
    """(each trial's run time in ms or None, its wall time in s since the start, statuses,
    the first error, the start and done events)."""
    events: dict[str, Any] = {}
    times: list[float | None] = []
    walls: list[float] = []
    statuses: dict[str, int] = {}
    first_error = None
    path = work_dir / TRIALS_FILE
    if not path.exists():
        return times, walls, statuses, None, events
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            batch = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by the time limit's kill
            continue
        if "event" in batch:
            events[batch["event"]] = batch
            continue
        for c in batch["candidates"]:
            ms = c.get("ms")
            status = "ok" if ms is not None else c.get("error", "error").split(":")[0] + "_error"
            statuses[status] = statuses.get(status, 0) + 1
            if ms is None and first_error is None:
                first_error = c.get("error")
            times.append(ms)
            walls.append(batch["t_s"])
    return times, walls, statuses, first_error, events


def best_so_far(times: Sequence[float | None]) -> list[float | None]:
    out: list[float | None] = []
    best = None
    for t in times:
        if t is not None and (best is None or t < best):
            best = t
        out.append(best)
    return out


def _tune_in_child(
    command: list[str], partial: Path, time_limit_s: float
) -> tuple[str, float, float, float, dict[str, float] | None]:
    """Run TVM's tuning child (killed at the time limit); (stop reason, the kill's Unix time,
    wall seconds, the child's CPU seconds, other processes' load meanwhile)."""
    from benchmarks import contention

    before = os.times()
    snapshot = contention.cpu_snapshot()
    start = time.perf_counter()
    with (partial / "tune.log").open("w", encoding="utf-8") as out:
        child = subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = child.wait(timeout=time_limit_s)
            stop = "budget" if code == 0 else f"exit code {code}"
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the child and its builder/runner processes
            child.wait()
            stop = f"time limit ({time_limit_s:.0f} s)"
    killed_unix = time.time()
    wall_s = time.perf_counter() - start
    after = os.times()
    child_cpu_s = (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )
    end_snapshot = contention.cpu_snapshot()
    if end_snapshot is not None:  # the child's CPU time is ours, not other processes'
        end_snapshot = dataclasses.replace(end_snapshot, own=end_snapshot.own + child_cpu_s)
    load = contention.others_load(snapshot, end_snapshot)
    return stop, killed_unix, wall_s, child_cpu_s, load


def _is_contended(load: dict[str, float] | None) -> bool:
    from benchmarks import contention

    return contention.is_contended(load)


def tune_cached(
    op: str,
    params: dict[str, int],
    *,
    trials: int,
    seed: int = 0,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    cache_dir: Path = CACHE_DIR,
    retune: bool = False,
    preload_intrinsics: bool = True,
    log: Callable[[str], None] = print,
) -> tuple[dict[str, Any], Path]:
    """TVM's tuning record of this workload (tuned now in a child process, or from the cache).

    Returns (meta, work folder): `meta` is the cached run.json — versions,
    target, UTC start, tuning seconds, trials done, stop reason, the
    best-so-far curve (ms per trial), each trial's wall time — plus
    ``cached`` (True when this call did not tune).
    """
    tvm_versions = require_tvm()
    target = host_target()
    key = cache_key(
        op,
        params,
        trials=trials,
        target=target,
        seed=seed,
        time_limit_s=time_limit_s,
        tvm_versions=tvm_versions,
        variant=None if preload_intrinsics else "no-intrinsics",
    )
    folder = cache_dir / f"{op}-{key}"
    meta_path = folder / META_FILE
    if meta_path.exists() and not retune:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta["cached"] = True
        return meta, folder
    partial = cache_dir / f"{op}-{key}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    command = [
        sys.executable,
        "-m",
        "benchmarks.tune.tvm_ref",
        "tune-one",
        "--op",
        op,
        "--params",
        json.dumps(params),
        "--trials",
        str(trials),
        "--seed",
        str(seed),
        "--target",
        json.dumps(target),
        "--work-dir",
        str(partial),
        *([] if preload_intrinsics else ["--no-intrinsics"]),
    ]
    started = datetime.now(UTC)
    log(
        f"  TVM MetaSchedule: tuning {op} {params} for {trials} trials (limit {time_limit_s:.0f} s)"
    )
    stop, killed_unix, wall_s, child_cpu_s, load = _tune_in_child(command, partial, time_limit_s)
    times, walls, statuses, first_error, events = read_trials(partial)
    # TVM's tuning time: from tune_tir's start (after the child's imports) to its
    # end, or to the kill at the time limit.
    if "start" in events:
        tune_s = (
            events["done"]["t_s"] if "done" in events else killed_unix - events["start"]["unix"]
        )
    else:
        tune_s = wall_s
    history = best_so_far(times)
    meta = {
        "format": "loomtune.tvm_run/1",
        "op": op,
        "params": params,
        "trials": trials,
        "seed": seed,
        "target": target,
        "versions": tvm_versions,
        "time_limit_s": time_limit_s,
        "key": key,
        "tuned_utc": started.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "tune_s": tune_s,
        "child_wall_s": wall_s,
        "child_cpu_s": child_cpu_s,
        "tuning_others_load": load,
        "tuning_contended": _is_contended(load),
        "stop_reason": "TVM ended the task early"
        if stop == "budget" and len(times) < trials
        else stop,
        "trials_done": len(times),
        "history_ms": history,
        "trial_times_s": walls,
        "statuses": statuses,
        "first_error": first_error,
        "best_tuning_ms": history[-1] if history else None,
    }
    (partial / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    log(
        f"  TVM: {len(times)} trials in {tune_s:.0f} s ({stop}), best while tuning "
        f"{meta['best_tuning_ms']} ms"
    )
    meta["cached"] = False
    return meta, folder


# -- the best kernel, as a callable ----------------------------------------------------------


@dataclasses.dataclass
class TVMKernel:
    """TVM's best kernel with its arguments bound: ``call()`` runs it, ``outputs()`` reads them."""

    call: Callable[[], object]
    outputs: Callable[[], list[np.ndarray]]
    reset: Callable[[], None]


def best_kernel(
    folder: Path,
    op: str,
    params: dict[str, int],
    target: dict[str, Any],
    inputs: Sequence[np.ndarray],
    output_specs: Sequence[tuple[tuple[int, ...], Any]],
) -> TVMKernel | None:
    """Compile the best schedule in `folder`'s database; None when it holds no successful record."""
    require_tvm()
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.target import Target

    tgt = Target(target)
    mod = te_workload(op, params)
    database = ms.database.JSONDatabase(work_dir=str(folder))
    sch = ms.tir_integration.compile_tir(database, mod, tgt)
    if sch is None:
        return None
    lib = tvm.compile(sch.mod, target=tgt)
    fn = lib["main"]
    args_in = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs]
    nan = [np.full(shape, np.nan, dtype=dtype) for shape, dtype in output_specs]
    args_out = [tvm.runtime.tensor(a) for a in nan]

    def call() -> object:
        return fn(*args_in, *args_out)

    def reset() -> None:
        for t, a in zip(args_out, nan):
            t.copyfrom(a)

    return TVMKernel(call, lambda: [t.numpy() for t in args_out], reset)


def checkpoints_of(
    history: Sequence[float | None], marks: Sequence[int]
) -> dict[str, float | None]:
    return {str(c): history[c - 1] if len(history) >= c else None for c in marks}


def utc_date(meta: dict[str, Any]) -> str:
    return str(meta.get("tuned_utc", "?"))


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


# -- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tune.tvm_ref", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("tune-one", help="(internal) tune one workload into a work folder")
    one.add_argument("--op", required=True)
    one.add_argument("--params", required=True, type=json.loads)
    one.add_argument("--trials", required=True, type=int)
    one.add_argument("--seed", type=int, default=0)
    one.add_argument("--target", required=True, type=json.loads)
    one.add_argument("--work-dir", required=True, type=Path)
    one.add_argument("--no-intrinsics", action="store_true", help="(tests) skip the 35 s import")
    fill = sub.add_parser("fill-cache", help="tune the suite with TVM into the cache (no timing)")
    fill.add_argument("--trials", type=int, default=256)
    fill.add_argument("--only", default=None, help="comma-separated workloads (matmul, dense, ...)")
    fill.add_argument("--seed", type=int, default=0)
    fill.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S)
    fill.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    fill.add_argument("--quick", action="store_true", help="the quick suite's tiny workloads")
    args = parser.parse_args(argv)
    if args.command == "tune-one":
        tune_in_this_process(
            args.op,
            args.params,
            trials=args.trials,
            target=args.target,
            work_dir=args.work_dir,
            seed=args.seed,
            preload_intrinsics=not args.no_intrinsics,
        )
        return 0
    from benchmarks.tune.suite import select

    try:
        require_tvm()
    except TVMMissing as error:
        print(error, file=sys.stderr)
        return 2
    for w in select(quick=args.quick, only=args.only.split(",") if args.only else None):
        meta, folder = tune_cached(
            w.op,
            w.params,
            trials=args.trials,
            seed=args.seed,
            time_limit_s=args.time_limit,
            cache_dir=args.cache_dir,
        )
        print(
            f"{w.name}: {meta['trials_done']} trials, {meta['tune_s']:.0f} s, "
            f"best {meta['best_tuning_ms']} ms, {'cached' if meta['cached'] else 'tuned'} in {folder}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
