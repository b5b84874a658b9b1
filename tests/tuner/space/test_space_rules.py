"""Each rule of the registry alone (with the postprocessors): it fires where it should, and
what it makes is correct. Parametrised over the whole registry, the example's rule included."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from codegen.host import host_target
from ir.task import Task, custom_task
from tests.tuner.space.spacecheck import check_correct, odd_task, samples
from tuner.space import RULES, RuleSpace
from tuner.space.space import MARKER

ROOT = Path(__file__).resolve().parents[3]


def _load_example() -> None:
    """examples/custom_rule.py registers "tile-transpose" (loaded once, by path)."""
    if "tile-transpose" not in RULES:
        spec = importlib.util.spec_from_file_location(
            "custom_rule_example", ROOT / "examples" / "custom_rule.py"
        )
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_load_example()

# Two cheap element-wise blocks in a row: the case auto-inline is for.
SCALE_SHIFT = {
    "format": "loomtune.workload/1",
    "name": "scale_shift",
    "sizes": {"m": 9, "n": 21},
    "inputs": [{"name": "A", "shape": ["m", "n"], "dtype": "float32"}],
    "computes": [
        {
            "name": "B",
            "shape": ["m", "n"],
            "axes": ["i", "j"],
            "body": ["mul", ["load", "A", "i", "j"], 2.0],
        },
        {
            "name": "C",
            "shape": ["m", "n"],
            "axes": ["i", "j"],
            "body": ["add", ["load", "B", "i", "j"], 1.0],
        },
    ],
    "outputs": ["C"],
}

# Where each rule fires, and an instruction kind its firing leaves in the trace.
WHERE: dict[str, tuple[list[str], str]] = {
    "auto-inline": (["scale_shift"], "reverse_compute_inline"),
    "add-rfactor": (["reduce_sum"], "sample_categorical"),
    "multi-level-tiling": (["matmul", "conv2d_nhwc"], "cache_write"),
    "column-reduction": (["dense_int8"], "reorder"),  # its weight's column sums
    # on the host: the test machine's AVX-512 VNNI (skipped below where it has none)
    "multi-level-tiling-intrin": (["matmul_int8"], "tensorize"),
    "reduction-chain": (["softmax", "layer_norm", "avg_pool2d"], "compute_at"),
    "random-compute-location": (["conv2d_nchw"], "sample_compute_location"),
    "parallel-vectorize-unroll": (["gelu", "matmul"], "annotate"),
    "tile-transpose": (["transpose"], "split"),
}


def _task(name: str) -> Task:
    return custom_task(SCALE_SHIFT) if name == "scale_shift" else odd_task(name)


def test_every_registered_rule_has_a_case() -> None:
    assert sorted(WHERE) == sorted(RULES.names())


@pytest.mark.parametrize("rule", RULES.names())
def test_rule_fires_and_stays_correct(rule: str) -> None:
    ops, kind = WHERE[rule]
    target = host_target(2)
    if rule == "multi-level-tiling-intrin" and not target.has_feature("avx512vnni"):
        pytest.skip("this CPU has no AVX-512 VNNI: the rule has nothing to tensorize with")
    for op in ops:
        task = _task(op)
        space = RuleSpace(task.program, target, rules=[rule])
        traces = samples(space, random.Random(rule + op), 3, max_tries=9)
        fired = 0
        for trace in traces:
            rules = space.rule_part(trace)
            assert rules is not None and any(i.attr("key") == MARKER for i in trace.instructions)
            fired += any(i.kind == kind for i in rules.instructions)
            check_correct(task, trace, target)
        assert fired, f"{rule} never fired on {op}"


def test_unknown_rule_is_a_clear_error() -> None:
    from tuner.space import RegistryError

    with pytest.raises(RegistryError, match="unknown schedule rule 'no-such-rule'"):
        RuleSpace(odd_task("gelu").program, host_target(1), rules=["no-such-rule"])
