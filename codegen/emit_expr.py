"""Expressions of a lowered program -> LLVM values: the expression half of the emitter.

Scalar or `<W x T>` vector values (inside a vectorized loop, a value that varies
across lanes is a vector, an invariant one a scalar widened where it meets a
vector); loads are contiguous vector loads at unit stride, gathers otherwise;
integer arithmetic on constants is folded here (unrolled loops bind their
variables to constants). The statement half is :class:`codegen.emit.FunctionEmitter`;
what both halves share (LLVM types, Scope, VectorLane, ModuleEmitter) lives here,
so the emitter's modules import one way: emit -> mathfn -> emit_expr.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from llvmlite import ir as ll

from codegen.vector import VectorPlan, plan_vector_loop, vector_cap
from ir import dtype as dt
from ir.arith import linear_in
from ir.errors import IRError, UnboundShapeError
from ir.expr import Binary, Buffer, Call, Cast, Const, Expr, Load, Select, Var, render
from ir.node import walk
from ir.program import For

T = TypeVar("T")

I1 = ll.IntType(1)
I8 = ll.IntType(8)
I32 = ll.IntType(32)
I16 = ll.IntType(16)
I64 = ll.IntType(64)
PTR = ll.PointerType()
FAST = ("reassoc", "contract", "nsz")
DIV_FAST = (*FAST, "arcp")
"""A division may become a multiplication by the reciprocal: LICM then hoists 1/y out of a
loop whose divisor is invariant, and a vector multiply costs a fraction of a vector divide."""

_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


BFLOAT16_BITS = I16
"""How bfloat16 values travel in the emitted IR: as their 16 bits. IR bfloat16 is a storage
type (loads, stores, selects, casts to and from float32 in integer instructions), and
LLVM's `bfloat` vectors of odd widths, which its vectorizers make of padding copies,
reach instruction selection illegal on CPUs with AVX512-FP16 (an assertion in
LegalizeDAG); `bfloat` appears only at an intrinsic that wants it (`intrinsics.py`)."""


def llvm_type(dtype: str, lanes: int = 1) -> ll.Type:
    if dtype == "float32":
        t: ll.Type = ll.FloatType()
    elif dtype == "float64":
        t = ll.DoubleType()
    elif dtype == dt.BFLOAT16:
        t = BFLOAT16_BITS
    elif dtype == "bool":
        t = I1
    else:
        t = ll.IntType(dt.bits(dtype))
    return ll.VectorType(t, lanes) if lanes > 1 else t


def memory_type(dtype: str, lanes: int = 1) -> ll.Type:
    """How a value is stored in memory (bool as one byte)."""
    if dtype == "bool":
        return ll.VectorType(I8, lanes) if lanes > 1 else I8
    return llvm_type(dtype, lanes)


@dataclass
class Scope:
    """What the code being emitted can see: loop variables and buffer pointers."""

    vars: dict[Var, ll.Value] = field(default_factory=dict)
    buffers: dict[str, ll.Value] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorLane:
    """In a vectorized loop: `var` takes lanes base, base+1, ..., base+lanes-1."""

    var: Var
    lanes: int


class ModuleEmitter:
    """One LLVM module: the exported kernel function plus outlined parallel bodies."""

    def __init__(self, symbol: str, *, num_threads: int = 1, vector_bits: int = 256) -> None:
        self.symbol = symbol
        self.module = ll.Module(name=symbol)
        self.num_threads = num_threads
        self.vector_bits = vector_bits
        self._outlined = 0
        self._memo: dict[tuple[object, ...], tuple[object, object]] = {}

    def start_kernel(self, symbol: str) -> None:
        """Emit the next kernel function under `symbol` (another variant in this module);
        the memo starts empty, as its keys are node identities of one program."""
        self.symbol = symbol
        self._memo = {}

    def memo(self, key: tuple[object, ...], compute: Callable[[], T]) -> T:
        """`compute()` once per key's node *objects*: an unrolled loop emits its body once per
        iteration, the same nodes each time, and their analyses (vector legality, affine
        forms) were most of the emitter's time. Keyed by identity, the nodes kept alive."""
        ident = tuple(id(x) for x in key)
        hit = self._memo.get(ident)
        if hit is None:
            hit = (key, compute())
            self._memo[ident] = hit
        return hit[1]  # type: ignore[return-value]

    def vector_plan(self, loop: For) -> VectorPlan | None:
        return self.memo(
            ("vector", loop),
            lambda: plan_vector_loop(loop, self.register_lanes, vector_cap(self.vector_bits)),
        )

    def declare(self, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing  # type: ignore[return-value]
        return ll.Function(self.module, ll.FunctionType(ret, args), name=name)

    def fresh_function_name(self, base: str) -> str:
        self._outlined += 1
        return f"{self.symbol}.{base}{self._outlined}"

    @property
    def register_lanes(self) -> int:
        """32-bit lanes of one vector register."""
        return max(1, self.vector_bits // 32)


class ExpressionEmitter:
    """Emits expressions into the function a FunctionEmitter builds (its base class)."""

    m: ModuleEmitter
    fn: ll.Function
    scope: Scope
    builder: ll.IRBuilder
    vec: VectorLane | None

    def math_call(self, fn: str, dtype: str, v: ll.Value) -> ll.Value:
        """exp, log, sqrt or tanh of `v`; FunctionEmitter emits them (codegen/mathfn.py)."""
        raise NotImplementedError

    def gep(self, buf: Buffer, index: ll.Value) -> ll.Value:
        """The address of element `index` of `buf` (in bounds, on its opaque pointer)."""
        if buf.name not in self.scope.buffers:
            raise IRError(
                f"codegen: buffer {buf.name} is not a parameter or an allocation in scope"
            )
        return self.builder.gep(
            self.scope.buffers[buf.name],
            [index],
            inbounds=True,
            source_etype=memory_type(buf.dtype),
        )

    def affine(self, index: Expr, var: Var) -> tuple[int | None, Expr]:
        """index = stride * var + rest with rest free of var; stride None when not affine."""
        return self.m.memo(("linear", index, var), lambda: linear_in(index, var))

    def vector_base(self, rest: Expr) -> ll.Value:
        """The scalar address of lane 0 for a unit-stride access: rest + var's chunk base."""
        assert self.vec is not None
        saved, self.vec = self.vec, None
        try:
            base = self.expr(rest)
        finally:
            self.vec = saved
        chunk = self.scope.vars[saved.var]
        folded = _fold_int("add", base, chunk, dt.INDEX)
        return folded if folded is not None else self.builder.add(base, chunk)

    def widen(self, v: ll.Value, lanes: int) -> ll.Value:
        """Broadcast a scalar to a vector (vectors pass through)."""
        if isinstance(v.type, ll.VectorType):
            return v
        vt = ll.VectorType(v.type, lanes)
        if _is_constant(v):
            return ll.Constant(vt, [v.constant] * lanes)
        b = self.builder
        one = b.insert_element(ll.Constant(vt, ll.Undefined), v, ll.Constant(I32, 0))
        return b.shuffle_vector(
            one, ll.Constant(vt, ll.Undefined), ll.Constant(ll.VectorType(I32, lanes), [0] * lanes)
        )

    def _lanes_of(self, *values: ll.Value) -> int:
        for v in values:
            if isinstance(v.type, ll.VectorType):
                return v.type.count
        return 1

    def expr(self, e: Expr) -> ll.Value:
        b = self.builder
        if isinstance(e, Const):
            if e.dtype == "bool":
                return ll.Constant(I1, int(bool(e.value)))
            if e.dtype == dt.BFLOAT16:
                return ll.Constant(BFLOAT16_BITS, dt.bfloat16_bits(float(e.value)))
            return ll.Constant(llvm_type(e.dtype), e.value)
        if isinstance(e, Var):
            if e not in self.scope.vars:
                raise UnboundShapeError(
                    f"variable {e.name} is not bound: a symbolic size left unbound, "
                    "or a loop variable used outside its loop"
                )
            base = self.scope.vars[e]
            if self.vec is not None and e == self.vec.var:
                lanes = self.vec.lanes
                step = ll.Constant(ll.VectorType(I64, lanes), list(range(lanes)))
                return b.add(self.widen(base, lanes), step)
            return base
        if isinstance(e, Load):
            return self._load(e)
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Call):
            arg = self.expr(e.args[0])
            return self.math_call(e.fn, e.dtype, arg)
        if isinstance(e, Cast):
            return self._cast(self.expr(e.value), e.value.dtype, e.dtype)
        if isinstance(e, Select):
            return self._select(e)
        raise IRError(f"codegen: cannot compile {type(e).__name__} {render(e)}")

    def _load(self, e: Load) -> ll.Value:
        b = self.builder
        buf = e.buffer
        vec = self.vec
        if vec is not None:
            stride, rest = self.affine(e.indices[0], vec.var)
            if stride == 1:
                ptr = self.gep(buf, self.vector_base(rest))
                v = b.load(ptr, typ=memory_type(buf.dtype, vec.lanes), align=dt.itemsize(buf.dtype))
                return b.trunc(v, llvm_type("bool", vec.lanes)) if buf.dtype == "bool" else v
            if stride != 0:
                # Non-unit stride or non-affine: a gather, one lane at a time.
                idx = self.widen(self.expr(e.indices[0]), vec.lanes)
                out: ll.Value = ll.Constant(llvm_type(buf.dtype, vec.lanes), ll.Undefined)
                for lane in range(vec.lanes):
                    li = ll.Constant(I32, lane)
                    out = b.insert_element(
                        out, self._scalar_load(buf, b.extract_element(idx, li)), li
                    )
                return out
        return self._scalar_load(buf, self.expr(e.indices[0]))

    def _scalar_load(self, buf: Buffer, index: ll.Value) -> ll.Value:
        v = self.builder.load(
            self.gep(buf, index), typ=memory_type(buf.dtype), align=dt.itemsize(buf.dtype)
        )
        return self.builder.trunc(v, I1) if buf.dtype == "bool" else v

    def _select(self, e: Select) -> ll.Value:
        b = self.builder
        cond = self.expr(e.cond)
        loads = any(isinstance(n, Load) for n in walk(e.true_value)) or any(
            isinstance(n, Load) for n in walk(e.false_value)
        )
        if not loads or isinstance(cond.type, ll.VectorType):
            # No memory access to guard, or lanes disagree (the vector plan only
            # allows this when the guarded loads are in bounds for every lane).
            t, f = self.expr(e.true_value), self.expr(e.false_value)
            lanes = self._lanes_of(cond, t, f)
            if lanes > 1:
                cond, t, f = self.widen(cond, lanes), self.widen(t, lanes), self.widen(f, lanes)
            return b.select(cond, t, f)
        # Evaluate only the chosen side: a guarded load may be out of bounds otherwise.
        lanes = self.vec.lanes if self.vec is not None and self._varies(e) else 1
        then_bb = self.fn.append_basic_block("sel.then")
        else_bb = self.fn.append_basic_block("sel.else")
        join = self.fn.append_basic_block("sel.join")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv = self.expr(e.true_value)
        tv = self.widen(tv, lanes) if lanes > 1 else tv
        then_end = b.block
        b.branch(join)
        b.position_at_end(else_bb)
        fv = self.expr(e.false_value)
        fv = self.widen(fv, lanes) if lanes > 1 else fv
        else_end = b.block
        b.branch(join)
        b.position_at_end(join)
        phi = b.phi(tv.type)
        phi.add_incoming(tv, then_end)
        phi.add_incoming(fv, else_end)
        return phi

    def _varies(self, e: Expr) -> bool:
        """Whether `e` may differ across the lanes of the current vector loop."""
        return self.vec is not None and any(
            n == self.vec.var for n in walk(e) if isinstance(n, Var)
        )

    def _binary(self, e: Binary) -> ll.Value:
        b = self.builder
        a, c = self.expr(e.a), self.expr(e.b)
        lanes = self._lanes_of(a, c)
        if lanes > 1:
            a, c = self.widen(a, lanes), self.widen(c, lanes)
        t = e.a.dtype
        op = e.op
        if op == "and":
            return b.and_(a, c)
        if op == "or":
            return b.or_(a, c)
        if dt.is_float(t):
            if op in _CMP:
                return (
                    b.fcmp_ordered(_CMP[op], a, c) if op != "ne" else b.fcmp_unordered("!=", a, c)
                )
            if op == "add":
                return b.fadd(a, c, flags=FAST)
            if op == "sub":
                return b.fsub(a, c, flags=FAST)
            if op == "mul":
                return b.fmul(a, c, flags=FAST)
            if op == "div":
                return b.fdiv(a, c, flags=DIV_FAST)
            if op in ("max", "min"):
                # llvm.maximum/minimum propagate NaN like numpy, and LLVM vectorizes
                # them as reductions (an fcmp + select chain it does not). nsz, as for
                # the arithmetic: x86 then skips ordering -0 below +0 (a mask move and
                # two blends per vector, half of a softmax row max's instructions).
                ty = a.type
                fn = self.m.declare(f"llvm.{op}imum.{type_suffix(ty)}", ty, [ty, ty])
                return b.call(fn, [a, c], fastmath=("nsz",))
        else:
            signed = dt.is_signed(t)
            folded = _fold_int(op, a, c, t) if lanes == 1 else None
            if folded is not None:
                return folded
            if op in _CMP:
                if not signed:
                    return b.icmp_unsigned(_CMP[op], a, c)
                return b.icmp_signed(_CMP[op], a, c)
            if op == "add":
                return b.add(a, c)
            if op == "sub":
                return b.sub(a, c)
            if op == "mul":
                return b.mul(a, c)
            if op in ("max", "min"):
                pred = ">" if op == "max" else "<"
                gt = b.icmp_signed(pred, a, c) if signed else b.icmp_unsigned(pred, a, c)
                return b.select(gt, a, c)
            if op in ("floordiv", "floormod"):
                return self._floor_divmod(op, a, c, signed)
        raise IRError(f"codegen: operator {op} on {t} is not supported")

    def _floor_divmod(self, op: str, a: ll.Value, c: ll.Value, signed: bool) -> ll.Value:
        b = self.builder
        if not signed:
            return b.udiv(a, c) if op == "floordiv" else b.urem(a, c)
        zero = ll.Constant(a.type, None)
        q = b.sdiv(a, c)
        r = b.srem(a, c)
        # Floor semantics: adjust when the remainder is non-zero and signs differ.
        adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, c), zero))
        if op == "floordiv":
            return b.sub(q, b.zext(adjust, a.type))
        return b.add(r, b.select(adjust, c, zero))

    def _cast(self, v: ll.Value, src: str, dst: str) -> ll.Value:
        b = self.builder
        lanes = self._lanes_of(v)
        st, tt = llvm_type(src, lanes), llvm_type(dst, lanes)
        if src == dst:
            return v
        if dt.BFLOAT16 in (src, dst):
            return self._cast_bfloat16(v, dst, lanes)
        if dst == "bool":
            if dt.is_float(src):
                return b.fcmp_unordered("!=", v, ll.Constant(st, None))
            return b.icmp_unsigned("!=", v, ll.Constant(st, None))
        if src == "bool":
            return b.uitofp(v, tt) if dt.is_float(dst) else b.zext(v, tt)
        if dt.is_float(src) and dt.is_float(dst):
            return b.fpext(v, tt) if dt.bits(dst) > dt.bits(src) else b.fptrunc(v, tt)
        if dt.is_float(src) and dt.bits(dst) < 32:
            # Clamped in floating point (NaN to 0), then a plain conversion: the saturating
            # conversion's value, which LLVM's fpto[su]i.sat gets one vcvttss2si a lane.
            low, high, zero = (
                _splat(llvm_type(src), lanes, float(x))
                for x in (dt.min_value(dst), dt.max_value(dst), 0.0)
            )
            v = b.select(b.fcmp_unordered("uno", v, v), zero, v)
            v = b.select(b.fcmp_ordered("<", v, low), low, v)
            v = b.select(b.fcmp_ordered(">", v, high), high, v)
            return b.trunc(b.fptosi(v, llvm_type("int32", lanes)), tt)
        if dt.is_float(src):
            sat = "llvm.fptosi.sat" if dt.is_signed(dst) else "llvm.fptoui.sat"
            name = f"{sat}.{type_suffix(tt)}.{type_suffix(st)}"
            return b.call(self.m.declare(name, tt, [st]), [v])
        if dt.is_float(dst):
            return b.sitofp(v, tt) if dt.is_signed(src) else b.uitofp(v, tt)
        if dt.bits(dst) > dt.bits(src):
            return b.sext(v, tt) if dt.is_signed(src) else b.zext(v, tt)
        if dt.bits(dst) < dt.bits(src):
            return b.trunc(v, tt)
        return v  # same width, different signedness: the bits are the value

    def _cast_bfloat16(self, v: ll.Value, dst: str, lanes: int) -> ll.Value:
        """float32 <-> bfloat16 in integer instructions, the same on every CPU.

        LLVM's `fptrunc float to bfloat` is vcvtneps2bf16 where the CPU has
        avx512bf16, which flushes denormals to zero, and a libcall per lane
        (`__truncsfbf2`) where it has not. Rounding the bits here is ml_dtypes'
        conversion exactly: to nearest, ties to even, NaN to a quiet NaN of its
        sign. bfloat16 -> float32 is the bits shifted up (exact).
        """
        b = self.builder

        def vt(t: ll.Type) -> ll.Type:
            return ll.VectorType(t, lanes) if lanes > 1 else t

        def c(value: int) -> ll.Constant:
            return _splat(I32, lanes, value)

        if dst == "float32":
            bits = b.zext(v, vt(I32))
            return b.bitcast(b.shl(bits, c(16)), vt(ll.FloatType()))
        bits = b.bitcast(v, vt(I32))
        high = b.lshr(bits, c(16))
        rounded = b.lshr(b.add(b.add(bits, c(0x7FFF)), b.and_(high, c(1))), c(16))
        quiet_nan = b.or_(b.and_(high, c(0x8000)), c(0x7FC0))
        is_nan = b.fcmp_unordered("uno", v, v)
        return b.trunc(b.select(is_nan, quiet_nan, rounded), vt(I16))


def _splat(t: ll.Type, lanes: int, value: int | float) -> ll.Constant:
    return (
        ll.Constant(ll.VectorType(t, lanes), [value] * lanes)
        if lanes > 1
        else ll.Constant(t, value)
    )


def type_suffix(t: ll.Type) -> str:
    """LLVM's overload suffix: f32, f64, i32, v8f32, ..."""
    if isinstance(t, ll.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    if isinstance(t, ll.FloatType):
        return "f32"
    if isinstance(t, ll.DoubleType):
        return "f64"
    if isinstance(t, ll.IntType):
        return f"i{t.width}"
    raise TypeError(f"no overload suffix for {t}")


def _is_constant(v: ll.Value) -> bool:
    return (
        isinstance(v, ll.Constant)
        and isinstance(v.constant, int | float)
        and not isinstance(v.type, ll.VectorType)
    )


def _wrap(value: int, dtype: str) -> int:
    """`value` as the integer type's two's-complement arithmetic leaves it."""
    bits = dt.bits(dtype)
    value &= (1 << bits) - 1
    return value - (1 << bits) if dt.is_signed(dtype) and value >> (bits - 1) else value


def _fold_int(op: str, a: ll.Value, c: ll.Value, dtype: str) -> ll.Value | None:
    """Integer arithmetic on constants done here, and x+0, x*1, x*0 simplified.

    Unrolled loops bind their variables to constants, so a register tile's index
    arithmetic is mostly constants: emitted as instructions it was most of the
    IR text, and LLVM's time went into folding it back (conv2d candidates: ~2,000
    adds and ~1,600 muls for ~50 vector FMAs).
    """
    ca, cc = _is_constant(a), _is_constant(c)
    if ca and cc:
        x, y = int(a.constant), int(c.constant)
        if op == "add":
            return ll.Constant(a.type, _wrap(x + y, dtype))
        if op == "sub":
            return ll.Constant(a.type, _wrap(x - y, dtype))
        if op == "mul":
            return ll.Constant(a.type, _wrap(x * y, dtype))
        return None
    if op == "add":
        if ca and a.constant == 0:
            return c
        if cc and c.constant == 0:
            return a
    elif op == "sub":
        if cc and c.constant == 0:
            return a
    elif op == "mul":
        if (ca and a.constant == 0) or (cc and c.constant == 0):
            return ll.Constant(a.type, 0)
        if ca and a.constant == 1:
            return c
        if cc and c.constant == 1:
            return a
    return None
