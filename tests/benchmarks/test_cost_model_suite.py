"""The cost_model suite's evaluation on a small dataset measured by the simulated runner.

The simulated runner (deterministic, no processes) stands in for the local
pool: what is checked is the collection, the splits, the metrics and the
result's fields, not how good any model is (the README's numbers come from a
full run on real measurements).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import cost_model
from benchmarks.report import markdown_table, tables
from codegen.host import host_target
from service.db.store import open_database
from tuner.simulated import SimulatedRunner


@pytest.fixture(scope="module")
def simulated_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict, str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('cost_model') / 'records.sqlite'}"
    rows, extra = cost_model.run(True, 0, runner=SimulatedRunner(), database_url=url)
    return rows, extra, url


def test_every_model_and_setting_is_scored_on_every_workload(simulated_run) -> None:
    rows, extra, _ = simulated_run
    labels = {w.label for w in cost_model.QUICK_WORKLOADS}
    assert [(r["setting"], r["model"]) for r in rows] == [
        (s, m) for s in cost_model.SETTINGS for m in cost_model.MODELS
    ]
    for row in rows:
        assert row["correct"] is True and row["message"] is None
        assert set(row["per_workload"]) == labels and row["workloads"] == len(labels)
        for metrics in [row, *row["per_workload"].values()]:
            assert 0.0 <= metrics["ndcg_at_10"] <= 1.0 and 0.0 <= metrics["ndcg"] <= 1.0
            assert -1.0 <= metrics["spearman"] <= 1.0
            assert 1.0 <= metrics["top10_regret"] <= metrics["top1_regret"] < math.inf
        assert row["fit_s"] >= 0

    cm = extra["cost_model"]
    assert cm["records"] == len(labels) * cost_model.QUICK_TRIALS
    assert [w["records"] for w in cm["workloads"]] == [cost_model.QUICK_TRIALS] * len(labels)
    assert all(w["ok"] == w["records"] and w["best_ms"] <= w["worst_ms"] for w in cm["workloads"])
    assert cm["runner"] == "SimulatedRunner" and cm["target"] == host_target(1).canonical()
    assert cm["children_cpu_s"] >= 0 and cm["measure"] is None
    assert (
        cm["collection_s"] >= 0
        and cm["feature_s"] >= 0
        and cm["workloads_measured_now"] == len(labels)
    )
    decision = cm["decision"]
    assert decision["winner"] in ("regression", "rank") and 0 <= decision["rank"] <= 1
    assert set(decision["rank_wins"]) == set(cost_model.SETTINGS)


def test_collecting_again_measures_nothing_new(simulated_run) -> None:
    _, _, url = simulated_run
    runner = SimulatedRunner()
    database = open_database(url)
    spent = cost_model.collect(
        cost_model.QUICK_WORKLOADS,
        trials=cost_model.QUICK_TRIALS,
        seed=0,
        database=database,
        target=host_target(1).canonical(),
        runner=runner,
    )
    assert runner.measured == 0 and set(spent.values()) == {0.0}


def test_the_report_has_a_metrics_and_a_dataset_table(simulated_run) -> None:
    rows, extra, _ = simulated_run
    result = {"kind": "cost_model", "rows": rows, **extra}
    (_, metrics, note), (_, dataset, _) = tables(result)
    assert metrics[0][:3] == ["setting", "model", "NDCG@10"] and len(metrics[1]) == len(rows)
    assert len(dataset[1]) == len(cost_model.QUICK_WORKLOADS)
    assert note is not None and "DEFAULT_OBJECTIVE" in note
    assert "| held-out workload | XGBoost rank |" in markdown_table(metrics)


def test_metrics_of_a_perfect_and_a_reversed_ranking() -> None:
    rel = np.asarray([0.2, 1.0, 0.5, 0.0, 0.25] * 3)
    perfect = cost_model.ranking_metrics(rel, rel)
    assert perfect["ndcg_at_10"] == pytest.approx(1.0) and perfect["ndcg"] == pytest.approx(1.0)
    assert perfect["spearman"] == pytest.approx(1.0)
    assert perfect["top1_regret"] == 1.0 and perfect["top10_regret"] == 1.0
    worst = cost_model.ranking_metrics(rel, -rel)
    assert worst["ndcg_at_10"] < perfect["ndcg_at_10"] and worst["spearman"] == pytest.approx(-1.0)
    # the first pick failed: counted as the slowest ok candidate (relevance 0.2)
    assert worst["top1_regret"] == pytest.approx(1.0 / 0.2)
