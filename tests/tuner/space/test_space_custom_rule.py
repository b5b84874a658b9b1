"""A user's rule (examples/custom_rule.py) plugged in by name: sampled, correct, mutated."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from codegen.host import host_target
from tests.tuner.space.spacecheck import check_correct, odd_task
from tuner.space import DEFAULT_RULES, RULES, Registry, RegistryError, ScheduleRule, default_space

ROOT = Path(__file__).resolve().parents[3]


def _example() -> type[ScheduleRule]:
    if "tile-transpose" not in RULES:
        spec = importlib.util.spec_from_file_location(
            "custom_rule_example", ROOT / "examples" / "custom_rule.py"
        )
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return RULES.get("tile-transpose")


def test_the_example_rule_joins_the_default_space_by_name() -> None:
    rule = _example()
    assert rule.name == "tile-transpose"
    task = odd_task("transpose")
    target = host_target(1)
    space = default_space(task.program, target, rules=[*DEFAULT_RULES, "tile-transpose"])
    rng = random.Random(1)
    trace = space.sample(rng)
    rules = space.rule_part(trace)
    assert rules is not None
    tiles = [i for i, inst in enumerate(rules.instructions) if inst.kind == "sample_perfect_tile"]
    assert len(tiles) == 2 and any(inst.kind == "reorder" for inst in rules.instructions)
    check_correct(task, trace, target)
    mutant = space.mutate(trace, rng)  # its tile sizes are mutated like the built-in ones
    assert mutant is not None
    check_correct(task, mutant, target)
    changed = space.rule_part(mutant)
    assert changed is not None and [changed.decisions[i] for i in tiles] != [
        rules.decisions[i] for i in tiles
    ]


def test_a_name_is_registered_once() -> None:
    registry: Registry[ScheduleRule] = Registry("schedule rule")

    @registry.register("mine")
    class Mine(ScheduleRule):
        pass

    assert registry.names() == ["mine"] and Mine.name == "mine"
    with pytest.raises(RegistryError, match="'mine' is already registered"):

        @registry.register("mine")
        class Other(ScheduleRule):
            pass

    with pytest.raises(RegistryError, match="unknown schedule rule 'yours'; known: mine"):
        registry.get("yours")
