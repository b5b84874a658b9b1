"""How well the cost model ranks candidates it has not seen, on real measurements.

    python -m benchmarks run --suite cost_model      # result file + README table (benchmarks/harness.py)
    python -m benchmarks.cost_model [--quick]        # prints only

1. **Data.** Each workload of `WORKLOADS` is tuned with the replay strategy
   (random samples of `SimpleSpace`, so the data is not biased toward what a
   model already liked) on the real `LocalPool` — the measurement processes
   and timing protocol of `loomtune tune` — into a SQLite file, `TRIALS`
   candidates each. A full run keeps that file under
   ``$TMPDIR/loomtune-benchmarks/`` (``LOOMTUNE_BENCH_CACHE=DIR`` elsewhere,
   ``=off`` for a fresh one) keyed by workloads, trials, seed and target, and
   measures only what is missing from it, so the models can be re-evaluated
   without re-measuring; the file records how long collecting took (the span
   of the records' times) either way.
2. **Features and targets.** A record's trace applied to its workload's
   program, `tuner.cost_model.features.program_features`; relevance is
   `tuner.cost_model.model.normalised_throughput` per workload (best latency /
   latency, 0 for failures).
3. **Settings.** *held-out workload* (leave one workload out, scikit-learn's
   `LeaveOneGroupOut` on the workload key): train on the other workloads,
   rank all candidates of the held-out one — a workload never tuned before,
   warm-started from the store. *within workload*: train on the other
   workloads plus the first half of the workload's own records in measurement
   order, rank the second half — what the search does mid-run.
4. **Models.** `XGBCostModel` with the ``regression`` and the ``rank``
   objective (as the search trains them); a scikit-learn baseline,
   `RandomForestRegressor(n_estimators=100)` on the same features and
   targets (non-linear like boosting, needs neither feature scaling nor
   tuning, so it asks "does boosting, or the ranking objective, buy anything
   over an off-the-shelf model?"; a linear model such as Ridge cannot
   express the interactions — tile sizes times vector lanes — that decide
   run time); and random scores (the mean of `RANDOM_DRAWS` draws: chance level).
5. **Metrics** per held-out set, then the mean over workloads:
   `sklearn.metrics.ndcg_score` at 10 and over the whole list, with
   normalised throughput as relevance; Spearman's rank correlation of score
   and relevance (`scipy.stats.spearmanr`); top-1 regret = best latency's
   throughput / throughput of the candidate the model ranks first (1.0 is
   perfect; a failed pick counts as the slowest ok candidate); top-10 regret
   the same for the best of the model's ten first picks (the search measures
   batches).

`decide` compares the two objectives: ``rank`` replaces ``regression`` as
`tuner.cost_model.model.DEFAULT_OBJECTIVE` only if its NDCG@10, averaged over both
settings, is higher by at least `CLEAR_MARGIN` and lower in neither.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import BenchWorkload
from tuner.cost_model.features import FEATURES, program_features
from tuner.cost_model.model import DEFAULT_OBJECTIVE, XGBCostModel, normalised_throughput
from tuner.database import Database, TuningRecord
from tuner.runner import Runner

TOP_K = 10
RANDOM_DRAWS = 20
CLEAR_MARGIN = 0.02
"""NDCG@10 by which "rank" must beat "regression" (mean of both settings) to become the default."""
SETTINGS = ("held-out workload", "within workload")
MODELS = ("XGBoost regression", "XGBoost rank", "random forest (sklearn)", "random")
CACHE_ENV = "LOOMTUNE_BENCH_CACHE"


def _w(label: str, op: str, **params: int) -> BenchWorkload:
    return BenchWorkload(label, op, params)


# Shapes whose extents have many divisors up to 16, so SimpleSpace's perfect
# tiles give hundreds of distinct traces; sizes where a candidate's kernel
# runs for microseconds to a few milliseconds.
WORKLOADS: tuple[BenchWorkload, ...] = (
    _w("matmul 192³", "matmul", m=192, n=192, k=192),
    _w("matmul 48×384×240", "matmul", m=48, n=384, k=240),
    _w("dense 96×240×192 +bias +relu", "dense", m=96, n=240, k=192, bias=1, relu=1),
    _w("batch_matmul 4×48×96×48", "batch_matmul", b=4, m=48, n=96, k=48),
    _w(
        "conv2d_nhwc 1×24×24×48→48 3×3",
        "conv2d_nhwc",
        n=1,
        h=24,
        w=24,
        ci=48,
        co=48,
        kh=3,
        kw=3,
        stride=1,
        pad=1,
        dilation=1,
    ),
    _w(
        "depthwise_conv2d_nhwc 1×48×48×48 3×3",
        "depthwise_conv2d_nhwc",
        n=1,
        h=48,
        w=48,
        c=48,
        kh=3,
        kw=3,
        stride=1,
        pad=1,
    ),
    _w("softmax 240×480", "softmax", m=240, n=480),
    _w("layer_norm 240×480", "layer_norm", m=240, n=480),
    _w("gelu 240×960", "gelu", m=240, n=960),
    _w("transpose 480×480", "transpose", m=480, n=480),
)
TRIALS = 150
QUICK_WORKLOADS: tuple[BenchWorkload, ...] = (
    _w("matmul 48³", "matmul", m=48, n=48, k=48),
    _w("softmax 48×96", "softmax", m=48, n=96),
    _w("gelu 48×96", "gelu", m=48, n=96),
)
QUICK_TRIALS = 24


# -- data ---------------------------------------------------------------------------------


def collect(
    workloads: Sequence[BenchWorkload],
    *,
    trials: int,
    seed: int,
    database: Database,
    target: str,
    runner: Runner | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, float]:
    """Tune each workload with replay until it has `trials` records on `target`; seconds spent per label.

    Without a `runner`, a `LocalPool` of one-thread slots is started when
    something is missing (and closed afterwards).
    """
    from tuner.search.loop import tune_loop
    from tuner.search.strategy import SearchContext, make_strategy
    from tuner.space.simple import SimpleSpace

    have: dict[str, int] = {}
    for r in database.training_records(target):
        have[r.workload_key] = have.get(r.workload_key, 0) + 1
    spent: dict[str, float] = {}
    own = runner is None
    try:
        for w in workloads:
            task = w.task()
            missing = trials - have.get(task.key, 0)
            if missing <= 0:
                spent[w.label] = 0.0
                continue
            if runner is None:
                from workers.pool import LocalPool

                runner = LocalPool(threads=1)
            context = SearchContext(task, target, SimpleSpace(task.program, threads=1), database)
            strategy = make_strategy("replay", context, seed)
            start = time.perf_counter()
            run = tune_loop(
                task, target, strategy=strategy, runner=runner, database=database, trials=missing
            )
            spent[w.label] = time.perf_counter() - start
            log(
                f"  {w.label}: measured {run.trials_done} in {spent[w.label]:.1f} s ({run.stop_reason})"
            )
    finally:
        if own and runner is not None:
            runner.close()
    return spent


@dataclass
class Dataset:
    """One row per record: its workload, features, latency (None: failed), place in measurement order."""

    labels: list[str]
    features: np.ndarray
    latencies: list[float | None]
    workloads: list[dict[str, Any]]
    feature_s: float

    def indices(self, label: str) -> np.ndarray:
        """The workload's rows, in measurement order."""
        return np.asarray([i for i, lab in enumerate(self.labels) if lab == label], dtype=np.int64)


def build_dataset(workloads: Sequence[BenchWorkload], records: Sequence[TuningRecord]) -> Dataset:
    """Features of each record of `workloads` (records in measurement order; others ignored)."""
    from tuner.trace.trace import Trace

    tasks = {task.key: (w, task) for w, task in ((w, w.task()) for w in workloads)}
    keys = {w.label: key for key, (w, _) in tasks.items()}
    labels: list[str] = []
    feats: list[np.ndarray] = []
    lats: list[float | None] = []
    per: dict[str, list[TuningRecord]] = {w.label: [] for w in workloads}
    start = time.perf_counter()
    for r in records:
        if r.workload_key not in tasks:
            continue
        w, task = tasks[r.workload_key]
        program = Trace.from_json(r.trace).apply(task.program).program
        feats.append(program_features(program))
        lats.append(r.median_ms if r.status == "ok" else None)
        labels.append(w.label)
        per[w.label].append(r)
    feature_s = time.perf_counter() - start
    summary = []
    for w in workloads:
        rs = per[w.label]
        ok = [r.median_ms for r in rs if r.status == "ok" and r.median_ms is not None]
        times = [r.measured_at for r in rs]
        summary.append(
            {
                "label": w.label,
                "op": w.op,
                "params": dict(w.params),
                "workload_key": keys[w.label],
                "records": len(rs),
                "ok": len(ok),
                "best_ms": min(ok) if ok else None,
                "median_ms": float(np.median(ok)) if ok else None,
                "worst_ms": max(ok) if ok else None,
                "collect_span_s": (max(times) - min(times)).total_seconds()
                if len(times) > 1
                else 0.0,
            }
        )
    x = np.stack(feats) if feats else np.zeros((0, FEATURES), dtype=np.float32)
    return Dataset(labels, x, lats, summary, feature_s)


# -- models -------------------------------------------------------------------------------

Predictor = Callable[[np.ndarray, list[float | None], list[str], np.ndarray, int], np.ndarray]
"""(train features, train latencies, train groups, test features, seed) -> scores, higher is better."""


def _xgb(objective: str) -> Predictor:
    def predict(
        x: np.ndarray, lats: list[float | None], groups: list[str], test: np.ndarray, seed: int
    ) -> np.ndarray:
        model = XGBCostModel(objective=objective, seed=seed, min_samples=1)
        model.update(list(x), lats, groups)
        return np.asarray(model.predict(test), dtype=np.float64)

    return predict


def _forest(
    x: np.ndarray, lats: list[float | None], groups: list[str], test: np.ndarray, seed: int
) -> np.ndarray:
    from sklearn.ensemble import RandomForestRegressor

    model = RandomForestRegressor(n_estimators=100, random_state=seed, n_jobs=1)
    model.fit(x, normalised_throughput(lats, groups))
    return np.asarray(model.predict(test), dtype=np.float64)


PREDICTORS: dict[str, Predictor] = {
    "XGBoost regression": _xgb("regression"),
    "XGBoost rank": _xgb("rank"),
    "random forest (sklearn)": _forest,
}


# -- metrics ------------------------------------------------------------------------------


def ranking_metrics(relevance: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """NDCG@10, NDCG, Spearman and top-1 / top-10 regret of `scores` against `relevance` (one list)."""
    from scipy.stats import spearmanr
    from sklearn.metrics import ndcg_score

    rel = np.asarray(relevance, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    rho = float(spearmanr(rel, s).statistic) if np.ptp(s) > 0 and np.ptp(rel) > 0 else 0.0
    worst_ok = rel[rel > 0].min()
    order = np.argsort(-s, kind="stable")

    def regret(picks: np.ndarray) -> float:
        got = rel[picks].max()
        return float(rel.max() / (got if got > 0 else worst_ok))

    return {
        "ndcg_at_10": float(ndcg_score(rel[None, :], s[None, :], k=TOP_K)),
        "ndcg": float(ndcg_score(rel[None, :], s[None, :])),
        "spearman": 0.0 if math.isnan(rho) else rho,
        "top1_regret": regret(order[:1]),
        "top10_regret": regret(order[:TOP_K]),
    }


METRICS = ("ndcg_at_10", "ndcg", "spearman", "top1_regret", "top10_regret")


def splits(data: Dataset, setting: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(held-out label, train rows, test rows) per workload."""
    from sklearn.model_selection import LeaveOneGroupOut

    labels = np.asarray(data.labels)
    out = []
    if setting == SETTINGS[0]:
        for train, test in LeaveOneGroupOut().split(data.features, groups=labels):
            out.append((str(labels[test[0]]), train, test))
        return out
    for w in data.workloads:
        own = data.indices(w["label"])
        half = len(own) // 2
        others = np.flatnonzero(labels != w["label"])
        out.append((w["label"], np.concatenate([others, own[:half]]), own[half:]))
    return out


def evaluate(
    data: Dataset, *, seed: int = 0, log: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """One row per (setting, model): metrics per held-out workload and their means, fit seconds."""
    rows = []
    for setting in SETTINGS:
        folds = []
        for label, train, test in splits(data, setting):
            lat_test = [data.latencies[i] for i in test]
            if len(test) < 2 or not any(lat is not None for lat in lat_test):
                continue  # nothing to rank
            folds.append((label, train, test, normalised_throughput(lat_test, [label] * len(test))))
        for name in MODELS:
            per: dict[str, dict[str, float]] = {}
            fit_s = 0.0
            for label, train, test, rel in folds:
                start = time.perf_counter()
                if name == "random":
                    rng = np.random.default_rng(seed)
                    draws = [
                        ranking_metrics(rel, rng.random(len(test))) for _ in range(RANDOM_DRAWS)
                    ]
                    per[label] = {m: float(np.mean([d[m] for d in draws])) for m in METRICS}
                else:
                    groups = [data.labels[i] for i in train]
                    lats = [data.latencies[i] for i in train]
                    scores = PREDICTORS[name](
                        data.features[train], lats, groups, data.features[test], seed
                    )
                    per[label] = ranking_metrics(rel, scores)
                fit_s += time.perf_counter() - start
            means = {
                m: float(np.mean([p[m] for p in per.values()])) if per else None for m in METRICS
            }
            finite = bool(per) and all(v is not None and math.isfinite(v) for v in means.values())
            rows.append(
                {
                    "case": f"{name} · {setting}",
                    "label": f"{name} · {setting}",
                    "setting": setting,
                    "model": name,
                    **means,
                    "workloads": len(per),
                    "per_workload": per,
                    "fit_s": fit_s,
                    "correct": finite,
                    "message": None if finite else "no held-out workload could be ranked",
                }
            )
            if per:
                log(
                    f"  {setting:18} {name:24} NDCG@10 {means['ndcg_at_10']:.3f}  NDCG {means['ndcg']:.3f}  "
                    f"Spearman {means['spearman']:.3f}  top-1 regret {means['top1_regret']:.2f}  ({fit_s:.1f} s)"
                )
    return rows


def decide(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Which objective ranks better: mean NDCG@10 over both settings, with `CLEAR_MARGIN`."""
    score = {(r["model"], r["setting"]): r["ndcg_at_10"] for r in rows}
    by = {}
    for objective in ("regression", "rank"):
        values = [score.get((f"XGBoost {objective}", s)) for s in SETTINGS]
        by[objective] = None if any(v is None for v in values) else float(np.mean(values))
    reg, rank = by["regression"], by["rank"]
    clear = (
        reg is not None
        and rank is not None
        and rank - reg >= CLEAR_MARGIN
        and all(score[("XGBoost rank", s)] >= score[("XGBoost regression", s)] for s in SETTINGS)
    )
    better = None if reg is None or rank is None else ("rank" if rank > reg else "regression")
    per = {(r["model"], r["setting"]): r["per_workload"] for r in rows}
    rank_wins = {}  # per setting: held-out workloads where rank's NDCG@10 is higher
    for s in SETTINGS:
        a, b = per.get(("XGBoost rank", s), {}), per.get(("XGBoost regression", s), {})
        rank_wins[s] = (
            f"{sum(a[w]['ndcg_at_10'] > b[w]['ndcg_at_10'] for w in a if w in b)}/{len(a)}"
        )
    return {
        "metric": "ndcg_at_10 (mean of both settings)",
        "regression": reg,
        "rank": rank,
        "better": better,
        "rank_wins": rank_wins,
        "clear_margin": CLEAR_MARGIN,
        "winner": "rank" if clear else "regression",
        "default_objective": DEFAULT_OBJECTIVE,
    }


# -- one run ------------------------------------------------------------------------------


def _cache_file(
    workloads: Sequence[BenchWorkload], trials: int, seed: int, target: str
) -> Path | None:
    where = os.environ.get(CACHE_ENV, "")
    if where.lower() == "off":
        return None
    folder = Path(where) if where else Path(tempfile.gettempdir()) / "loomtune-benchmarks"
    key = json.dumps([[w.op, w.params] for w in workloads] + [trials, seed, target], sort_keys=True)
    return folder / f"cost_model-{hashlib.sha256(key.encode()).hexdigest()[:16]}.sqlite"


def run(
    quick: bool,
    seed: int = 0,
    *,
    runner: Runner | None = None,
    target: str | None = None,
    database_url: str | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Collect (or reuse), featurize, evaluate: the rows and ``{"cost_model": ...}`` of a result file.

    Quick runs measure into a fresh temporary file; full runs into the cache
    file (see the module's docstring). Tests pass a simulated `runner`, a
    `target` name and a `database_url`.
    """
    from codegen.host import host_target
    from service.db.store import open_database

    workloads, trials = (QUICK_WORKLOADS, QUICK_TRIALS) if quick else (WORKLOADS, TRIALS)
    target = target or host_target(1).canonical()
    cache = None if quick or database_url else _cache_file(workloads, trials, seed, target)
    with tempfile.TemporaryDirectory(prefix="loomtune-cost-model-") as tmp:
        if database_url is None:
            if cache is not None:
                cache.parent.mkdir(parents=True, exist_ok=True)
            path = cache or Path(tmp) / "records.sqlite"
            database_url = f"sqlite:///{path}"
        log(f"  records in {database_url}")
        database = open_database(database_url)
        start, children_before = time.perf_counter(), _children_cpu_s()
        spent = collect(
            workloads,
            trials=trials,
            seed=seed,
            database=database,
            target=target,
            runner=runner,
            log=log,
        )
        collection_s = time.perf_counter() - start
        children_cpu_s = _children_cpu_s() - children_before  # the pool is closed: reaped
        records = database.training_records(target)
        data = build_dataset(workloads, records)
    for w in data.workloads:
        w["collect_s"] = spent.get(w["label"], 0.0)
    log(f"  {len(data.labels)} records; features in {data.feature_s:.1f} s")
    rows = evaluate(data, seed=seed, log=log)
    details = {
        "workloads": data.workloads,
        "records": len(data.labels),
        "trials_per_workload": trials,
        "strategy": "replay",
        "space": "SimpleSpace(threads=1)",
        "runner": "LocalPool(threads=1)" if runner is None else type(runner).__name__,
        "measure": _tuning_config() if runner is None else None,
        "target": target,
        "cache": str(cache) if cache is not None else None,
        "workloads_measured_now": sum(1 for s in spent.values() if s > 0),
        "collection_s": collection_s,
        "children_cpu_s": children_cpu_s,
        "collection_span_s": sum(w["collect_span_s"] for w in data.workloads),
        "feature_s": data.feature_s,
        "features": FEATURES,
        "top_k": TOP_K,
        "random_draws": RANDOM_DRAWS,
        "baseline": "sklearn.ensemble.RandomForestRegressor(n_estimators=100, random_state=seed, n_jobs=1)",
        "xgboost": {"rounds": XGBCostModel().rounds, "seed": seed},
        "decision": decide(rows),
    }
    return rows, {"cost_model": details}


def _children_cpu_s() -> float:
    """CPU seconds of this process's ended children (the measurement processes, once closed)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _tuning_config() -> dict[str, Any]:
    """The measurement processes' timing protocol (`loomtune tune`'s): `workers.measure.TUNING_CONFIG`."""
    import dataclasses

    from workers.measure import TUNING_CONFIG

    return dataclasses.asdict(TUNING_CONFIG)


# -- tables -------------------------------------------------------------------------------

Table = tuple[list[str], list[list[str]]]


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def metrics_table(result: dict[str, Any]) -> Table:
    headers = [
        "setting",
        "model",
        "NDCG@10",
        "NDCG",
        "Spearman",
        "top-1 regret",
        "top-10 regret",
        "fit s",
    ]
    rows = [
        [
            r["setting"],
            r["model"],
            _f(r["ndcg_at_10"]),
            _f(r["ndcg"]),
            _f(r["spearman"]),
            _f(r["top1_regret"], 2),
            _f(r["top10_regret"], 2),
            _f(r["fit_s"], 1),
        ]
        for r in result["rows"]
    ]
    return headers, rows


def dataset_table(result: dict[str, Any]) -> Table:
    headers = ["workload", "records", "ok", "best ms", "median ms", "worst ms", "collected in s"]
    rows = [
        [
            w["label"],
            str(w["records"]),
            str(w["ok"]),
            _ms(w["best_ms"]),
            _ms(w["median_ms"]),
            _ms(w["worst_ms"]),
            _f(w["collect_span_s"], 1),
        ]
        for w in result["cost_model"]["workloads"]
    ]
    return headers, rows


def _ms(value: float | None) -> str:
    from benchmarks.common import fmt_ms

    return fmt_ms(value)


def _cpu(target: str) -> str:
    """``rocketlake, 1 thread`` from a canonical target; other names as they are."""
    parts = dict(p.split("=", 1) for p in target.split() if p.startswith("-") and "=" in p)
    if "-mcpu" not in parts:
        return f"`{target}`"
    threads = parts.get("-num-threads", "1")
    return f"{parts['-mcpu']}, {threads} thread{'s' if threads != '1' else ''}"


def note(result: dict[str, Any]) -> str:
    cm = result["cost_model"]
    d = cm["decision"]
    verdict = (
        f"XGBoost's objective: rank {_f(d['rank'])} vs regression {_f(d['regression'])} NDCG@10 "
        f"(mean of both settings; rank is higher on "
        f"{', '.join(f'{v} ({k})' for k, v in d.get('rank_wins', {}).items())} workloads); "
        f"`DEFAULT_OBJECTIVE` is `{d['winner']}` "
        f"(rank must win by ≥ {d['clear_margin']:g} and lose in neither setting)."
    )
    return (
        f"{cm['records']} candidates (up to {cm['trials_per_workload']} per workload: fewer where the space "
        "holds fewer) sampled by the replay "
        f"strategy from `{cm['space']}` and measured by `{cm['runner']}` on {_cpu(cm['target'])}; collecting "
        f"took {cm['collection_span_s']:.0f} s, features {cm['feature_s']:.1f} s. Held-out workload: "
        "trained on the other workloads; within workload: also on the workload's first half in "
        "measurement order, ranked on its second half. Means over the held-out workloads; relevance = "
        "normalised throughput; regret = best throughput / throughput of the best of the model's first "
        f"1 (10) picks, 1.00 is perfect; random = mean of {cm['random_draws']} draws. {verdict}"
    )


def report_tables(
    result: dict[str, Any], footnote: str | None = None
) -> list[tuple[str | None, Table, str | None]]:
    """(caption, table, note) triples for `benchmarks/report.py`."""
    return [
        (None, metrics_table(result), "\n\n".join(n for n in (note(result), footnote) if n)),
        ("The dataset (real measurements, one-thread candidates):", dataset_table(result), None),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cost_model", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="3 small workloads, 24 candidates each"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import sys

    rows, extra = run(args.quick, args.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(extra["cost_model"]["decision"], indent=1))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
