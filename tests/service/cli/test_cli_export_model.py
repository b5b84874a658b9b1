"""`loomtune export --model`: one library per model, linked from a C program built with
-Werror against its header, giving ONNX Runtime's (and the interpreter's) outputs; stored
schedules used; one-line errors."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import onnx
import pytest

from codegen.host import host_target
from frontend.onnx import load_onnx
from ir.graph.interpret import run_graph
from ir.graph.plan import build_plan
from service.cli.main import main
from service.db.store import open_database
from service.model import onnxruntime_session, sample_inputs
from tests.codegen.model_export_kit import build_runner, run_library, within_tolerance
from tests.models import conv_net, encoder_layer, mlp
from tuner.database import TuningRecord
from tuner.space.space import default_space

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs the system C compiler")

MODELS = {"mlp": mlp, "encoder": encoder_layer, "conv_net": conv_net}


def export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run `loomtune export …` in-process: its exit code and stderr."""
    code = main(["export", *argv])
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err


@pytest.mark.parametrize("model", sorted(MODELS))
def test_exported_library_gives_onnxruntimes_outputs(
    db, capsys, tmp_path: Path, model: str
) -> None:
    path = tmp_path / f"{model}.onnx"
    onnx.save(MODELS[model](), path)
    lib = tmp_path / f"lib{model}.so"
    code, err = export(capsys, "--model", str(path), "--format", "so", "-o", str(lib))
    assert code == 0, err
    assert "default loop nests" in err and f"{model}_run" in err
    header = lib.with_suffix(".h").read_text()
    assert f"int {model}_run(const float* x, float* y);" in header

    graph = load_onnx(path)
    inputs = sample_inputs(graph, seed=1)
    types = [graph.types[v] for v in graph.outputs]
    exe = build_runner(tmp_path, lib, model, (inputs, types))
    outputs = run_library(tmp_path, exe, inputs, types)
    for out, ref in zip(outputs, run_graph(graph, inputs)):
        within_tolerance(out, ref)
    session = onnxruntime_session(path, threads=1)
    if session is not None:
        feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
        for out, ref in zip(outputs, session.run(None, feed)):
            within_tolerance(out, ref)


def test_stored_schedules_are_exported_at_two_threads(
    db, capsys, tmp_path: Path, mlp_file: Path
) -> None:
    """Every task gets a sampled schedule of the default space (parallel loops included)
    stored as its best for the 2-thread target: the library runs them, still correct."""
    target = host_target(2)
    plan = build_plan(load_onnx(mlp_file))
    database = open_database(db)
    rng = random.Random(0)
    for t in plan.tasks:
        trace = default_space(t.task.program, target).sample(rng)
        database.commit_record(
            TuningRecord.create(
                workload_key=t.task.key,
                op=t.task.op,
                params=t.task.params,
                definition=t.task.to_definition(),
                target=target.canonical(),
                trace=trace.to_json(),
                trace_hash=trace.hash,
                run_times_ms=[1.0, 1.0],
                status="ok",
            )
        )
    lib = tmp_path / "libnet.so"
    argv = ["--model", str(mlp_file), "--format", "so", "-o", str(lib), "--name", "net"]
    code, err = export(capsys, *argv)  # 1 thread: the records are another target's
    assert code == 0 and "0 with their stored best schedule, 4 default loop nests" in err
    code, err = export(capsys, *argv, "--threads", "2")
    assert code == 0 and "4 with their stored best schedule, 0 default loop nests" in err
    assert "-num-threads=2" in lib.with_suffix(".h").read_text()
    graph = load_onnx(mlp_file)
    inputs = sample_inputs(graph)
    types = [graph.types[v] for v in graph.outputs]
    exe = build_runner(tmp_path, lib, "net", (inputs, types))
    (out,) = run_library(tmp_path, exe, inputs, types)
    within_tolerance(out, run_graph(graph, inputs)[0])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "ll"], "use --format so, not ll"),
        (["--format", "so", "--name", "int"], "C or C++ keyword"),
        (["--format", "so", "--name", "2x"], "invalid symbol name '2x'"),
        (["matmul", "--format", "so"], "not several"),
        (["--format", "so", "--trace", "t.json"], "not several"),
        (["--format", "so", "--repair"], "--repair goes with --trace"),
    ],
)
def test_user_errors_are_one_line_exit_2(
    db, capsys, tmp_path: Path, mlp_file: Path, argv: list[str], message: str
) -> None:
    code, err = export(capsys, "--model", str(mlp_file), "-o", str(tmp_path / "libm.so"), *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "libm.so").exists()


def test_a_file_that_is_not_onnx_is_one_line(db, capsys, tmp_path: Path) -> None:
    bad = tmp_path / "notes.onnx"
    bad.write_text("not a model")
    code, err = export(capsys, "--model", str(bad), "--format", "so", "-o", str(tmp_path / "l.so"))
    assert code == 2 and "notes.onnx" in err and len(err.strip().splitlines()) == 1
    code, err = export(
        capsys, "--model", str(tmp_path / "missing.onnx"), "--format", "so", "-o", "l.so"
    )
    assert code == 2 and "missing.onnx" in err and len(err.strip().splitlines()) == 1
