"""The record: one compact line per run, and docs/results.md generated from it."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import common, record, results_doc
from benchmarks.__main__ import main


def test_the_committed_results_page_regenerates_byte_identically() -> None:
    lines = record.load(common.HERE / "results.jsonl")
    assert lines, "benchmarks/results.jsonl is empty"
    assert results_doc.document(lines) == results_doc.DOC.read_text(encoding="utf-8")


def test_a_run_appends_exactly_one_compact_line(tmp_path: Path) -> None:
    path = tmp_path / "record.jsonl"
    path.write_text('{"suite":"earlier"}\n', encoding="utf-8")
    out = tmp_path / "raw"
    code = main(["run", "--suite", "compile", "--quick", "--out", str(out), "--record", str(path)])
    assert code == 0
    text = path.read_text(encoding="utf-8")
    assert text.startswith('{"suite":"earlier"}\n') and text.count("\n") == 2
    line = json.loads(text.splitlines()[1])
    assert len(text.splitlines()[1].encode()) < 4000
    assert line["suite"] == "compile" and line["kind"] == "compile" and line["quick"] is True
    assert line["command"].startswith("python -m benchmarks run --suite compile --quick")
    assert line["utc"].endswith("Z")
    assert line["machine"]["cpu_model"] and line["machine"]["cpu"] and line["machine"]["cores"] >= 1
    assert {"loomtune", "numpy", "llvmlite"} <= line["versions"].keys()
    assert line["rows"] and all({"case", "compile_ms", "correct"} <= r.keys() for r in line["rows"])
    (raw,) = out.glob("compile-*.json")  # the full result still goes to the raw folder
    assert json.loads(raw.read_text(encoding="utf-8"))["suite"] == "compile"


def test_the_page_shows_each_machines_newest_full_run_newest_first(tmp_path: Path) -> None:
    def entry(cpu: str, utc: str, ms: float, quick: bool = False) -> dict:
        return {
            "suite": "tune",
            "kind": "tune",
            "command": "python -m benchmarks tune",
            "utc": utc,
            "quick": quick,
            "seed": 0,
            "machine": {"cpu_model": "CPU", "cpu": cpu, "cores": 2},
            "versions": {"loomtune": "0"},
            "rows": [{"workload": "matmul 512³", "final_ms": ms, "met": True, "correct": True}],
        }

    lines = [
        entry("znver3", "2026-01-01T00:00:00Z", 1.25),
        entry("znver3", "2026-01-02T00:00:00Z", 2.25),
        entry("znver3", "2026-01-03T00:00:00Z", 3.25, quick=True),
        entry("emeraldrapids", "2026-01-01T12:00:00Z", 4.25),
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(record.dumps(e) + "\n" for e in lines), encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# x\n\n<!-- results:begin -->\nold\n<!-- results:end -->\n", encoding="utf-8"
    )
    results_doc.write(path, tmp_path / "results.md", readme)
    page = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert page.index("| 2.25 |") < page.index("| 4.25 |") and "| 1.25 |" not in page
    assert "| 3.25 |" not in page  # quick runs are never shown
    block = readme.read_text(encoding="utf-8")
    assert "old" not in block and "znver3 (CPU, 2 cores)" in block and "docs/results.md" in block
    bare = tmp_path / "BARE.md"
    bare.write_text("# no markers\n", encoding="utf-8")
    assert results_doc.write(path, tmp_path / "results.md", bare) == [tmp_path / "results.md"]
    assert bare.read_text(encoding="utf-8") == "# no markers\n"


def test_model_runs_of_some_models_keep_each_models_newest_rows() -> None:
    """`models --models NAMES` covers some rows: per machine the newest row of each (model,
    threads) stands, with its own run's date and command; a run left with none drops out."""

    def entry(utc: str, rows: list[tuple[str, int | None, float]]) -> dict:
        return {
            "suite": "models",
            "kind": "models",
            "command": f"python -m benchmarks models # {utc}",
            "utc": utc,
            "seed": 0,
            "machine": {"cpu_model": "CPU", "cpu": "znver4", "cores": 2},
            "versions": {},
            "rows": [
                {"model": m, **({"threads": t} if t else {}), "loomtune_ms": ms}
                for m, t, ms in rows
            ],
        }

    lines = [
        entry("2026-01-01T00:00:00Z", [("bert", None, 1.25), ("resnet18", None, 2.25)]),
        entry("2026-01-02T00:00:00Z", [("bert", 1, 3.25), ("bert", 2, 4.25)]),
        entry("2026-01-03T00:00:00Z", [("mobilenetv2", 2, 5.25)]),
        entry("2026-01-04T00:00:00Z", [("bert", 2, 6.25)]),
    ]
    page = results_doc.document(lines)
    for shown in ("2.25", "3.25", "5.25", "6.25"):
        assert f"| {shown} |" in page
    assert "| 1.25 |" not in page and "| 4.25 |" not in page  # superseded rows
    assert "# 2026-01-01T" in page and page.count("- znver4 (CPU, 2 cores)") == 4


def test_lowp_runs_of_some_operators_keep_each_rows_newest() -> None:
    """`lowp --only dense_int8` after a full run: the full run's other rows still stand."""

    def entry(utc: str, rows: dict[str, float]) -> dict:
        return {
            "suite": "lowp",
            "kind": "lowp",
            "command": f"python -m benchmarks lowp # {utc}",
            "utc": utc,
            "seed": 0,
            "machine": {"cpu_model": "CPU", "cpu": "znver5", "cores": 2},
            "versions": {},
            "rows": [{"workload": w, "final_ms": ms} for w, ms in rows.items()],
        }

    lines = [
        entry("2026-01-01T00:00:00Z", {"matmul_int8 1024³": 2.25, "dense_int8 x": 1.25}),
        entry("2026-01-02T00:00:00Z", {"dense_int8 x": 3.25}),
    ]
    page = results_doc.document(lines)
    assert "| 2.25 |" in page and "| 3.25 |" in page and "| 1.25 |" not in page
