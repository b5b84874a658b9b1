"""Scalar expressions shared by the compute DSL, the loop-nest IR and lowering.

Expressions are immutable; `==` is structural equality (so comparisons that build
IR are spelled `eq(a, b)` / `ne(a, b)`, while `<`, `<=`, `>`, `>=` build nodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from ir import dtype as dt
from ir.errors import IRError
from ir.node import Node

ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "max", "min")
CMP_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGIC_OPS = ("and", "or")
BINARY_OPS = ARITH_OPS + CMP_OPS + LOGIC_OPS
MATH_FUNCS = ("exp", "log", "sqrt", "tanh", "erf", "rint")
ITER_KINDS = ("spatial", "reduce")

ExprLike = Union["Expr", int, float, bool]


class Expr(Node):
    """Base of scalar expressions, with Python operators that build IR."""

    __slots__ = ()
    # Every subclass provides `dtype: str`, as a field or a property (not declared
    # here: dataclasses would take a base-class property for a field default).
    dtype: str

    def __add__(self, other: ExprLike) -> Expr:
        return binary("add", self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        return binary("add", other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        return binary("sub", self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return binary("sub", other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        return binary("mul", self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return binary("mul", other, self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return binary("div", self, other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return binary("div", other, self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return binary("floordiv", other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return binary("floormod", self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return binary("floormod", other, self)

    def __neg__(self) -> Expr:
        return binary("sub", Const(0, self.dtype), self)

    def __lt__(self, other: ExprLike) -> Expr:
        return binary("lt", self, other)

    def __le__(self, other: ExprLike) -> Expr:
        return binary("le", self, other)

    def __gt__(self, other: ExprLike) -> Expr:
        return binary("gt", self, other)

    def __ge__(self, other: ExprLike) -> Expr:
        return binary("ge", self, other)

    def __and__(self, other: ExprLike) -> Expr:
        return binary("and", self, other)

    def __or__(self, other: ExprLike) -> Expr:
        return binary("or", self, other)

    def __bool__(self) -> bool:
        raise IRError("an IR expression has no truth value; use select() or eq()/ne()")


@dataclass(frozen=True, slots=True, eq=True)
class Var(Expr):
    """A named integer variable: a loop, an iteration variable or a symbolic size."""

    name: str
    dtype: str = dt.INDEX

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True, eq=True)
class Const(Expr):
    value: int | float | bool
    dtype: str

    def __post_init__(self) -> None:
        dt.check_dtype(self.dtype)
        if self.dtype == dt.BFLOAT16:
            object.__setattr__(self, "value", dt.round_bfloat16(self.value))
        elif dt.is_float(self.dtype):
            object.__setattr__(self, "value", float(self.value))
        elif self.dtype == "bool":
            object.__setattr__(self, "value", bool(self.value))
        else:
            if isinstance(self.value, float) and not self.value.is_integer():
                raise IRError(f"constant {self.value!r} is not an integer of {self.dtype}")
            object.__setattr__(self, "value", int(self.value))

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True, eq=True)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:
        return "bool" if self.op in CMP_OPS else self.a.dtype


@dataclass(frozen=True, slots=True, eq=True)
class Call(Expr):
    """A math function (exp, log, sqrt, tanh, erf, rint) of floating-point arguments.

    rint rounds to the nearest integer, ties to even (numpy's np.rint), whatever
    the CPU's rounding mode."""

    fn: str
    args: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.args[0].dtype


@dataclass(frozen=True, slots=True, eq=True)
class Cast(Expr):
    dtype: str
    value: Expr


@dataclass(frozen=True, slots=True, eq=True)
class Select(Expr):
    """`cond ? true_value : false_value`; only the chosen side is evaluated."""

    cond: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> str:
        return self.true_value.dtype


@dataclass(frozen=True, slots=True, eq=True)
class Buffer(Node):
    """A named n-dimensional array; `scope` is "global" (memory) or "local" (a scratch tile)."""

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    scope: str = "global"

    def __getitem__(self, indices: ExprLike | tuple[ExprLike, ...]) -> Load:
        idx = indices if isinstance(indices, tuple) else (indices,)
        if len(idx) != len(self.shape):
            raise IRError(
                f"buffer {self.name} has {len(self.shape)} dimensions, indexed with {len(idx)}"
            )
        return Load(self, tuple(as_index(i) for i in idx))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def concrete_shape(self) -> tuple[int, ...]:
        out = []
        for s in self.shape:
            if not isinstance(s, Const):
                from ir.errors import UnboundShapeError

                raise UnboundShapeError(
                    f"buffer {self.name} has symbolic dimension {render(s)}; bind it to an integer"
                )
            out.append(int(s.value))
        return tuple(out)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True, eq=True)
class Load(Expr):
    buffer: Buffer
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


@dataclass(frozen=True, slots=True, eq=True)
class IterVar(Node):
    """An iteration variable over [0, extent): spatial, or a reduction axis."""

    var: Var
    extent: Expr
    kind: str = "spatial"

    def __post_init__(self) -> None:
        if self.kind not in ITER_KINDS:
            raise IRError(f"iter var {self.var.name}: unknown kind {self.kind!r}")


@dataclass(frozen=True, slots=True, eq=True)
class Reduce(Expr):
    """A reduction (sum/max/min) of `source` over `axes`; only at the top of a compute body."""

    combiner: str
    source: Expr
    axes: tuple[IterVar, ...]

    def __post_init__(self) -> None:
        _no_bfloat16(f"{self.combiner}()", self.source)

    @property
    def dtype(self) -> str:
        return self.source.dtype


def _delegate(name: str):
    def method(self: IterVar, *args: ExprLike) -> Expr:
        return getattr(self.var, name)(*args)

    method.__name__ = name
    return method


# Reduction axes take part in index arithmetic like the variable they stand for.
for _name in (
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
):
    setattr(IterVar, _name, _delegate(_name))


# ---------------------------------------------------------------------------
# Constructors with type checking


def const(value: int | float | bool, dtype: str) -> Const:
    return Const(value, dtype)


def as_expr(value: ExprLike, like: str | None = None) -> Expr:
    """Wrap a Python scalar as a constant of dtype `like` (or a natural default)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, bool):
        return Const(value, "bool")
    if isinstance(value, int):
        return Const(value, like if like is not None and like != "bool" else dt.INDEX)
    if isinstance(value, float):
        if like is not None and not dt.is_float(like):
            if value.is_integer():
                return Const(int(value), like)
            raise IRError(f"float constant {value} used with {like} operand; cast explicitly")
        return Const(value, like or "float32")
    raise IRError(f"cannot use {type(value).__name__} {value!r} in an expression")


def as_index(value: ExprLike) -> Expr:
    e = as_expr(value, dt.INDEX)
    if not dt.is_int(e.dtype):
        raise IRError(f"index {render(e)} has dtype {e.dtype}, expected an integer")
    return e


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    if op not in BINARY_OPS:
        raise IRError(f"unknown binary operator {op!r}")
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise IRError(f"{op} needs at least one IR expression operand")
    ea = as_expr(a, b.dtype if isinstance(b, Expr) else None)
    eb = as_expr(b, ea.dtype)
    if ea.dtype != eb.dtype:
        raise IRError(
            f"operands of {op} have different dtypes ({ea.dtype} and {eb.dtype}); cast one"
        )
    _no_bfloat16(op, ea)
    if op in LOGIC_OPS and ea.dtype != "bool":
        raise IRError(f"{op} needs boolean operands, got {ea.dtype}")
    if op == "div" and not dt.is_float(ea.dtype):
        raise IRError("'/' needs floating-point operands; use '//' for integer division")
    if op in ("floordiv", "floormod") and not dt.is_int(ea.dtype):
        raise IRError(f"{op} needs integer operands, got {ea.dtype}")
    return Binary(op, ea, eb)


def eq(a: ExprLike, b: ExprLike) -> Expr:
    return binary("eq", a, b)


def ne(a: ExprLike, b: ExprLike) -> Expr:
    return binary("ne", a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("max", a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("min", a, b)


def logical_and(*terms: Expr) -> Expr:
    out = terms[0]
    for t in terms[1:]:
        out = binary("and", out, t)
    return out


def call(fn: str, x: ExprLike) -> Expr:
    if fn not in MATH_FUNCS:
        raise IRError(f"unknown math function {fn!r}; expected one of {', '.join(MATH_FUNCS)}")
    e = as_expr(x)
    if not dt.is_float(e.dtype):
        raise IRError(f"{fn} needs a floating-point argument, got {e.dtype}; cast it first")
    _no_bfloat16(fn, e)
    return Call(fn, (e,))


def exp(x: ExprLike) -> Expr:
    return call("exp", x)


def log(x: ExprLike) -> Expr:
    return call("log", x)


def sqrt(x: ExprLike) -> Expr:
    return call("sqrt", x)


def tanh(x: ExprLike) -> Expr:
    return call("tanh", x)


def erf(x: ExprLike) -> Expr:
    """The error function (GELU's exact form is 0.5·x·(1 + erf(x/√2)))."""
    return call("erf", x)


def rint(x: ExprLike) -> Expr:
    """The nearest integer, ties to even (numpy's np.rint), as a float of x's dtype."""
    return call("rint", x)


def cast(to: str, x: ExprLike) -> Expr:
    dt.check_dtype(to)
    e = as_expr(x)
    if e.dtype == to:
        return e
    if dt.BFLOAT16 in (to, e.dtype) and "float32" not in (to, e.dtype):
        # One rounding, the one ml_dtypes does: float64 -> float32 -> bfloat16 would round twice.
        raise IRError(
            f"cast from {e.dtype} to {to}: bfloat16 converts to and from float32 only; "
            "cast through float32"
        )
    return Cast(to, e)


def _no_bfloat16(what: str, operand: Expr) -> None:
    """bfloat16 is a storage type: arithmetic on it would round after every operation."""
    if operand.dtype == dt.BFLOAT16:
        raise IRError(
            f"{what} on bfloat16 {render(operand)}: bfloat16 is for storage; "
            "compute in float32 (cast('float32', x)) and cast the result back"
        )


def select(cond: Expr, true_value: ExprLike, false_value: ExprLike) -> Expr:
    if cond.dtype != "bool":
        raise IRError(f"select condition must be bool, got {cond.dtype}")
    t = as_expr(true_value, false_value.dtype if isinstance(false_value, Expr) else None)
    f = as_expr(false_value, t.dtype)
    if t.dtype != f.dtype:
        raise IRError(f"select branches have different dtypes ({t.dtype} and {f.dtype})")
    return Select(cond, t, f)


def index_const(value: int) -> Const:
    return Const(value, dt.INDEX)


# ---------------------------------------------------------------------------
# Rendering (shared by the printer and error messages)

_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "floormod": "%",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
    "and": "and",
    "or": "or",
}


_PREC = {
    "or": 1,
    "and": 2,
    **dict.fromkeys(CMP_OPS, 3),
    "add": 4,
    "sub": 4,
    "mul": 5,
    "div": 5,
    "floordiv": 5,
    "floormod": 5,
}


def render(e: Node) -> str:
    """Readable Python-like text of an expression."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if dt.is_float(e.dtype):
            v = float(e.value)
            text = repr(v) if math.isfinite(v) else f"float({str(v)!r})"
            return text if e.dtype == "float32" else f"{e.dtype}({text})"
        if e.dtype == dt.INDEX:
            return str(e.value)
        return f"{e.dtype}({e.value})"
    if isinstance(e, Binary):
        if e.op in ("max", "min"):
            return f"{e.op}({render(e.a)}, {render(e.b)})"
        prec = _PREC[e.op]
        left = render(e.a)
        right = render(e.b)
        if isinstance(e.a, Binary) and _PREC.get(e.a.op, 9) < prec:
            left = f"({left})"
        if isinstance(e.b, Binary) and _PREC.get(e.b.op, 9) <= prec:
            right = f"({right})"
        return f"{left} {_INFIX[e.op]} {right}"
    if isinstance(e, Call):
        return f"{e.fn}({', '.join(render(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({render(e.value)})"
    if isinstance(e, Select):
        return f"select({render(e.cond)}, {render(e.true_value)}, {render(e.false_value)})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(render(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        axes = ", ".join(a.var.name for a in e.axes)
        return f"{e.combiner}({render(e.source)}, axis=[{axes}])"
    if isinstance(e, Buffer):
        return e.name
    return repr(e)
