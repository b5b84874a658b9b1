"""The JSON definition format of custom workloads ("loomtune.workload/1").

A definition is a data tree, never code. Example (tanh of a matmul):

    {
      "format": "loomtune.workload/1",
      "name": "tanh_matmul",
      "sizes": {"m": 64, "n": 48, "k": 32},
      "inputs": [
        {"name": "A", "shape": ["m", "k"], "dtype": "float32"},
        {"name": "B", "shape": ["k", "n"], "dtype": "float32"}
      ],
      "computes": [
        {"name": "C", "shape": ["m", "n"], "axes": ["i", "j"],
         "reduce": "sum", "reduce_axes": [{"name": "r", "extent": "k"}],
         "body": ["mul", ["load", "A", "i", "r"], ["load", "B", "r", "j"]]},
        {"name": "D", "shape": ["m", "n"], "axes": ["i", "j"],
         "body": ["tanh", ["load", "C", "i", "j"]]}
      ],
      "outputs": ["D"]
    }

Fields:
- `sizes` (optional): named sizes usable in shapes and extents; CLI parameters
  `name=value` override them. A size without a value must be given one.
- `inputs`: placeholders in call order; `dtype` one of ir.dtype.DTYPES (default float32).
- `computes`: in dependency order; `shape` dims are integers, size names or
  expressions; `axes` names the spatial axes (one per dim); an optional `reduce`
  ("sum", "max", "min") reduces `body` over `reduce_axes` (name and extent each).
- `outputs`: names of computes returned, in call order; the other computes are
  intermediates.

Expressions: an integer or float literal (typed like the other operand; a float
alone is float32); a string naming an axis, a reduce axis or a size;
`{"const": value, "dtype": d}`; or a list `[op, args...]` with op one of
add sub mul div floordiv floormod max min lt le gt ge eq ne and or (two args),
exp log sqrt tanh erf (one arg), ["cast", dtype, x], ["select", cond, t, f],
["load", tensor, index...].
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ir import compute as te
from ir import dtype as dt
from ir.errors import DefinitionError, LoomtuneError
from ir.expr import (
    BINARY_OPS,
    MATH_FUNCS,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    Select,
    Var,
    as_expr,
    binary,
    call,
    cast,
    select,
)

FORMAT = "loomtune.workload/1"
Number = int | float


def _fail(where: str, msg: str) -> DefinitionError:
    return DefinitionError(f"{where}: {msg}")


def load_definition_file(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise DefinitionError(f"cannot read workload file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise DefinitionError(f"{path}: not UTF-8 text (byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DefinitionError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise DefinitionError(f"{path}: JSON nested too deeply") from None
    return data


def from_definition(data: Any, sizes: Mapping[str, int] | None = None) -> te.Workload:
    """Build the Workload of a definition, with `sizes` overriding its defaults."""
    if not isinstance(data, dict):
        raise _fail("$", f"a workload definition is a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise _fail("$.format", f"unknown format {data.get('format')!r}, expected {FORMAT!r}")
    known = {"format", "name", "sizes", "inputs", "computes", "outputs", "doc"}
    extra = sorted(set(data) - known)
    if extra:
        raise _fail("$", f"unknown field {extra[0]!r}")
    name = data.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise _fail("$.name", f"must be an identifier, got {name!r}")
    size_values = _sizes(data.get("sizes", {}), sizes or {})
    # A size used in an expression stands for its value.
    scope: dict[str, Any] = {k: Const(v, dt.INDEX) for k, v in size_values.items()}
    tensors: dict[str, te.Tensor] = {}
    inputs = []
    for i, spec in enumerate(_list(data, "inputs", "$")):
        where = f"$.inputs[{i}]"
        tname = _name(spec, where, tensors, scope)
        _no_extra(spec, where, {"name", "shape", "dtype"})
        dtype = spec.get("dtype", "float32")
        if dtype not in dt.DTYPES:
            raise _fail(f"{where}.dtype", f"unknown dtype {dtype!r}")
        shape = _shape(spec, where, scope, size_values)
        tensors[tname] = te.placeholder(shape, dtype, tname)
        inputs.append(tensors[tname])
    for i, spec in enumerate(_list(data, "computes", "$")):
        where = f"$.computes[{i}]"
        tname = _name(spec, where, tensors, scope)
        tensors[tname] = _compute(spec, where, tname, tensors, scope, size_values)
    outputs = []
    for i, out in enumerate(_list(data, "outputs", "$")):
        if not isinstance(out, str) or out not in tensors or tensors[out].op is None:
            raise _fail(f"$.outputs[{i}]", f"{out!r} is not a compute of this workload")
        outputs.append(tensors[out])
    try:
        wl = te.Workload(name, tuple(inputs), tuple(outputs))
    except LoomtuneError as e:
        raise _fail("$", str(e)) from None
    return _bind_workload(wl, size_values)


def _sizes(declared: Any, given: Mapping[str, int]) -> dict[str, int]:
    if not isinstance(declared, dict):
        raise _fail("$.sizes", "must be an object of name: positive integer")
    out: dict[str, int] = {}
    for k, v in declared.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise _fail("$.sizes", f"size name {k!r} is not an identifier")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise _fail(f"$.sizes.{k}", f"must be a positive integer or null, got {v!r}")
        out[k] = v
    for k, v in given.items():
        if k not in out:
            known = ", ".join(sorted(out)) or "none"
            raise DefinitionError(f"unknown parameter {k!r} for this workload (sizes: {known})")
        out[k] = v
    missing = sorted(k for k, v in out.items() if v is None)
    if missing:
        raise DefinitionError(f"size {missing[0]!r} has no value; pass {missing[0]}=N")
    return out


def _no_extra(spec: dict[str, Any], where: str, known: set[str]) -> None:
    extra = sorted(set(spec) - known)
    if extra:
        raise _fail(where, f"unknown field {extra[0]!r}")


def _list(data: dict[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list) or not value:
        raise _fail(f"{where}.{key}", "must be a non-empty list")
    return value


def _name(spec: Any, where: str, tensors: Mapping[str, Any], scope: Mapping[str, Any]) -> str:
    if not isinstance(spec, dict):
        raise _fail(where, "must be an object")
    name = spec.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise _fail(f"{where}.name", f"must be an identifier, got {name!r}")
    if name in tensors or name in scope:
        raise _fail(f"{where}.name", f"{name!r} is already defined")
    return name


def _shape(
    spec: dict[str, Any], where: str, scope: Mapping[str, Any], sizes: Mapping[str, int]
) -> list[int]:
    shape = spec.get("shape")
    if not isinstance(shape, list) or not shape:
        raise _fail(f"{where}.shape", "must be a non-empty list of sizes")
    return [_extent(d, f"{where}.shape[{i}]", scope, sizes) for i, d in enumerate(shape)]


def _extent(d: Any, where: str, scope: Mapping[str, Any], sizes: Mapping[str, int]) -> int:
    """Extents are evaluated to integers: a definition is bound when it is built."""
    e = _expr(d, where, scope, {})
    value = _int_value(e, sizes, where)
    if value <= 0:
        raise _fail(where, f"extent must be positive, got {value}")
    return value


def _int_value(e: Expr, sizes: Mapping[str, int], where: str) -> int:
    if isinstance(e, Const) and dt.is_int(e.dtype):
        return int(e.value)
    if isinstance(e, Var) and e.name in sizes:
        return int(sizes[e.name])
    if isinstance(e, Binary) and e.op in (
        "add",
        "sub",
        "mul",
        "floordiv",
        "floormod",
        "max",
        "min",
    ):
        a, b = _int_value(e.a, sizes, where), _int_value(e.b, sizes, where)
        if e.op in ("floordiv", "floormod") and b == 0:
            raise _fail(where, "division by zero in an extent")
        return {
            "add": a + b,
            "sub": a - b,
            "mul": a * b,
            "floordiv": a // b if b else 0,
            "floormod": a % b if b else 0,
            "max": max(a, b),
            "min": min(a, b),
        }[e.op]
    raise _fail(where, "extent must be an integer expression of sizes")


def _compute(
    spec: dict[str, Any],
    where: str,
    name: str,
    tensors: Mapping[str, te.Tensor],
    scope: Mapping[str, Any],
    sizes: Mapping[str, int],
) -> te.Tensor:
    _no_extra(spec, where, {"name", "shape", "axes", "reduce", "reduce_axes", "body", "dtype"})
    shape = _shape(spec, where, scope, sizes)
    axes = spec.get("axes")
    if (
        not isinstance(axes, list)
        or len(axes) != len(shape)
        or not all(isinstance(a, str) and a.isidentifier() for a in axes)
    ):
        raise _fail(f"{where}.axes", f"must list {len(shape)} axis names, one per dimension")
    if len(set(axes)) != len(axes):
        raise _fail(f"{where}.axes", "axis names must be distinct")
    local: dict[str, Any] = dict(scope)
    raxes: list[IterVar] = []
    reducer = spec.get("reduce")
    if reducer is not None:
        if reducer not in te.REDUCERS:
            raise _fail(
                f"{where}.reduce", f"must be one of {', '.join(te.REDUCERS)}, got {reducer!r}"
            )
        rspecs = spec.get("reduce_axes")
        if not isinstance(rspecs, list) or not rspecs:
            raise _fail(f"{where}.reduce_axes", "a reduction needs at least one reduce axis")
        for j, r in enumerate(rspecs):
            rw = f"{where}.reduce_axes[{j}]"
            if (
                not isinstance(r, dict)
                or not isinstance(r.get("name"), str)
                or not r["name"].isidentifier()
            ):
                raise _fail(rw, "must be an object with a name and an extent")
            _no_extra(r, rw, {"name", "extent"})
            if r["name"] in axes or r["name"] in local:
                raise _fail(f"{rw}.name", f"{r['name']!r} is already defined")
            iv = te.reduce_axis(_extent(r.get("extent"), f"{rw}.extent", scope, sizes), r["name"])
            raxes.append(iv)
            local[r["name"]] = iv.var
    elif "reduce_axes" in spec:
        raise _fail(f"{where}.reduce_axes", "reduce axes need a 'reduce' kind")
    for a in axes:
        if a in local:
            raise _fail(f"{where}.axes", f"{a!r} is already defined")

    def fcompute(*vars_: Var) -> Expr:
        env = dict(local)
        env.update(zip(axes, vars_))
        body = _expr(spec.get("body"), f"{where}.body", env, tensors)
        if reducer is not None:
            return Reduce(reducer, body, tuple(raxes))
        return body

    try:
        out = te.compute(shape, fcompute, name, axis_names=axes)
    except DefinitionError:
        raise
    except LoomtuneError as e:
        raise _fail(where, str(e)) from None
    if "dtype" in spec and spec["dtype"] != out.dtype:
        raise _fail(
            f"{where}.dtype", f"body has dtype {out.dtype}, declared {spec['dtype']!r}; add a cast"
        )
    return out


def _expr(node: Any, where: str, env: Mapping[str, Any], tensors: Mapping[str, te.Tensor]) -> Expr:
    try:
        return _expr_inner(node, where, env, tensors)
    except DefinitionError:
        raise
    except LoomtuneError as e:
        raise _fail(where, str(e)) from None


def _expr_inner(
    node: Any, where: str, env: Mapping[str, Any], tensors: Mapping[str, te.Tensor]
) -> Expr:
    if isinstance(node, bool):
        return Const(node, "bool")
    if isinstance(node, int):
        return Const(node, dt.INDEX)
    if isinstance(node, float):
        if not math.isfinite(node):
            raise _fail(where, "literal must be finite; use {'const': 'inf', 'dtype': ...}")
        return Const(node, "float32")
    if isinstance(node, str):
        if node not in env:
            raise _fail(where, f"unknown name {node!r}")
        return env[node]
    if isinstance(node, dict):
        if set(node) != {"const", "dtype"}:
            raise _fail(where, "a typed constant is {'const': value, 'dtype': dtype}")
        if node["dtype"] not in dt.DTYPES:
            raise _fail(f"{where}.dtype", f"unknown dtype {node['dtype']!r}")
        value = node["const"]
        if isinstance(value, str) and value in ("inf", "-inf", "nan"):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(f"{where}.const", f"must be a number, got {value!r}")
        return Const(value, node["dtype"])
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise _fail(where, f"expected a literal, a name or [op, args...], got {node!r}")
    op, args = node[0], node[1:]

    def arg(i: int) -> Expr | Number:
        a = args[i]
        # Bare literals stay Python numbers so they take the other operand's dtype.
        if isinstance(a, int | float) and not isinstance(a, bool):
            return a
        return _expr_inner(a, f"{where}[{i + 1}]", env, tensors)

    def arity(n: int) -> None:
        if len(args) != n:
            raise _fail(where, f"{op} takes {n} argument(s), got {len(args)}")

    if op in BINARY_OPS:
        arity(2)
        a, b = arg(0), arg(1)
        if not isinstance(a, Expr) and not isinstance(b, Expr):
            a = as_expr(a)
        return binary(op, a, b)
    if op in MATH_FUNCS:
        arity(1)
        return call(op, arg(0))
    if op == "cast":
        arity(2)
        if args[0] not in dt.DTYPES:
            raise _fail(f"{where}[1]", f"unknown dtype {args[0]!r}")
        return cast(args[0], _as(arg(1)))
    if op == "select":
        arity(3)
        cond = _as(arg(0))
        return select(cond, arg(1), arg(2))
    if op == "load":
        if len(args) < 2 or not isinstance(args[0], str):
            raise _fail(where, "load takes a tensor name and one index per dimension")
        t = tensors.get(args[0])
        if t is None:
            raise _fail(f"{where}[1]", f"unknown tensor {args[0]!r} (define it before use)")
        return t[tuple(_as(arg(i)) for i in range(1, len(args)))]
    raise _fail(where, f"unknown operator {op!r}")


def _as(x: Expr | Number) -> Expr:
    return x if isinstance(x, Expr) else as_expr(x)


def _bind_workload(wl: te.Workload, sizes: Mapping[str, int]) -> te.Workload:
    """Size variables only appear in extents, which were evaluated: check none is left."""
    leftover = [v.name for v in wl.size_vars()]
    if leftover:
        raise DefinitionError(f"size {leftover[0]!r} used in an expression; use it only in shapes")
    return wl


# ---------------------------------------------------------------------------
# Workload -> definition (so any workload, library or custom, can be stored)


def to_definition(wl: te.Workload) -> dict[str, Any]:
    inputs = [
        {"name": t.name, "shape": [int(s.value) for s in t.shape], "dtype": t.dtype}
        for t in wl.inputs
    ]  # type: ignore[attr-defined]
    computes = []
    for t in wl.computes():
        assert t.op is not None
        spec: dict[str, Any] = {
            "name": t.name,
            "shape": [int(s.value) for s in t.shape],  # type: ignore[attr-defined]
            "axes": [a.var.name for a in t.op.axes],
        }
        body = t.op.body
        if isinstance(body, Reduce):
            spec["reduce"] = body.combiner
            spec["reduce_axes"] = [
                {"name": a.var.name, "extent": int(a.extent.value)} for a in body.axes
            ]  # type: ignore[attr-defined]
            body = body.source
        spec["body"] = _encode(body)
        computes.append(spec)
    return {
        "format": FORMAT,
        "name": wl.name,
        "inputs": inputs,
        "computes": computes,
        "outputs": [t.name for t in wl.outputs],
    }


def _encode(e: Expr) -> Any:
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        v = e.value
        if e.dtype == dt.INDEX and not isinstance(v, bool):
            return v
        if e.dtype == "float32" and math.isfinite(v):
            return float(v)
        if e.dtype == "bool":
            return bool(v)
        if isinstance(v, float) and not math.isfinite(v):
            v = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return {"const": v, "dtype": e.dtype}
    if isinstance(e, Binary):
        return [e.op, _encode(e.a), _encode(e.b)]
    if isinstance(e, Call):
        return [e.fn, _encode(e.args[0])]
    if isinstance(e, Cast):
        return ["cast", e.dtype, _encode(e.value)]
    if isinstance(e, Select):
        return ["select", _encode(e.cond), _encode(e.true_value), _encode(e.false_value)]
    if isinstance(e, Load):
        return ["load", e.buffer.name, *(_encode(i) for i in e.indices)]
    raise DefinitionError(f"cannot encode {type(e).__name__} in a definition")
