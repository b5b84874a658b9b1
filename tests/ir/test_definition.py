"""The custom workload format "loomtune.workload/1": round trips, overrides and errors.

A corrupt definition is a user error: DefinitionError whose message starts with
the JSON path of the culprit ("$.computes[0].body: ...") so the user can find it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ir import compute as te
from ir.build import build_program
from ir.definition import FORMAT, from_definition, load_definition_file, to_definition
from ir.errors import DefinitionError
from ir.evaluate import evaluate
from ir.library import OPS, make_inputs
from ir.task import library_task

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tanh_matmul.workload.json"


@pytest.fixture
def example() -> dict[str, Any]:
    return load_definition_file(EXAMPLE)


def _json_round_trip(d: dict[str, Any]) -> dict[str, Any]:
    """What a definition looks like after a file or an HTTP body: plain JSON."""
    return json.loads(json.dumps(d, allow_nan=False))


# ---------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("name", list(OPS))
def test_library_op_round_trips_through_a_definition(name: str) -> None:
    wl = library_task(name).workload
    d = _json_round_trip(to_definition(wl))
    assert d["format"] == FORMAT
    assert d["name"] == name
    assert [i["name"] for i in d["inputs"]] == [t.name for t in wl.inputs]
    assert d["outputs"] == [t.name for t in wl.outputs]
    back = from_definition(d)
    assert back == wl
    assert build_program(back) == build_program(wl)
    # And the definition of the rebuilt workload is the same data again.
    assert _json_round_trip(to_definition(back)) == d


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("dense", {"m": 3, "n": 5, "k": 7, "bias": 1, "relu": 1}),
        ("max_pool2d", {"n": 1, "h": 5, "w": 5, "c": 2, "kh": 3, "kw": 3, "stride": 2, "pad": 1}),
        ("avg_pool2d", {"n": 1, "h": 5, "w": 5, "c": 2, "kh": 3, "kw": 3, "stride": 2, "pad": 1}),
        (
            "conv2d_nchw",
            {
                "n": 1,
                "h": 5,
                "w": 5,
                "ci": 2,
                "co": 3,
                "kh": 3,
                "kw": 3,
                "stride": 2,
                "pad": 2,
                "dilation": 2,
            },
        ),
    ],
)
def test_non_default_variants_round_trip(name: str, params: dict[str, int]) -> None:
    wl = library_task(name, params).workload
    assert from_definition(_json_round_trip(to_definition(wl))) == wl


def test_example_file_round_trips(example: dict[str, Any]) -> None:
    wl = from_definition(example)
    assert wl.name == "tanh_matmul"
    assert [t.name for t in wl.inputs] == ["A", "B"]
    assert [t.name for t in wl.outputs] == ["D"]
    assert [t.name for t in wl.computes()] == ["C", "D"]
    assert wl.inputs[0].concrete_shape() == (64, 32)
    assert wl.inputs[1].concrete_shape() == (32, 48)
    assert wl.outputs[0].concrete_shape() == (64, 48)
    assert wl.outputs[0].dtype == "float32"
    back = from_definition(_json_round_trip(to_definition(wl)))
    assert back == wl
    assert build_program(back) == build_program(wl)


def test_given_sizes_override_the_file(example: dict[str, Any]) -> None:
    wl = from_definition(example, {"m": 5, "k": 3})
    assert wl.inputs[0].concrete_shape() == (5, 3)
    assert wl.inputs[1].concrete_shape() == (3, 48)
    assert wl.outputs[0].concrete_shape() == (5, 48)
    c = wl.computes()[0]
    assert c.op is not None
    (raxis,) = c.op.body.axes
    assert int(raxis.extent.value) == 3
    # The definition itself is not modified.
    assert example["sizes"] == {"m": 64, "n": 48, "k": 32}


def test_a_size_without_value_can_be_given(example: dict[str, Any]) -> None:
    example["sizes"]["n"] = None
    wl = from_definition(example, {"n": 7})
    assert wl.outputs[0].concrete_shape() == (64, 7)


def test_unknown_given_size_is_refused(example: dict[str, Any]) -> None:
    with pytest.raises(DefinitionError, match="'q'"):
        from_definition(example, {"q": 3})


def test_evaluator_matches_numpy_on_the_example(example: dict[str, Any]) -> None:
    wl = from_definition(example, {"m": 9, "n": 7, "k": 5})
    a, b = make_inputs(wl, seed=3)
    assert a.shape == (9, 5) and b.shape == (5, 7)
    (d,) = evaluate(wl, [a, b])
    expected = np.tanh(a.astype(np.float64) @ b.astype(np.float64))
    assert d.shape == (9, 7)
    assert d.dtype == np.float32
    np.testing.assert_allclose(d, expected, rtol=0, atol=1e-5)
    assert np.abs(d).max() > 0.1  # not trivially all zeros


def test_a_size_used_in_an_expression_is_its_value_or_a_clear_error(
    example: dict[str, Any],
) -> None:
    """The format documents a size name as an expression; it must mean its value.

    D = tanh(C) + k with k = 3: either the size is substituted (the evaluator then
    agrees with numpy), or the definition is refused with the JSON path — never a
    workload with a free variable that fails later in code generation.
    """
    example["sizes"] = {"m": 4, "n": 5, "k": 3}
    example["computes"][1]["body"] = [
        "add",
        ["tanh", ["load", "C", "i", "j"]],
        ["cast", "float32", "k"],
    ]
    try:
        wl = from_definition(example)
    except DefinitionError as e:
        assert str(e).startswith("$.computes[1].body"), str(e)
        return
    assert wl.size_vars() == []
    a, b = make_inputs(wl, seed=0)
    (d,) = evaluate(wl, [a, b])
    np.testing.assert_allclose(d, np.tanh(a @ b) + 3.0, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------
# corrupt definitions

Edit = Callable[[dict[str, Any]], Any]


def _set(path: list[Any], value: Any) -> Edit:
    def edit(d: dict[str, Any]) -> None:
        node = d
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value

    return edit


def _drop(path: list[Any]) -> Edit:
    def edit(d: dict[str, Any]) -> None:
        node = d
        for p in path[:-1]:
            node = node[p]
        del node[path[-1]]

    return edit


CORRUPT: list[tuple[str, Edit, str, str]] = [
    # id, edit, the JSON path the message starts with, a word naming the culprit
    ("unknown-format", _set(["format"], "loomtune.workload/9"), "$.format", "loomtune.workload/9"),
    ("no-format", _drop(["format"]), "$.format", "format"),
    ("unknown-field", _set(["colour"], "red"), "$", "'colour'"),
    ("unknown-compute-field", _set(["computes", 0, "colour"], "red"), "$.computes[0]", "'colour'"),
    ("unknown-input-field", _set(["inputs", 0, "dtpye"], "float64"), "$.inputs[0]", "'dtpye'"),
    (
        "unknown-reduce-axis-field",
        _set(["computes", 0, "reduce_axes", 0, "colour"], "red"),
        "$.computes[0].reduce_axes[0]",
        "'colour'",
    ),
    ("missing-inputs", _drop(["inputs"]), "$.inputs", "non-empty list"),
    ("empty-inputs", _set(["inputs"], []), "$.inputs", "non-empty list"),
    ("missing-computes", _drop(["computes"]), "$.computes", "non-empty list"),
    ("bad-name", _set(["name"], "tanh matmul"), "$.name", "identifier"),
    ("bad-dtype", _set(["inputs", 1, "dtype"], "float16"), "$.inputs[1].dtype", "'float16'"),
    ("zero-shape", _set(["inputs", 0, "shape"], [0, "k"]), "$.inputs[0].shape[0]", "0"),
    ("negative-shape", _set(["inputs", 0, "shape"], ["m", -4]), "$.inputs[0].shape[1]", "-4"),
    ("negative-size", _set(["sizes", "m"], -1), "$.sizes.m", "-1"),
    ("float-shape", _set(["inputs", 0, "shape"], [2.5, "k"]), "$.inputs[0].shape[0]", "integer"),
    (
        "unknown-shape-name",
        _set(["inputs", 0, "shape"], ["m", "kk"]),
        "$.inputs[0].shape[1]",
        "'kk'",
    ),
    ("duplicate-tensor", _set(["computes", 1, "name"], "A"), "$.computes[1].name", "'A'"),
    ("axes-count", _set(["computes", 1, "axes"], ["i"]), "$.computes[1].axes", "2"),
    (
        "unknown-reducer",
        _set(["computes", 0, "reduce"], "product"),
        "$.computes[0].reduce",
        "'product'",
    ),
    (
        "unknown-name",
        _set(["computes", 1, "body"], ["tanh", ["load", "C", "i", "q"]]),
        "$.computes[1].body",
        "'q'",
    ),
    (
        "unknown-operator",
        _set(["computes", 0, "body"], ["fma", ["load", "A", "i", "r"], ["load", "B", "r", "j"]]),
        "$.computes[0].body",
        "'fma'",
    ),
    (
        "wrong-arity",
        _set(["computes", 1, "body"], ["tanh", ["load", "C", "i", "j"], 1.0]),
        "$.computes[1].body",
        "tanh",
    ),
    (
        "wrong-index-count",
        _set(["computes", 1, "body"], ["tanh", ["load", "C", "i"]]),
        "$.computes[1].body",
        "C",
    ),
    (
        "undefined-tensor",
        _set(["computes", 1, "body"], ["tanh", ["load", "Z", "i", "j"]]),
        "$.computes[1].body",
        "'Z'",
    ),
    (
        "load-before-definition",
        _set(["computes", 0, "body"], ["mul", ["load", "D", "i", "r"], ["load", "B", "r", "j"]]),
        "$.computes[0].body",
        "'D'",
    ),
    (
        "mixed-dtypes",
        _set(
            ["computes", 1, "body"],
            ["add", ["load", "C", "i", "j"], {"const": 1, "dtype": "float64"}],
        ),
        "$.computes[1].body",
        "float64",
    ),
    ("output-is-input", _set(["outputs"], ["A"]), "$.outputs[0]", "'A'"),
    ("output-unknown", _set(["outputs"], ["E"]), "$.outputs[0]", "'E'"),
    ("output-not-a-name", _set(["outputs"], [["D"]]), "$.outputs[0]", "D"),
]


@pytest.mark.parametrize(
    ("edit", "path", "culprit"), [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT]
)
def test_corrupt_definition_names_the_json_path(
    example: dict[str, Any], edit: Edit, path: str, culprit: str
) -> None:
    edit(example)
    with pytest.raises(DefinitionError) as info:
        from_definition(example)
    msg = str(info.value)
    # The culprit's path, or a path below it ("$.computes[1].body[1][3]: ...").
    assert msg.startswith(path), msg
    assert msg[len(path)] in ":.[", msg
    assert culprit in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    "data", [[1, 2], "tanh_matmul", 3, None], ids=["list", "str", "int", "null"]
)
def test_definition_that_is_not_an_object(data: Any) -> None:
    with pytest.raises(DefinitionError, match=r"^\$: .*JSON object"):
        from_definition(data)


def test_a_size_without_a_value_is_named(example: dict[str, Any]) -> None:
    example["sizes"]["k"] = None
    with pytest.raises(DefinitionError) as info:
        from_definition(example)
    msg = str(info.value)
    assert "'k'" in msg
    assert "k=" in msg  # says how to give it one


def test_the_example_is_not_modified_by_a_failed_parse(example: dict[str, Any]) -> None:
    before = copy.deepcopy(example)
    example_bad = copy.deepcopy(example)
    example_bad["computes"][1]["body"] = ["nope"]
    with pytest.raises(DefinitionError):
        from_definition(example_bad)
    assert example == before


# ---------------------------------------------------------------------------
# reading files


def test_load_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(DefinitionError, match=r"nope\.json"):
        load_definition_file(missing)


def test_load_corrupt_json_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "corrupt.json"
    f.write_text('{"format":')
    with pytest.raises(DefinitionError, match=r"corrupt\.json"):
        load_definition_file(f)


def test_load_non_utf8_file_is_a_definition_error(tmp_path: Path) -> None:
    f = tmp_path / "latin1.json"
    f.write_bytes(b'{"format": "loomtune.workload/1", "name": "caf\xe9"}')
    with pytest.raises(DefinitionError, match=r"latin1\.json"):
        load_definition_file(f)


def test_load_absurdly_nested_json_is_a_definition_error(tmp_path: Path) -> None:
    f = tmp_path / "deep.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DefinitionError, match=r"deep\.json"):
        load_definition_file(f)


def test_symbolic_dsl_workload_has_its_size_vars() -> None:
    """Sanity of the DSL the definition format builds on (sizes as symbols)."""
    n = te.size_var("n")
    A = te.placeholder((n, 4), "float32", "A")
    B = te.compute((n, 4), lambda i, j: A[i, j] * 2.0, "B")
    wl = te.Workload("twice", (A,), (B,))
    assert [v.name for v in wl.size_vars()] == ["n"]
