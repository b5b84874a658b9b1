"""Validation at the door: every hostile input a 422 naming its field, never a 500.

Bodies are sent as raw text: `NaN` and `Infinity` are what a client can write
but JSON (and the database) cannot carry.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from tests.service.coordinator.apikit import ZEN, Api

MATMUL = '{"op": "matmul", "params": {"m": 16, "n": 16, "k": 16}}'
DEFINITION: dict[str, Any] = {
    "format": "loomtune.workload/1",
    "name": "scaled",
    "sizes": {"m": 8, "k": 4},
    "inputs": [{"name": "A", "shape": ["m", "k"]}],
    "computes": [
        {
            "name": "C",
            "shape": ["m"],
            "axes": ["i"],
            "reduce": "sum",
            "reduce_axes": [{"name": "r", "extent": "k"}],
            "body": ["mul", ["load", "A", "i", "r"], {"const": 2.0, "dtype": "float32"}],
        }
    ],
    "outputs": ["C"],
}


def _custom(path: list[Any], value: Any) -> str:
    definition = copy.deepcopy(DEFINITION)
    node: Any = definition
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "@@"
    body = {"workload": {"definition": definition, "params": {}}, "target": ZEN, "trials": 4}
    return json.dumps(body).replace('"@@"', value)


CONST = ["computes", 0, "body", 2, "const"]

BAD: list[tuple[str, str, str, list[Any], str]] = [
    ("infinite trials", "/v1/jobs", f'{{"workload": {MATMUL}, "target": "{ZEN}", "trials": Infinity}}', ["body", "trials"], "integer"),
    ("NaN trials", "/v1/jobs", f'{{"workload": {MATMUL}, "target": "{ZEN}", "trials": NaN}}', ["body", "trials"], "integer"),
    ("string trials", "/v1/jobs", f'{{"workload": {MATMUL}, "target": "{ZEN}", "trials": "4"}}', ["body", "trials"], "integer"),
    ("float trials", "/v1/jobs", f'{{"workload": {MATMUL}, "target": "{ZEN}", "trials": 4.0}}', ["body", "trials"], "integer"),
    ("threads overflow", "/v1/jobs", f'{{"workload": {MATMUL}, "target": "llvm -mcpu=znver3 -num-threads=2147483648", "trials": 4}}', ["body", "target"], "1024"),
    ("too many threads", "/v1/jobs", f'{{"workload": {MATMUL}, "target": "llvm -mcpu=znver3 -num-threads=1025", "trials": 4}}', ["body", "target"], "1024"),
    ("param overflow", "/v1/jobs", f'{{"workload": {{"op": "matmul", "params": {{"m": 2147483648}}}}, "target": "{ZEN}", "trials": 4}}', ["body", "workload", "params", "m"], "2147483647"),
    ("constant 1e400", "/v1/jobs", _custom(CONST, "1e400"), ["body", "workload", "definition"], "computes[0].body[2].const"),
    ("constant beyond float32", "/v1/jobs", _custom(CONST, "1e39"), ["body", "workload", "definition"], "float32"),
    ("constant NaN", "/v1/jobs", _custom(CONST, "NaN"), ["body", "workload", "definition"], "float32"),
    ("size overflow", "/v1/jobs", _custom(["sizes", "m"], "2147483648"), ["body", "workload", "definition"], "sizes.m"),
    ("out-of-bounds read", "/v1/jobs", _custom(["computes", 0, "body", 1, 2], '["sub", "i", 3]'), ["body", "workload", "definition", "computes", "C"], "reads A out of bounds on axis 0"),
    ("worker threads", "/v1/workers", '{"name": "w", "target": "llvm -mcpu=znver3 -num-threads=100000"}', ["body", "target"], "1024"),
    ("NaN lease size", "/v1/workers/1/lease", '{"max_candidates": NaN}', ["body", "max_candidates"], "integer"),
    ("infinite run time", "/v1/workers/1/results", '{"results": [{"candidate_id": 1, "record_id": "6f1c2a4e-0000-4000-8000-000000000000", "status": "ok", "run_times_ms": [Infinity]}]}', ["body", "results", 0, "run_times_ms", 0], "finite"),
]  # fmt: skip


@pytest.mark.parametrize("what, path, raw, loc, words", BAD, ids=[b[0] for b in BAD])
def test_hostile_inputs_are_422_naming_the_field(
    sqlite_api: Api, what: str, path: str, raw: str, loc: list[Any], words: str
) -> None:
    admin = sqlite_api.token("admin")
    sqlite_api.register(admin)
    r = sqlite_api.call(
        "POST", path, admin, content=raw, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert errors[0]["loc"] == loc, errors
    assert words.lower() in errors[0]["msg"].lower(), errors
    assert sqlite_api.count("SELECT count(*) FROM jobs") == 0


def test_a_guarded_read_and_a_typed_infinity_are_accepted(sqlite_api: Api) -> None:
    client = sqlite_api.token("client")
    guarded = _custom(
        ["computes", 0, "body", 1, 2], '["select", ["ge", "i", 3], ["sub", "i", 3], 0]'
    )
    r = sqlite_api.call(
        "POST", "/v1/jobs", client, content=guarded, headers={"content-type": "application/json"}
    )
    assert r.status_code == 201, r.text
    typed = _custom(CONST, '"-inf"')
    r = sqlite_api.call(
        "POST", "/v1/jobs", client, content=typed, headers={"content-type": "application/json"}
    )
    assert r.status_code == 201, r.text


def test_a_measurement_of_a_workload_that_cannot_run_is_a_failure_not_a_raise() -> None:
    """What a worker sees when a bad workload got past the door (an older coordinator)."""
    from codegen.host import host_target
    from ir.task import custom_task
    from tuner.space.simple import SimpleSpace
    from workers.measure import Measurer

    definition = copy.deepcopy(DEFINITION)
    definition["computes"][0]["body"][1][2] = ["sub", "i", 3]
    task = custom_task(definition)
    trace = SimpleSpace(task.program).sample(random.Random(0))
    result = Measurer(worker="t").measure(task, host_target(1), trace)
    assert result.status == "runtime_error" and "reference" in result.message, result
