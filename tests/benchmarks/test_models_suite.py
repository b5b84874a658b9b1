"""`python -m benchmarks models --quick`: tiny BERT, ResNet and MobileNetV2 from torch.nn,
exported, imported, compiled, checked against ONNX Runtime, timed beside it and PyTorch.

No timed assertions (the machine is shared): the record's line has its fields, every
model is correct, the ratios come from the run's own timings and the page renders.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import record, results_doc
from benchmarks.__main__ import main

pytest.importorskip("torch", reason="the models benchmark needs PyTorch (the bench extra)")


def test_quick_models_run_appends_one_correct_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOMTUNE_BENCH_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "record.jsonl"
    out = tmp_path / "raw"
    assert main(["models", "--quick", "--out", str(out), "--record", str(path)]) == 0
    (line,) = record.load(path)
    assert line["suite"] == "models" and line["kind"] == "models" and line["quick"] is True
    assert {"torch", "onnxruntime"} <= line["versions"].keys()
    assert [r["model"] for r in line["rows"]] == ["bert", "resnet18", "mobilenetv2"]
    for r in line["rows"]:
        assert r["correct"] is True and r["max_abs_err"] < 1e-3
        assert r["tasks"] <= r["kernels"] and r["tuned_tasks"] == 0  # a fresh database
        ms = r["loomtune_ms"], r["onnxruntime_ms"], r["torch_ms"]
        assert all(m > 0 for m in ms)
        assert r["x_onnxruntime"] == pytest.approx(ms[1] / ms[0], rel=1e-3)
        assert r["x_torch"] == pytest.approx(ms[2] / ms[0], rel=1e-3)
    bert = line["rows"][0]
    assert bert["tasks"] < bert["kernels"]  # the two layers share their tasks
    (memory,) = line["memory"]  # quick: the first model's memory only
    assert memory["model"] == "bert" and memory["weights_mb"] > 0
    for engine in ("loomtune", "onnxruntime", "torch"):
        assert memory[f"{engine}_peak_mb"] > 0 and memory[f"{engine}_holds_mb"] is not None
    (raw,) = out.glob("models-*.json")
    full = json.loads(raw.read_text(encoding="utf-8"))
    tasks = full["rows"][0]["task_list"]
    assert max(t["count"] for t in tasks) >= 2 and sum(t["count"] for t in tasks) == 24
    assert full["rows"][0]["torch_correct"] is True
    assert len(list((tmp_path / "cache" / "models").glob("*.onnx"))) == 3
    quick = {**line, "quick": False}  # the page shows full runs only
    page = results_doc.document([quick])
    assert "## models" in page and "× ONNX Runtime" in page and "loomtune peak" in page


def test_tuned_models_at_two_thread_counts_carry_tuning_and_own_scaling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOMTUNE_BENCH_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "record.jsonl"
    database = f"sqlite:///{tmp_path / 'tuning.db'}"
    # the model quickest to tune (9 tasks; MobileNetV2 has 17), 2 trials at each thread count
    argv = ["models", "--quick", "--models", "bert", "--no-memory", "--threads", "1,2"]
    argv += ["--tune-minutes", "0.05,0.03", "--tune-trials", "2", "--repeat", "2"]
    argv += ["--database", database]
    assert main([*argv, "--out", str(tmp_path / "raw"), "--record", str(path)]) == 0
    (line,) = record.load(path)
    assert "tuned first" in line["description"]
    one, two = line["rows"]
    assert (one["threads"], two["threads"]) == (1, 2)
    for r in (one, two):
        assert r["correct"] is True and r["trials"] > 0 and r["tuning_s"] > 0
        assert r["tuned_tasks"] >= 1  # compiled from what the tuning stored
        assert r["repeats"] == 2
    raw = json.loads(next((tmp_path / "raw").glob("models-*.json")).read_text(encoding="utf-8"))
    assert [r["tuning"]["minutes"] for r in raw["rows"]] == [0.05, 0.03]
    assert one["x_own_1thread"] is None
    single = raw["rows"][1]["loomtune_1thread_ms"]  # the 1-thread build, timed in the same call
    assert single > 0 and raw["rows"][1]["single_message"] == ""
    assert two["x_own_1thread"] == pytest.approx(single / two["loomtune_ms"], rel=1e-2)
    tasks_one, tasks_two = (r["task_list"] for r in raw["rows"])
    assert all(t["ms"] > 0 for t in tasks_one + tasks_two)  # every task profiled
    assert all(t["x_own_1thread"] > 0 for t in tasks_two)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threads", "1,2", "--tune-minutes", "5,2,1"], "3 values for 2 thread counts"),
        (["--tune-minutes", "0"], "minutes must be positive"),
        (["--tune-minutes", "ten"], "expected minutes like 30"),
        (["--repeat", "0"], "--repeat must be at least 1"),
    ],
)
def test_bad_tuning_minutes_and_repeats_are_refused_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["models", "--quick", *argv])
    except SystemExit as e:  # argparse's own refusal
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err
