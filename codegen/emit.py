"""Lowered program -> LLVM IR text (llvmlite.ir): one exported function per kernel.

    int SYMBOL(const float* A, const float* B, float* C)   // inputs, then outputs; returns 0

Addresses are formed only through GEP on opaque pointers (STYLE.md: pointer
arithmetic through ptrtoint miscompiles under unrolling). Floating-point
arithmetic carries `reassoc contract nsz` so LLVM may vectorise reductions and
form FMAs; results stay within DESIGN.md's tolerance. Scratch buffers come from
malloc (64-byte aligned via aligned_alloc) and the function returns non-zero when
an allocation fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from llvmlite import ir as ll

from ir import dtype as dt
from ir.errors import IRError, UnboundShapeError
from ir.expr import Binary, Buffer, Call, Cast, Const, Expr, Load, Select, Var, render
from ir.node import walk
from ir.program import Allocate, BufferStore, For, IfThenElse, Program, SeqStmt, Stmt

I1 = ll.IntType(1)
I8 = ll.IntType(8)
I32 = ll.IntType(32)
I64 = ll.IntType(64)
PTR = ll.PointerType()
FAST = ("reassoc", "contract", "nsz")

_LIBM = {("tanh", "float32"): "tanhf", ("tanh", "float64"): "tanh"}
_INTRINSIC = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt"}


def llvm_type(dtype: str) -> ll.Type:
    if dtype == "float32":
        return ll.FloatType()
    if dtype == "float64":
        return ll.DoubleType()
    if dtype == "bool":
        return I1
    return ll.IntType(dt.bits(dtype))


def memory_type(dtype: str) -> ll.Type:
    """How a value is stored in memory (bool as one byte)."""
    return I8 if dtype == "bool" else llvm_type(dtype)


class FunctionEmitter:
    """Emits one lowered program as a function into `module`."""

    def __init__(self, module: ll.Module, program: Program, symbol: str) -> None:
        self.module = module
        self.program = program
        fnty = ll.FunctionType(I32, [PTR] * len(program.params))
        self.fn = ll.Function(module, fnty, name=symbol)
        self.fn.linkage = "external"
        self.entry = self.fn.append_basic_block("entry")
        self.body_start = self.fn.append_basic_block("body")
        self.builder = ll.IRBuilder(self.body_start)
        self.fail_block = self.fn.append_basic_block("alloc_failed")
        ll.IRBuilder(self.fail_block).ret(ll.Constant(I32, -1))
        self.buffers: dict[str, ll.Value] = {}
        self.vars: dict[Var, ll.Value] = {}
        for arg, buf in zip(self.fn.args, program.params):
            arg.name = buf.name
            arg.add_attribute("noalias")
            self.buffers[buf.name] = arg

    # -- helpers -----------------------------------------------------------

    def _declare(self, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing  # type: ignore[return-value]
        return ll.Function(self.module, ll.FunctionType(ret, args), name=name)

    @contextmanager
    def for_range(self, var: Var, extent: ll.Value) -> Iterator[None]:
        """A counted loop owning its phi and blocks; the body is emitted in the context."""
        b = self.builder
        pre = b.block
        header = self.fn.append_basic_block(f"{var.name}.header")
        body = self.fn.append_basic_block(f"{var.name}.body")
        exit_ = self.fn.append_basic_block(f"{var.name}.exit")
        b.branch(header)
        b.position_at_end(header)
        phi = b.phi(I64, name=var.name)
        phi.add_incoming(ll.Constant(I64, 0), pre)
        b.cbranch(b.icmp_signed("<", phi, extent), body, exit_)
        b.position_at_end(body)
        self.vars[var] = phi
        yield
        nxt = b.add(phi, ll.Constant(I64, 1), name=f"{var.name}.next", flags=("nsw", "nuw"))
        phi.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(exit_)
        del self.vars[var]

    # -- statements --------------------------------------------------------

    def emit(self) -> None:
        scratch = [self._alloc(buf) for buf in self.program.allocs]
        self.stmt(self.program.body)
        for ptr in reversed(scratch):
            self._free(ptr)
        self.builder.ret(ll.Constant(I32, 0))
        ll.IRBuilder(self.entry).branch(self.body_start)

    def _alloc(self, buf: Buffer) -> ll.Value:
        """64-byte aligned scratch from libc; a failed allocation returns -1 from the kernel."""
        n = int(buf.shape[0].value)  # type: ignore[attr-defined]
        nbytes = max(64, -(-n * dt.itemsize(buf.dtype) // 64) * 64)
        b = self.builder
        aligned_alloc = self._declare("aligned_alloc", PTR, [I64, I64])
        ptr = b.call(aligned_alloc, [ll.Constant(I64, 64), ll.Constant(I64, nbytes)], name=buf.name)
        ok = self.fn.append_basic_block(f"{buf.name}.ok")
        b.cbranch(b.icmp_unsigned("==", ptr, ll.Constant(PTR, None)), self.fail_block, ok)
        b.position_at_end(ok)
        self.buffers[buf.name] = ptr
        return ptr

    def _free(self, ptr: ll.Value) -> None:
        free = self._declare("free", ll.VoidType(), [PTR])
        self.builder.call(free, [ptr])

    def stmt(self, s: Stmt) -> None:
        b = self.builder
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, For):
            # Loop kinds other than serial are compiled serially here; LLVM's own
            # vectoriser and unroller still see the loops.
            with self.for_range(s.var, self.expr(s.extent)):
                self.stmt(s.body)
        elif isinstance(s, BufferStore):
            value = self.expr(s.value)
            if s.buffer.dtype == "bool":
                value = b.zext(value, I8)
            b.store(value, self._address(s.buffer.name, s.buffer.dtype, s.indices[0]), align=dt.itemsize(s.buffer.dtype))
        elif isinstance(s, IfThenElse):
            cond = self.expr(s.cond)
            if s.else_case is None:
                with b.if_then(cond):
                    self.stmt(s.then_case)
            else:
                with b.if_else(cond) as (then, other):
                    with then:
                        self.stmt(s.then_case)
                    with other:
                        self.stmt(s.else_case)
        elif isinstance(s, Allocate):
            ptr = self._alloc(s.buffer)
            self.stmt(s.body)
            self._free(ptr)
            del self.buffers[s.buffer.name]
        else:
            raise IRError(f"codegen: unexpected {type(s).__name__} in a lowered program")

    def _address(self, name: str, dtype: str, index: Expr) -> ll.Value:
        if name not in self.buffers:
            raise IRError(f"codegen: buffer {name} is not a parameter or an allocation in scope")
        idx = self.expr(index)
        return self.builder.gep(self.buffers[name], [idx], inbounds=True, source_etype=memory_type(dtype))

    # -- expressions -------------------------------------------------------

    def expr(self, e: Expr) -> ll.Value:
        b = self.builder
        if isinstance(e, Const):
            if e.dtype == "bool":
                return ll.Constant(I1, int(bool(e.value)))
            return ll.Constant(llvm_type(e.dtype), e.value)
        if isinstance(e, Var):
            if e not in self.vars:
                raise UnboundShapeError(
                    f"variable {e.name} is not bound: a symbolic size left unbound, "
                    "or a loop variable used outside its loop"
                )
            return self.vars[e]
        if isinstance(e, Load):
            ptr = self._address(e.buffer.name, e.dtype, e.indices[0])
            v = b.load(ptr, typ=memory_type(e.dtype), align=dt.itemsize(e.dtype))
            return b.trunc(v, I1) if e.dtype == "bool" else v
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Call):
            return self._call(e)
        if isinstance(e, Cast):
            return self._cast(self.expr(e.value), e.value.dtype, e.dtype)
        if isinstance(e, Select):
            if any(isinstance(n, Load) for n in walk(e.true_value)) or any(
                isinstance(n, Load) for n in walk(e.false_value)
            ):
                return self._lazy_select(e)
            return b.select(self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value))
        raise IRError(f"codegen: cannot compile {type(e).__name__} {render(e)}")

    def _lazy_select(self, e: Select) -> ll.Value:
        """Evaluate only the chosen side: a guarded load may be out of bounds otherwise."""
        b = self.builder
        cond = self.expr(e.cond)
        then_bb = self.fn.append_basic_block("sel.then")
        else_bb = self.fn.append_basic_block("sel.else")
        join = self.fn.append_basic_block("sel.join")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv = self.expr(e.true_value)
        then_end = b.block
        b.branch(join)
        b.position_at_end(else_bb)
        fv = self.expr(e.false_value)
        else_end = b.block
        b.branch(join)
        b.position_at_end(join)
        phi = b.phi(tv.type)
        phi.add_incoming(tv, then_end)
        phi.add_incoming(fv, else_end)
        return phi

    def _binary(self, e: Binary) -> ll.Value:
        b = self.builder
        a, c = self.expr(e.a), self.expr(e.b)
        t = e.a.dtype
        op = e.op
        if op == "and":
            return b.and_(a, c)
        if op == "or":
            return b.or_(a, c)
        cmp = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
        if dt.is_float(t):
            if op in cmp:
                return b.fcmp_ordered(cmp[op], a, c) if op != "ne" else b.fcmp_unordered("!=", a, c)
            if op == "add":
                return b.fadd(a, c, flags=FAST)
            if op == "sub":
                return b.fsub(a, c, flags=FAST)
            if op == "mul":
                return b.fmul(a, c, flags=FAST)
            if op == "div":
                return b.fdiv(a, c, flags=FAST)
            if op in ("max", "min"):
                # NaN-propagating like numpy: a NaN operand wins.
                pick = b.fcmp_unordered(">" if op == "max" else "<", a, c)
                return b.select(pick, a, c)
        else:
            signed = dt.is_signed(t)
            if op in cmp:
                if t == "bool" or not signed:
                    return b.icmp_unsigned(cmp[op], a, c)
                return b.icmp_signed(cmp[op], a, c)
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
        zero = ll.Constant(a.type, 0)
        q = b.sdiv(a, c)
        r = b.srem(a, c)
        # Floor semantics: adjust when the remainder is non-zero and signs differ.
        adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, c), zero))
        if op == "floordiv":
            return b.sub(q, b.zext(adjust, a.type))
        return b.add(r, b.select(adjust, c, zero))

    def _call(self, e: Call) -> ll.Value:
        t = e.dtype
        ty = llvm_type(t)
        arg = self.expr(e.args[0])
        if e.fn in _INTRINSIC:
            suffix = "f32" if t == "float32" else "f64"
            fn = self._declare(f"{_INTRINSIC[e.fn]}.{suffix}", ty, [ty])
            return self.builder.call(fn, [arg], fastmath=FAST)
        name = _LIBM[(e.fn, t)]
        fn = self._declare(name, ty, [ty])
        return self.builder.call(fn, [arg])

    def _cast(self, v: ll.Value, src: str, dst: str) -> ll.Value:
        b = self.builder
        st, tt = llvm_type(src), llvm_type(dst)
        if src == dst:
            return v
        if dst == "bool":
            if dt.is_float(src):
                return b.fcmp_unordered("!=", v, ll.Constant(st, 0.0))
            return b.icmp_unsigned("!=", v, ll.Constant(st, 0))
        if dt.is_float(src) and dt.is_float(dst):
            return b.fpext(v, tt) if dt.bits(dst) > dt.bits(src) else b.fptrunc(v, tt)
        if dt.is_float(src):
            sat = "llvm.fptosi.sat" if dt.is_signed(dst) else "llvm.fptoui.sat"
            name = f"{sat}.i{dt.bits(dst)}.{'f32' if src == 'float32' else 'f64'}"
            return b.call(self._declare(name, tt, [st]), [v])
        if dt.is_float(dst):
            return b.sitofp(v, tt) if dt.is_signed(src) else b.uitofp(v, tt)
        if dt.bits(dst) > dt.bits(src):
            return b.sext(v, tt) if dt.is_signed(src) else b.zext(v, tt)
        if dt.bits(dst) < dt.bits(src):
            return b.trunc(v, tt)
        return v  # same width, different signedness: the bits are the value


def emit_module(program: Program, symbol: str) -> str:
    """LLVM IR text of a lowered program, exporting `symbol`."""
    module = ll.Module(name=symbol)
    module.triple = ""  # filled in by the target machine at compile time
    FunctionEmitter(module, program, symbol).emit()
    return str(module)
