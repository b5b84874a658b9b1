"""The structural hash (the workload key) and the exact JSON round trip of programs.

The hash is sha256 of a canonical encoding: equal for equal programs in any
process, different when anything that changes the computation changes.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ir import compute as te
from ir.build import build_program
from ir.compute import Workload
from ir.errors import DefinitionError
from ir.library import OPS
from ir.program import For, Program
from ir.serialize import program_from_json, program_to_json, structural_hash
from ir.task import library_task

REPO = Path(__file__).resolve().parents[2]


def matmul(
    m: int = 8,
    n: int = 6,
    k: int = 4,
    *,
    dtype: str = "float32",
    reducer: str = "sum",
    out: str = "C",
) -> Workload:
    """matmul written with the DSL, with one knob per thing the hash must see."""
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    r = te.reduce_axis(k, "r")
    combine = {"sum": te.sum, "max": te.max}[reducer]
    C = te.compute((m, n), lambda i, j: combine(A[i, r] * B[r, j], axis=r), out)
    return Workload("matmul", (A, B), (C,))


def key(wl: Workload) -> str:
    return structural_hash(build_program(wl))


def test_hash_is_sha256_hex() -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", key(matmul()))


def test_same_workload_built_twice_has_the_same_hash() -> None:
    a, b = build_program(matmul()), build_program(matmul())
    assert a is not b
    assert a == b
    assert structural_hash(a) == structural_hash(b)


def test_hash_is_the_same_in_another_process() -> None:
    code = (
        "from ir.build import build_program\n"
        "from ir.serialize import structural_hash\n"
        "from ir.task import library_task\n"
        "import sys\n"
        "sys.path.insert(0, 'tests/ir')\n"
        "from test_hash import matmul\n"
        "print(structural_hash(build_program(matmul())))\n"
        "print(library_task('softmax', {'m': 3, 'n': 5}).key)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines == [key(matmul()), library_task("softmax", {"m": 3, "n": 5}).key]


def _variants() -> dict[str, Program]:
    base = build_program(matmul())
    loop = base.body
    assert isinstance(loop, For)
    return {
        "shape-m": build_program(matmul(m=9)),
        "shape-k": build_program(matmul(k=5)),
        "dtype-float64": build_program(matmul(dtype="float64")),
        "max-instead-of-sum": build_program(matmul(reducer="max")),
        "output-name": build_program(matmul(out="D")),
        "loop-kind": dataclasses.replace(base, body=dataclasses.replace(loop, kind="parallel")),
        "inner-loop-kind": dataclasses.replace(
            base,
            body=dataclasses.replace(loop, body=dataclasses.replace(loop.body, kind="unrolled")),
        ),
        "loop-annotation": dataclasses.replace(
            base, body=dataclasses.replace(loop, annotations=(("pragma_unroll_max", 16),))
        ),
        "annotation-value": dataclasses.replace(
            base, body=dataclasses.replace(loop, annotations=(("pragma_unroll_max", 64),))
        ),
        "program-attr": dataclasses.replace(base, attrs=(("op", "matmul"),)),
    }


VARIANTS = list(_variants())


@pytest.mark.parametrize("which", VARIANTS)
def test_hash_changes_with(which: str) -> None:
    base = build_program(matmul())
    variant = _variants()[which]
    assert variant != base
    assert structural_hash(variant) != structural_hash(base), which


def test_all_variants_have_distinct_hashes() -> None:
    hashes = [structural_hash(p) for p in _variants().values()]
    hashes.append(key(matmul()))
    assert len(set(hashes)) == len(hashes)


def test_library_key_depends_on_params() -> None:
    a = library_task("dense", {"m": 2, "n": 3, "k": 4, "bias": 0})
    b = library_task("dense", {"m": 2, "n": 3, "k": 4, "bias": 1})
    assert a.key != b.key
    assert a.key == library_task("dense", {"m": "2", "n": "3", "k": "4", "bias": "0"}).key


# ---------------------------------------------------------------------------
# program JSON round trip


@pytest.mark.parametrize("name", list(OPS))
def test_program_json_round_trip_is_exact(name: str) -> None:
    program = library_task(name).program
    text = json.dumps(program_to_json(program), allow_nan=False)
    back = program_from_json(json.loads(text))
    assert isinstance(back, Program)
    assert back == program
    assert structural_hash(back) == structural_hash(program)
    assert json.dumps(program_to_json(back), allow_nan=False) == text


def test_round_trip_keeps_loop_kinds_and_annotations() -> None:
    program = _variants()["loop-annotation"]
    program = dataclasses.replace(program, body=dataclasses.replace(program.body, kind="parallel"))
    back = program_from_json(json.loads(json.dumps(program_to_json(program))))
    assert back == program
    assert back.body.kind == "parallel"
    assert back.body.annotations == (("pragma_unroll_max", 16),)


@pytest.fixture
def program_json() -> dict[str, Any]:
    return json.loads(
        json.dumps(program_to_json(library_task("matmul", {"m": 4, "n": 3, "k": 2}).program))
    )


def _corrupt(data: dict[str, Any], which: str) -> Any:
    d = copy.deepcopy(data)
    loop = d["program"]["body"]
    assert loop["node"] == "For"
    if which == "format":
        d["format"] = "loomtune.program/0"
    elif which == "unknown-node":
        loop["node"] = "Frobnicate"
    elif which == "missing-field":
        del loop["kind"]
    elif which == "extra-field":
        loop["colour"] = "red"
    elif which == "bad-loop-kind":
        loop["kind"] = "sideways"
    elif which == "bad-dtype":
        loop["extent"]["dtype"] = "float17"
    elif which == "bad-float":
        loop["extent"] = {"float": "lots"}
    elif which == "not-a-program":
        d["program"] = loop
    elif which == "no-program":
        del d["program"]
    else:
        raise AssertionError(which)
    return d


CORRUPT = [
    ("format", ["loomtune.program/0", "loomtune.program/1"]),
    ("unknown-node", ["Frobnicate", "$.program.body"]),
    ("missing-field", ["kind", "$.program.body"]),
    ("extra-field", ["colour", "For", "$.program.body"]),
    ("bad-loop-kind", ["sideways"]),
    ("bad-dtype", ["float17", "$.program.body.extent"]),
    ("bad-float", ["lots"]),
    ("not-a-program", ["Program"]),
    ("no-program", ["Program"]),
]


@pytest.mark.parametrize(("which", "needles"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_corrupt_program_json_is_a_definition_error(
    program_json: dict[str, Any], which: str, needles: list[str]
) -> None:
    with pytest.raises(DefinitionError) as info:
        program_from_json(_corrupt(program_json, which))
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)


@pytest.mark.parametrize("data", [None, [], "program", 7], ids=["null", "list", "str", "int"])
def test_program_json_that_is_not_an_object(data: Any) -> None:
    with pytest.raises(DefinitionError, match=re.escape("loomtune.program/1")):
        program_from_json(data)
