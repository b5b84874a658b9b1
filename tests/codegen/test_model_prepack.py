"""Weights pre-packed at load: a model whose kernels pack their weight in column panels
packs each weight once, at construction (and at export), with the same results bit for
bit as packing on every call, and holds the packed copy instead of the original."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.host import host_target
from codegen.model import CompiledModel
from codegen.model_export import export_model
from frontend.onnx import load_onnx
from ir.graph import run_graph
from ir.graph.plan import ModelPlan, build_plan
from ir.program import Program
from ir.schedule import Schedule, ScheduleError
from ir.schedule.state import all_blocks
from tests.codegen.model_export_kit import build_runner, run_library, within_tolerance
from tests.models import encoder_layer

WIDTH = 16


def _pack_weight(program: Program) -> Program | None:
    """The weight a matmul-like block reads along its column axis, packed in panels under
    the column-tile loop (`compute_at`), as the tuner's multi-level tiling may do; None
    when the program has no such read."""
    sch = Schedule(program)
    inputs = {b.name for b in program.inputs}
    for r in all_blocks(program):
        block = r.block
        spatial = [iv.var for iv in block.iter_vars if iv.kind == "spatial"]
        if not block.is_reduction:
            continue
        for rd in block.reads:
            if rd.buffer.name not in inputs or len(rd.buffer.shape) != 2:
                continue
            if rd.region[-1].min != spatial[-1]:
                continue
            try:
                packed = sch.pack_panels(block.name, rd.buffer.name, WIDTH)
                *outer, j, k = sch.get_loops(block.name)
                j0, j1 = sch.split(j, [None, WIDTH])
                sch.reorder(*outer, j0, k, j1)
                sch.compute_at(packed, j0)
            except ScheduleError:
                return None
            return sch.program
    return None


def _packed_programs(plan: ModelPlan) -> dict[str, Program]:
    out = {}
    for t in plan.tasks:
        program = _pack_weight(t.task.program)
        if program is not None:
            out[t.task.key] = program
    return out


@pytest.fixture(scope="module")
def encoder():
    proto = encoder_layer(layers=2)
    graph = load_onnx(proto)
    plan = build_plan(graph)
    programs = _packed_programs(plan)
    assert len(programs) >= 3  # the QKV/output dense layers and both FFN matmuls
    return proto, graph, plan, programs


def test_weights_are_packed_once_and_results_are_bit_exact(encoder) -> None:
    proto, graph, plan, programs = encoder
    packed = CompiledModel(plan, programs)
    in_kernel = CompiledModel(plan, programs, prepack=False)
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for _, t in graph.inputs]
    outs = packed(*xs)
    for out, same in zip(outs, in_kernel(*xs)):
        assert np.array_equal(out, same)
    for out, ref in zip(outs, run_graph(graph, xs)):
        within_tolerance(out, ref)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(session.get_inputs(), xs)}
    for out, ref in zip(outs, session.run(None, feed)):
        within_tolerance(out, ref)
    # no kernel packs per call any more; each step got its own weight's panels
    assert not [b.name for k in packed.kernels for b in k.program.allocs if "packed" in b.name]
    assert [b.name for k in in_kernel.kernels for b in k.program.allocs if "packed" in b.name]
    packed_names = [k for k in packed.constants if "#" in k]
    weight_steps = sum(1 for s in plan.steps if plan.tasks[s.task].task.key in programs)
    assert len(packed_names) == weight_steps == 12
    # the panels replace the originals (every width here divides the columns: same bytes)
    assert not {k.split("#")[0] for k in packed_names} & set(packed.constants)
    assert packed.weight_bytes == in_kernel.weight_bytes
    assert len(packed.kernels) == len(plan.tasks)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")
def test_the_exported_library_embeds_the_packed_weights(encoder, tmp_path: Path) -> None:
    _, graph, plan, programs = encoder
    lib = tmp_path / "libenc.so"
    done = export_model(plan, host_target(1), name="enc", output=lib, programs=programs)
    assert done.kernels == len(plan.tasks)
    rng = np.random.default_rng(6)
    xs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for _, t in graph.inputs]
    types = [graph.types[v] for v in graph.outputs]
    outs = run_library(tmp_path, build_runner(tmp_path, lib, "enc", (xs, types)), xs, types)
    for out, ref, same in zip(outs, run_graph(graph, xs), CompiledModel(plan, programs)(*xs)):
        within_tolerance(out, ref)
        assert np.array_equal(out, same)  # the same kernels on the same packed weights


def _shared_task_model() -> onnx.ModelProto:
    """y = ((x @ W) @ x) @ W: one matmul, its B a weight in two steps (the same one:
    tied) and an activation in the third."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.uniform(-0.3, 0.3, (32, 32)).astype(np.float32), "W")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("MatMul", ["a", "x"], ["b"]),
        helper.make_node("MatMul", ["b", "W"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [32, 32]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "shared", [io[0]], [io[1]], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_task_with_a_weight_in_some_steps_only_and_tied_weights() -> None:
    graph = load_onnx(_shared_task_model())
    plan = build_plan(graph)
    # two tasks of one matmul: B a load-time constant (layout-free), and B an activation
    assert len(plan.steps) == 3
    assert [t.task.layout_free for t in plan.tasks] == [("B",), ()]
    assert [t.count for t in plan.tasks] == [2, 1]
    assert len({t.task.key for t in plan.tasks}) == 2
    programs = _packed_programs(plan)
    model = CompiledModel(plan, programs)
    # B pre-packed in the first; packed per call in the second
    assert len(model.kernels) == 2
    assert [b.name for b in model.kernels[0].program.inputs] == ["A", "B_packed"]
    assert [b.name for b in model.kernels[1].program.allocs] == ["B_packed"]
    assert [model.steps[i].task for i in range(3)] == [0, 1, 0]
    assert list(model.constants) == ["W#B_packed"]  # one packed copy for both steps; W gone
    x = np.random.default_rng(1).uniform(-1, 1, (32, 32)).astype(np.float32)
    (out,) = model(x)
    (same,) = CompiledModel(plan, programs, prepack=False)(x)
    assert np.array_equal(out, same)
    within_tolerance(out, run_graph(graph, [x])[0])
