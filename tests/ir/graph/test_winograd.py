"""ir/graph/lower_winograd.py: a model's stride-1 3×3 convs offered as Winograd F(2×2, 3×3)
beside the direct conv, computing the same values from the same arguments, with the weight
transform run once at load (ir/prepack.py); the plan runs whichever is chosen."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.model import CompiledModel
from frontend.onnx import load_onnx
from ir.graph import TensorType, make_graph, make_node, run_graph
from ir.graph.lower_winograd import AT, BT, G
from ir.graph.plan import ModelPlan, build_plan
from service.model import Schedules, choose_fastest
from tests.models import res_block

F32 = "float32"


@pytest.fixture(scope="module")
def block() -> tuple[object, ModelPlan]:
    graph = load_onnx(res_block())
    return graph, build_plan(graph)


def _offered(plan: ModelPlan) -> dict[str, list[str]]:
    return {t.pattern: [name for name, _ in t.alternatives] for t in plan.tasks}


def test_stride_one_3x3_convs_offer_winograd_with_the_same_arguments(block) -> None:
    _, plan = block
    assert _offered(plan) == {
        "transpose+conv2d+relu": [],  # the stride-2 stem
        "conv2d+relu": ["winograd"],
        "conv2d+add+relu+transpose": ["winograd"],  # the residual add, relu, NCHW out fused in
    }
    for t in plan.tasks:
        for name, alt in t.alternatives:
            assert alt.workload.name.startswith("winograd_")
            direct = [b.concrete_shape() for b in t.task.program.params]
            assert [b.concrete_shape() for b in alt.program.params] == direct
            assert alt.layout_free == t.task.layout_free  # the weight and the folded bias
            assert t.label(name) == f"{t.pattern} [winograd]"


@pytest.mark.parametrize("implementation", ["direct", "winograd"])
def test_either_implementation_computes_the_graph(block, implementation: str) -> None:
    graph, plan = block
    chosen = plan.choose(lambda t: implementation)
    assert {t.implementation for t in chosen.tasks if t.alternatives} == {implementation}
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    (want,) = run_graph(graph, [x])
    (got,) = CompiledModel(chosen)(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_weight_transform_runs_once_at_load(block) -> None:
    _, plan = block
    t = next(t for t in plan.tasks if t.alternatives)
    winograd = dict(t.alternatives)["winograd"]
    prologue, main = winograd.hoist(winograd.program)
    assert prologue is not None
    # G g then (G g) G^T: U (4×4 per channel pair) is what the kernel reads; G g is scratch.
    assert [b.concrete_shape() for b in prologue.outputs] == [(4, 4, 8, 8)]
    assert [b.concrete_shape() for b in prologue.allocs] == [(4, 3, 8, 8)]
    weight = winograd.program.inputs[1]
    assert weight.name not in {b.name for b in main.inputs}
    direct_prologue, _ = t.task.hoist(t.task.program)
    assert direct_prologue is None  # the direct conv reads its weight as it is


def test_the_transforms_are_winograds() -> None:
    """A^T [(G g G^T) ⊙ (B^T d B)] A is the 2×2 correlation of a 4×4 tile with a 3×3 g."""
    rng = np.random.default_rng(1)
    d, g = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
    bt, gm, at = np.array(BT), np.array(G), np.array(AT)
    got = at @ ((gm @ g @ gm.T) * (bt @ d @ bt.T)) @ at.T
    want = np.array([[np.sum(d[i : i + 3, j : j + 3] * g) for j in range(2)] for i in range(2)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("size", "attrs", "offered"),
    [
        (14, {}, True),  # 7×7 = 49 tiles: the smallest offered
        (12, {}, False),  # 36 tiles: the transforms outweigh the saving
        (16, {"strides": (2, 2)}, False),
        (16, {"dilations": (2, 2), "pads": (2, 2, 2, 2)}, False),
        (16, {"group": 2}, False),
    ],
)
def test_only_dense_stride_one_3x3_convs_with_enough_tiles(size: int, attrs, offered) -> None:
    c = 4
    groups = attrs.pop("group", 1)
    w = np.random.default_rng(2).standard_normal((c, c // groups, 3, 3)).astype(np.float32)
    node = make_node(
        "conv2d", ["x", "w"], ["y"], pads=attrs.pop("pads", (1, 1, 1, 1)), groups=groups, **attrs
    )
    g = make_graph("conv", [("x", TensorType((1, c, size, size), F32))], [node], {"w": w}, ["y"])
    plan = build_plan(g)
    assert any(t.alternatives for t in plan.tasks) == offered


def test_the_fastest_stored_implementation_is_chosen(block) -> None:
    _, plan = block
    t = next(t for t in plan.tasks if t.alternatives)
    direct, winograd = t.task.key, dict(t.alternatives)["winograd"].key
    picked = choose_fastest(plan, {direct: 2.0, winograd: 1.2}.get)
    assert [u.implementation for u in picked.tasks if u.pattern == t.pattern] == ["winograd"]
    assert (
        dict(next(u for u in picked.tasks if u.pattern == t.pattern).alternatives)["direct"].key
        == direct
    )
    # Untimed implementations lose to a timed one; with none timed the plan's stands.
    assert choose_fastest(plan, {direct: 9.0}.get).tasks == plan.tasks
    assert choose_fastest(plan, lambda key: None).tasks == plan.tasks
    # A stored schedule that does not replay is not a time.
    program = t.task.program
    only_direct = Schedules({direct: program}, times={direct: 5.0, winograd: 1.0})
    assert only_direct.choose(plan).tasks == plan.tasks
