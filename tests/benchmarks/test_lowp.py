"""`python -m benchmarks lowp`: the int8 / bf16 benchmark's parts on real kernels.

A tensorized kernel (a candidate of the host's design space) is verified and
timed beside numpy float32 and PyTorch's int8 paths; a wrong one is caught; the
trace says which instruction it uses; AMX paths the CPU lacks are listed. The
end-to-end run (tuning) is the slow test at the bottom. No timed assertions.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.lowp import report as lowp_report
from benchmarks.lowp import run as lowp_run
from benchmarks.lowp import suite as lowp_suite
from benchmarks.lowp.compare import NUMPY_FLOAT32, Tuned, compare, float_twin
from benchmarks.results_doc import document
from benchmarks.tune.compare import Context
from codegen.host import host_target
from codegen.kernel import compile_program
from ir.intrinsics import get_intrinsic
from ir.task import library_task
from tuner.space import default_space
from workers.timing import MeasureConfig

QUICK = MeasureConfig(warmup=1, repeat=3, min_repeat_ms=2.0)
SMALL = {"m": 64, "n": 64, "k": 64}


def _context(tmp_path: Path, with_torch: bool = True) -> Context:
    return Context(tmp_path, 0, 0.0, QUICK, lambda _: None, with_torch, 0.0, 0.0)


def _untuned(task) -> Tuned:
    return Tuned(task, task.program, compile_program(task.program))


def _tensorized_row(op: str, params: dict[str, int], task=None) -> dict:
    """A row as the tuning leaves it: a candidate of the host's space, as its best trace."""
    task = task or library_task(op, params)
    target = host_target()
    trace = default_space(task.program, target).sample(random.Random(3))
    return {"best_trace_json": trace.to_json(), "target": target.canonical()}


def _host_has(intrinsic: str) -> bool:
    return not get_intrinsic(intrinsic).missing_features(host_target().features)


@pytest.mark.skipif(not _host_has("vnni"), reason="no AVX-512 VNNI on this CPU")
def test_a_tensorized_int8_kernel_is_verified_and_timed_beside_numpy_float32_and_torch(
    tmp_path: Path,
) -> None:
    """On the host's widest int8 instruction: AMX where the CPU has it, else VNNI."""
    torch = pytest.importorskip("torch")
    task = library_task("matmul_int8", SMALL)
    row = _tensorized_row("matmul_int8", SMALL)
    widest = "amx_int8" if _host_has("amx_int8") else "vnni"
    print(f"int8 kernel tensorized with {widest} on {host_target().cpu}")
    assert lowp_run.tensorized_with(row["best_trace_json"]) == widest
    out = compare(_context(tmp_path), task, lowp_run.best_kernel(task, row))
    assert out["correct"] is True and out["message"] is None
    # the baseline is numpy's float32 matmul of the same shape, timed in the same call
    assert float_twin(task).op == "matmul" and float_twin(task).params == task.params
    assert out["ratio_numpy_f32"] == pytest.approx(out["numpy_f32_ms"] / out["latency_ms"])
    paths = {p["path"]: p for p in out["torch_paths"]}
    engines = [e for e in ("onednn", "x86") if e in torch.backends.quantized.supported_engines]
    assert set(paths) == {"torch._int_mm", *(f"quantized Linear ({e})" for e in engines)}
    for p in paths.values():  # each checked against what it computes, then timed
        assert p["message"] is None and p["torch_ms"] > 0
        assert p["ratio"] == pytest.approx(p["torch_ms"] / out["latency_ms"])
    assert "s8 × s8" in paths["torch._int_mm"]["note"]
    assert set(out["times_ms"]) == {"loomtune", NUMPY_FLOAT32, *paths}


def test_a_wrong_kernel_is_not_timed(tmp_path: Path) -> None:
    """dense_int8 compiled for another output zero point: every output is off."""
    task = library_task("dense_int8", {"m": 4, "k": 16, "n": 16})
    other = library_task("dense_int8", {"m": 4, "k": 16, "n": 16, "y_zero_point": 3})
    wrong = Tuned(task, other.program, compile_program(other.program))
    out = compare(_context(tmp_path, with_torch=False), task, wrong)
    assert out["correct"] is False and "integer element(s) differ" in out["message"]
    assert out["latency_ms"] is None and out["torch_paths"] == []


def test_without_pytorch_the_pytorch_columns_say_dash(tmp_path: Path) -> None:
    """The untuned loop nest of dense_int8: exact, timed beside numpy float32 alone."""
    task = library_task("dense_int8", {"m": 4, "k": 16, "n": 16})
    out = compare(_context(tmp_path, with_torch=False), task, _untuned(task))
    assert out["correct"] is True and out["torch_paths"] == []
    assert set(out["times_ms"]) == {"loomtune", NUMPY_FLOAT32}
    result = {"rows": [{"case": "dense_int8 4×16→16", **out}], "lowp": {"not_measured": []}}
    (caption, (headers, cells)), *others = lowp_report.tables(result)
    assert caption is None and others == []  # no table of PyTorch paths
    row = dict(zip(headers, cells[0]))
    assert row["PyTorch's fastest"] == row["PyTorch ms"] == row["× PyTorch"] == "–"
    assert row["correct"] == "yes" and row["× numpy float32"] != "–"


def test_bf16_and_dense_int8_paths_of_pytorch_match_their_references() -> None:
    """Exact where the CPU has VNNI. Without it, PyTorch's quantized Linear (oneDNN and
    FBGEMM alike) adds u8·s8 pairs in saturating int16 (`vpmaddubsw`), so full-range
    activations come out wrong — PyTorch's x86 qconfigs use 7-bit activations for that
    (`reduce_range`); the check says so and the benchmark does not time that path."""
    pytest.importorskip("torch")
    from benchmarks.tune.torch_ref import lowp_paths

    host = host_target()
    vnni = host.has_feature("avx512vnni") or host.has_feature("avxvnni")
    for op, params in (("matmul_bf16", SMALL), ("dense_int8", {"m": 16, "k": 64, "n": 32})):
        task = library_task(op, params)
        paths = lowp_paths(task, task.make_inputs(1))
        assert paths, op
        for path in paths:
            message = path.check()
            if vnni or not path.name.startswith("quantized Linear"):
                assert message is None, (op, path.name, message)
            else:
                print(f"{path.name} on a CPU without VNNI: {message}")
                assert message is None or "differ" in message, (op, path.name, message)


def test_amx_paths_the_cpu_lacks_are_listed_as_not_measured() -> None:
    no_amx = ("+avx512f", "+avx512vnni", "+avx512bf16")
    amx = (*no_amx, "+amx-tile", "+amx-int8", "+amx-bf16")
    listed = lowp_suite.not_measured(lowp_suite.SUITE, no_amx)
    assert [n["workload"] for n in listed] == [
        "matmul_int8, dense_int8 via amx_int8",
        "matmul_bf16 via amx_bf16",
    ]
    assert all(n["note"].startswith("not measured: no AMX on this CPU") for n in listed)
    assert lowp_suite.not_measured(lowp_suite.SUITE, amx) == []
    matmul_int8 = lowp_suite.SUITE[0]
    assert matmul_int8.goal_for(no_amx) == (3.5, "no AMX")
    assert matmul_int8.goal_for(amx) == (10.0, "AMX")


@pytest.mark.skipif(not _host_has("vnni"), reason="no AVX-512 VNNI on this CPU")
def test_a_dense_int8_with_weights_at_load_times_only_its_per_call_part(tmp_path: Path) -> None:
    """The row's task declares W, bias and scale constants: the best kernel's packing of W
    runs once, before the timed calls, and main(prologue(W), X) is still exact."""
    (workload,) = [w for w in lowp_suite.QUICK_SUITE if w.layout_free]
    task = workload.task()
    assert task.layout_free == ("W", "bias", "scale")
    row = _tensorized_row(task.op, task.params, task)
    tuned = lowp_run.best_kernel(task, row)
    assert tuned is not None and tuned.prologue is not None
    packed = {b.name for b in tuned.prologue[0].outputs}
    assert packed and packed <= {b.name for b in tuned.main_program.inputs}
    assert "W" not in {b.name for b in tuned.main_program.inputs}
    out = compare(_context(tmp_path, with_torch=False), task, tuned)
    assert out["correct"] is True and out["message"] is None and out["latency_ms"] > 0


def test_only_names_operators() -> None:
    assert [w.op for w in lowp_suite.select(only=["dense_int8"])] == ["dense_int8"] * 2
    with pytest.raises(ValueError, match="unknown workloads"):
        lowp_suite.select(only=["dense"])


def test_quick_lowp_run_records_a_line_and_renders_the_int8_bf16_section(
    tmp_path: Path, record: Path
) -> None:
    code = main(
        ["lowp", "--quick", "--trials", "2", "--only", "matmul_int8", "--out", str(tmp_path)]
    )
    assert code == 0
    (path,) = tmp_path.glob("lowp-*.json")
    result = json.loads(path.read_text())
    (row,) = result["rows"]
    assert row["correct"] is True and row["trials_done"] == 2
    assert row["tensorized_at"] == {}  # 2 trials: the 16th was never reached
    (line,) = [json.loads(s) for s in record.read_text().splitlines()]
    assert line["suite"] == "lowp" and line["quick"] is True
    assert line["rows"][0]["tensorized_at_16"] is None
    assert line["rows"][0]["x_numpy_f32"] == pytest.approx(row["ratio_numpy_f32"], rel=1e-3)
    assert line == json.loads(json.dumps(line))
    line["quick"] = False  # the page shows full runs only
    page = document([line])
    assert "## int8 / bf16 (lowp)" in page and "× numpy float32" in page
    assert ("not measured: no AMX" in page) == (not _host_has("amx_int8"))
    tables = lowp_report.tables(result)
    assert tables[0][1][0][0] == "workload"
