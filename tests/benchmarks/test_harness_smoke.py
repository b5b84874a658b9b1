"""The benchmark harness end to end at smoke-test sizes: files and tables, not speed.

Timings on a shared machine say nothing in a test, so only what the harness
promises is checked: a result file with the documented fields, every kernel
correct, and a report that renders them.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.__main__ import main
from benchmarks.programs import SUITES
from benchmarks.report import BEGIN, END, HEADING, replace_section, suite_section

TOP_FIELDS = {
    "format",
    "suite",
    "kind",
    "quick",
    "command",
    "seed",
    "utc",
    "machine",
    "target",
    "loomtune_version",
    "environment",
    "measure",
    "rows",
    "scaling",
}
ROW_FIELDS = {
    "case",
    "op",
    "params",
    "schedule",
    "loops",
    "threads",
    "target",
    "correct",
    "compile_ms",
    "loomtune",
    "numpy",
    "latency_ms",
    "numpy_ms",
    "ratio",
    "gflops",
    "others_load",
}


def test_quick_loopkinds_run_writes_a_complete_result_and_renders(tmp_path: Path) -> None:
    assert main(["run", "--suite", "loopkinds", "--quick", "--out", str(tmp_path)]) == 0

    (path,) = tmp_path.glob("loopkinds-*.json")
    result = json.loads(path.read_text(encoding="utf-8"))
    assert result.keys() >= TOP_FIELDS
    assert result["suite"] == "loopkinds" and result["quick"] is True
    assert result["command"].endswith("run --suite loopkinds --quick --out " + str(tmp_path))
    machine = result["machine"]
    assert machine["cpu_model"] and machine["logical_cores"] >= 1 and machine["llvm"]
    assert isinstance(machine["blas"], list)

    cases = SUITES["loopkinds"].build(True)
    assert [row["label"] for row in result["rows"]] == [case.label for case in cases]
    for row in result["rows"]:
        assert row.keys() >= ROW_FIELDS, row["label"]
        assert row["correct"] is True, (row["label"], row["message"])
        for timing in (row["loomtune"], row["numpy"]):
            assert len(timing["times_ms"]) == result["measure"]["repeat"]
            assert timing["median_ms"] > 0
        assert row["ratio"] == row["numpy_ms"] / row["latency_ms"]

    # every 1-thread/2-thread pair timed together gives one speed-up
    groups = {case.group for case in cases if case.group}
    assert {s["group"] for s in result["scaling"]} == groups
    for entry in result["scaling"]:
        assert entry["threads"] == [1, 2] and entry["speedup"] > 0

    section = suite_section(result)
    for case in cases:
        assert case.name in section
    assert "| case |" in section and "speed-up" in section


def test_readme_section_is_added_once_then_replaced_between_markers() -> None:
    readme = "# project\n\n## Export\n\ntext\n"
    first = replace_section(readme, "table one")
    assert first.startswith(readme.rstrip("\n"))
    assert first.count(HEADING) == 1 and f"{BEGIN}\ntable one\n{END}" in first
    edited = first.replace("## Export\n\ntext", "## Export\n\nnew text")  # someone else's edit
    second = replace_section(edited, "table two")
    assert "table one" not in second and "table two" in second and "new text" in second
    assert second.count(HEADING) == 1 and second.count(BEGIN) == 1
