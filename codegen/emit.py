"""Lowered program -> LLVM IR text (llvmlite.ir): one exported function per kernel.

    int SYMBOL(const float* A, const float* B, float* C)   // inputs, then outputs; returns 0

- Addresses are formed only through GEP on opaque pointers (STYLE.md: pointer
  arithmetic through ptrtoint miscompiles under unrolling).
- Floating-point arithmetic carries `reassoc contract nsz` so LLVM may form FMAs
  and reassociate reductions; results stay within DESIGN.md's tolerance.
- Vectorized loops become `<W x T>` operations (see `codegen/vector.py` for the
  width and the legality check); unrolled loops are emitted unrolled (a nest of
  AMX tile products only is one `TileRegion`: its tiles stay in registers,
  `codegen/intrinsics.py`); parallel loops are outlined and run fork-join on a
  persistent thread pool (the last section of this module; the pool is
  codegen/threadpool.py).
- This module emits statements, functions and the module; expressions, LLVM
  types and integer constant folding are in `codegen/emit_expr.py`.
- Scratch buffers come from aligned_alloc (64-byte aligned); the function returns
  -1 when an allocation fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from llvmlite import ir as ll

from codegen import mathfn, threadpool
from codegen.amx import AMX_DENIED, amx_granted_flag
from codegen.emit_expr import (
    I8,
    I32,
    I64,
    PTR,
    ExpressionEmitter,
    ModuleEmitter,
    Scope,
    VectorLane,
    memory_type,
)
from codegen.intrinsics import AMX_INTRINSICS, TileRegion, emit_intrinsic, tile_products_only
from codegen.prefetch import prefetch_points, prefetch_requests
from codegen.vector import VectorPlan
from ir import dtype as dt
from ir.errors import IRError
from ir.expr import Buffer, Const, Load, Var
from ir.node import walk
from ir.program import (
    Allocate,
    BufferStore,
    For,
    IfThenElse,
    IntrinsicArg,
    IntrinsicCall,
    Program,
    SeqStmt,
    Stmt,
)
from ir.schedule.shift import LINE_BYTES, Streamed

STACK_LIMIT_BYTES = 64 * 1024
T = TypeVar("T")


class FunctionEmitter(ExpressionEmitter):
    """Emits statements (and, through ExpressionEmitter, expressions) into one LLVM function."""

    def __init__(
        self, module: ModuleEmitter, fn: ll.Function, scope: Scope, *, in_parallel: bool
    ) -> None:
        self.m = module
        self.fn = fn
        self.scope = scope
        self.in_parallel = in_parallel
        self.entry = fn.append_basic_block("entry")
        self.body_start = fn.append_basic_block("body")
        self.builder = ll.IRBuilder(self.body_start)
        self.fail_block = fn.append_basic_block("alloc_failed")
        self.vec: VectorLane | None = None
        self.tiles: TileRegion | None = None

    def math_call(self, fn: str, dtype: str, v: ll.Value) -> ll.Value:
        return mathfn.call(self, fn, dtype, v)

    def finish_entry(self) -> None:
        """Allocas were added to the entry block; now jump from it to the body."""
        ll.IRBuilder(self.entry).branch(self.body_start)

    def alloca(self, ty: ll.Type, count: int = 1, name: str = "") -> ll.Value:
        """Stack slots live in the entry block so loops do not grow the stack."""
        b = ll.IRBuilder(self.entry)
        if self.entry.instructions:
            b.position_before(self.entry.instructions[0])
        slot = b.alloca(ty, size=ll.Constant(I64, count) if count > 1 else None, name=name)
        # llvmlite types an alloca as a typed pointer and checks GEPs and stores
        # through it against that type; LLVM itself only has opaque pointers, so
        # give the slot the opaque type every other address in the module has.
        slot.type = PTR
        return slot

    # -- loops -------------------------------------------------------------

    @contextmanager
    def for_range(self, name: str, start: ll.Value, stop: ll.Value) -> Iterator[ll.Value]:
        """A counted loop owning its phi and blocks; yields the induction variable."""
        b = self.builder
        pre = b.block
        header = self.fn.append_basic_block(f"{name}.header")
        body = self.fn.append_basic_block(f"{name}.body")
        exit_ = self.fn.append_basic_block(f"{name}.exit")
        b.branch(header)
        b.position_at_end(header)
        phi = b.phi(I64, name=name)
        phi.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", phi, stop), body, exit_)
        b.position_at_end(body)
        yield phi
        nxt = b.add(phi, ll.Constant(I64, 1), name=f"{name}.next", flags=("nsw",))
        phi.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(exit_)

    # -- statements --------------------------------------------------------

    def stmt(self, s: Stmt) -> None:
        b = self.builder
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, For):
            self._for(s)
        elif isinstance(s, BufferStore):
            self._store(s)
        elif isinstance(s, IfThenElse):
            cond = self.expr(s.cond)
            if isinstance(cond.type, ll.VectorType):
                raise IRError(
                    "codegen: a guard that varies across vector lanes reached vector code"
                )
            if s.else_case is None:
                with b.if_then(cond):
                    self.stmt(s.then_case)
            else:
                with b.if_else(cond) as (then, other):
                    with then:
                        self.stmt(s.then_case)
                    with other:
                        self.stmt(s.else_case)
        elif isinstance(s, IntrinsicCall):
            emit_intrinsic(self, s, getattr(self.m, "features", None))
        elif isinstance(s, Allocate):
            if self._on_stack(s.buffer):
                self.scope.buffers[s.buffer.name] = self.stack_buffer(s.buffer)
                self.stmt(s.body)
            else:
                ptr = self.malloc(s.buffer)
                self.stmt(s.body)
                self.free(ptr)
            del self.scope.buffers[s.buffer.name]
        else:
            raise IRError(f"codegen: unexpected {type(s).__name__} in a lowered program")

    def _for(self, s: For) -> None:
        extent = s.extent
        if s.kind == "unrolled" and isinstance(extent, Const):
            region = self.tiles is None and tile_products_only(s)
            if region:
                self.tiles = TileRegion()
            for i in range(int(extent.value)):
                self.scope.vars[s.var] = ll.Constant(I64, i)
                self._prefetch(s)
                self.stmt(s.body)
            del self.scope.vars[s.var]
            if region:
                self.tiles.flush(self)  # type: ignore[union-attr]
                self.tiles = None
            return
        if (
            s.kind == "parallel"
            and not self.in_parallel
            and self.vec is None
            and self.m.num_threads > 1
        ):
            emit_parallel_loop(self, s)
            return
        if s.kind == "vectorized" and self.vec is None:
            plan = self.m.vector_plan(s)
            if plan is not None:
                self._vector_loop(s, plan)
                return
        self._serial_loop(s, ll.Constant(I64, 0), self.expr(extent))

    def _serial_loop(self, s: For, start: ll.Value, stop: ll.Value) -> None:
        with self.for_range(s.var.name, start, stop) as iv:
            self.scope.vars[s.var] = iv
            self._prefetch(s)
            self.stmt(s.body)
        del self.scope.vars[s.var]

    def _prefetch(self, s: For) -> None:
        """What iteration var + d of `s` reads, asked for now (`codegen.prefetch`); none
        inside vector code or an AMX tile region, whose loops are not loops any more."""
        requests = prefetch_requests(s)
        if not requests or self.vec is not None or self.tiles is not None:
            return
        b = self.builder
        fn = self.m.declare("llvm.prefetch.p0", ll.VoidType(), [PTR, I32, I32, I32])
        read, keep, data = ll.Constant(I32, 0), ll.Constant(I32, 3), ll.Constant(I32, 1)
        for name, distance in requests:
            if name not in self.scope.buffers:
                continue
            for point in prefetch_points(s, name, distance):
                # Not `inbounds`: the line may lie past the buffer's end, which a prefetch allows.
                ptr = b.gep(
                    self.scope.buffers[name],
                    [self.expr(point.indices[0])],
                    source_etype=memory_type(point.buffer.dtype),
                )
                b.call(fn, [ptr, read, keep, data])

    def _vector_loop(self, s: For, plan: VectorPlan) -> None:
        """Main loop of `lanes`-wide chunks, then narrower vectors, then scalar code for a last lane."""
        lanes, chunks = plan.lanes, plan.chunks
        if chunks == 1:
            # One chunk: no loop (a 1-trip loop per unrolled copy was most of the
            # blocks LLVM had to clean up in a register tile's code).
            self._vector_body(s, lanes, ll.Constant(I64, 0))
        elif chunks:
            with self.for_range(
                f"{s.var.name}.vec", ll.Constant(I64, 0), ll.Constant(I64, chunks)
            ) as c:
                self._vector_body(
                    s, lanes, self.builder.mul(c, ll.Constant(I64, lanes), flags=("nsw",))
                )
        start, end = chunks * lanes, chunks * lanes + plan.tail
        for width in plan.segments:
            self._vector_body(s, width, ll.Constant(I64, start))
            start += width
        if start < end:
            self._serial_loop(s, ll.Constant(I64, start), ll.Constant(I64, end))

    def _vector_body(self, s: For, lanes: int, base: ll.Value) -> None:
        """The loop body once, its variable taking lanes base .. base+lanes-1."""
        self.vec = VectorLane(s.var, lanes)
        self.scope.vars[s.var] = base
        self.stmt(s.body)
        self.vec = None
        del self.scope.vars[s.var]

    def _store(self, s: BufferStore) -> None:
        b = self.builder
        value = self.expr(s.value)
        vec = self.vec
        if vec is not None:
            stride, rest = self.affine(s.indices[0], vec.var)
            if stride == 1:
                value = self.widen(value, vec.lanes)
                if s.buffer.dtype == "bool":
                    value = b.zext(value, memory_type("bool", vec.lanes))
                ptr = self.gep(s.buffer, self.vector_base(rest))
                b.store(value, ptr, align=dt.itemsize(s.buffer.dtype))
                return
            if stride is None or stride != 0 or isinstance(value.type, ll.VectorType):
                # A non-unit stride: one store per lane, in lane order.
                idx = self.widen(self.expr(s.indices[0]), vec.lanes)
                value = self.widen(value, vec.lanes)
                for lane in range(vec.lanes):
                    li = ll.Constant(I32, lane)
                    self._scalar_store(
                        s.buffer, b.extract_element(value, li), b.extract_element(idx, li)
                    )
                return
        self._scalar_store(s.buffer, value, self.expr(s.indices[0]))

    def _scalar_store(self, buf: Buffer, value: ll.Value, index: ll.Value) -> None:
        if buf.dtype == "bool":
            value = self.builder.zext(value, I8)
        self.builder.store(value, self.gep(buf, index), align=dt.itemsize(buf.dtype))

    # -- scratch memory ----------------------------------------------------

    def malloc(self, buf: Buffer) -> ll.Value:
        """64-byte aligned scratch from libc; a failed allocation returns -1 from the kernel."""
        n = int(buf.shape[0].value)  # type: ignore[attr-defined]
        nbytes = max(64, -(-n * dt.itemsize(buf.dtype) // 64) * 64)
        b = self.builder
        fn = self.m.declare("aligned_alloc", PTR, [I64, I64])
        ptr = b.call(fn, [ll.Constant(I64, 64), ll.Constant(I64, nbytes)], name=buf.name)
        ok = self.fn.append_basic_block(f"{buf.name}.ok")
        b.cbranch(b.icmp_unsigned("==", ptr, ll.Constant(PTR, None)), self.fail_block, ok)
        b.position_at_end(ok)
        self.scope.buffers[buf.name] = ptr
        return ptr

    @staticmethod
    def _on_stack(buf: Buffer) -> bool:
        """Small buffers allocated inside the loop nest live on the stack: local tiles, which LLVM
        can promote to registers, and intermediates compacted to one iteration's region (a
        malloc and free per iteration would cost a fused loop measurably)."""
        n = int(buf.shape[0].value)  # type: ignore[attr-defined]
        return n * dt.itemsize(buf.dtype) <= STACK_LIMIT_BYTES

    def stack_buffer(self, buf: Buffer) -> ll.Value:
        n = int(buf.shape[0].value)  # type: ignore[attr-defined]
        slot = self.alloca(ll.ArrayType(memory_type(buf.dtype), n), name=buf.name)
        slot.align = 64  # type: ignore[attr-defined]
        return slot

    def free(self, ptr: ll.Value) -> None:
        self.builder.call(self.m.declare("free", ll.VoidType(), [PTR]), [ptr])


def emit_module(
    program: Program,
    symbol: str,
    *,
    num_threads: int = 1,
    vector_bits: int = 256,
    features: Iterable[str] | None = None,
) -> str:
    """LLVM IR text of a lowered program, exporting `symbol`.

    `features` (the target's) are checked against the tensor intrinsics the
    program calls; None leaves that to LLVM.
    """
    m = _module_emitter(symbol, num_threads, vector_bits, features)
    _emit_kernel(m, program)
    return str(m.module)


def _module_emitter(
    symbol: str, num_threads: int, vector_bits: int, features: Iterable[str] | None
) -> ModuleEmitter:
    m = ModuleEmitter(symbol, num_threads=num_threads, vector_bits=vector_bits)
    m.features = None if features is None else frozenset(x.lstrip("+") for x in features)  # type: ignore[attr-defined]
    return m


def emit_dispatch_module(
    variants: Mapping[int, Program],
    streamed: Streamed,
    symbol: str,
    *,
    num_threads: int = 1,
    vector_bits: int = 256,
    features: Iterable[str] | None = None,
) -> str:
    """LLVM IR text of one kernel in several lowered variants (by shift, in elements; 0 the
    unshifted one) and an exported `symbol` that calls the variant for the offset of the
    `streamed` input in its cache line (`Streamed.shift_for`). For an exported library,
    which cannot compile a variant when first needed as the JIT does (`codegen.kernel`).
    The variants are internal, named `SYMBOL.shiftS`; an offset that is not a whole
    number of elements runs shift 0."""
    if 0 not in variants:
        raise IRError("a dispatching module needs the unshifted variant (shift 0)")
    m = _module_emitter(symbol, num_threads, vector_bits, features)
    functions: dict[int, ll.Function] = {}
    for shift, program in sorted(variants.items()):
        m.start_kernel(f"{symbol}.shift{shift}")
        _emit_kernel(m, program)
        functions[shift] = m.module.globals[m.symbol]  # type: ignore[assignment]
        functions[shift].linkage = "internal"
        functions[shift].attributes.add("noinline")  # one function each, compiled as alone
    m.start_kernel(symbol)
    fn_ty = functions[0].function_type
    kernel = ll.Function(m.module, fn_ty, name=symbol)
    for arg, inner in zip(kernel.args, functions[0].args):
        arg.name = inner.name
        arg.add_attribute("noalias")
    b = ll.IRBuilder(kernel.append_basic_block("entry"))
    offset = b.and_(b.ptrtoint(kernel.args[streamed.param], I64), ll.Constant(I64, LINE_BYTES - 1))
    blocks = {s: kernel.append_basic_block(f"shift{s}") for s in functions}
    switch = b.switch(offset, blocks[0])
    for s, block in blocks.items():
        if s:
            switch.add_case(ll.Constant(I64, s * streamed.itemsize), block)
        b.position_at_end(block)
        b.ret(b.call(functions[s], list(kernel.args), tail=True))
    return str(m.module)


def _emit_kernel(self: ModuleEmitter, program: Program) -> None:
    """The exported kernel function of `program` in module `self`."""
    fn_ty = ll.FunctionType(I32, [PTR] * len(program.params))
    amx = any(isinstance(n, IntrinsicCall) and n.name in AMX_INTRINSICS for n in walk(program.body))
    name = self.fresh_function_name("tiles") if amx else self.symbol
    fn = ll.Function(self.module, fn_ty, name=name)
    scope = Scope()
    for arg, buf in zip(fn.args, program.params):
        arg.name = buf.name
        arg.add_attribute("noalias")
        scope.buffers[buf.name] = arg
    f = FunctionEmitter(self, fn, scope, in_parallel=False)
    ll.IRBuilder(f.fail_block).ret(ll.Constant(I32, -1))
    scratch = []
    for buf in program.allocs:
        if f._on_stack(buf):
            scope.buffers[buf.name] = f.stack_buffer(buf)
        else:
            scratch.append(f.malloc(buf))
    f.stmt(program.body)
    for ptr in reversed(scratch):
        f.free(ptr)
    f.builder.ret(ll.Constant(I32, 0))
    f.finish_entry()
    if amx:
        _amx_guard(self, fn, fn_ty)


def _amx_guard(self: ModuleEmitter, body: ll.Function, fn_ty: ll.FunctionType) -> None:
    """The exported kernel runs the tile code (`body`, kept out of line: LLVM configures the
    tiles at its entry) only when the OS granted AMX (codegen/amx.py), else returns AMX_DENIED."""
    body.linkage = "internal"
    body.attributes.add("noinline")
    kernel = ll.Function(self.module, fn_ty, name=self.symbol)
    for arg, inner in zip(kernel.args, body.args):
        arg.name = inner.name
        arg.add_attribute("noalias")
    b = ll.IRBuilder(kernel.append_basic_block("entry"))
    granted = b.load(amx_granted_flag(self.module), typ=I32)
    go = kernel.append_basic_block("granted")
    denied = kernel.append_basic_block("denied")
    b.cbranch(b.icmp_signed("!=", granted, ll.Constant(I32, 0)), go, denied)
    b.position_at_end(go)
    b.ret(b.call(body, list(kernel.args)))
    b.position_at_end(denied)
    b.ret(ll.Constant(I32, AMX_DENIED))


# ---------------------------------------------------------------------------
# Parallel loops: the body is outlined and run fork-join on loomtune's thread pool.
#
#     for i in parallel(N): body(i, captured...)
#       ->  task[t] = {captured buffers, captured loop variables, start_t, end_t, status}
#           loomtune_parallel_run(worker, task, sizeof task[0], T)
#             (task 0 on the calling thread, task t on pool worker t; codegen/threadpool.py)
#           then any non-zero status fails the kernel
#
# T is the target's thread count (the module's `num_threads`); iterations are split
# into T contiguous chunks. Parallel loops nested inside the outlined body run
# serially (one level of parallelism, no oversubscription). No C extension and no
# compiler are involved: the pool is LLVM IR calling libc and libpthread, compiled
# once per JIT process or linked into each exported library (codegen/jit.py).


def _captures(f: FunctionEmitter, loop: For) -> tuple[list[str], list[Var]]:
    """Buffers and loop variables from outside the loop that its body uses."""
    inner_allocs = {n.buffer.name for n in walk(loop.body) if isinstance(n, Allocate)}
    buffers: list[str] = []
    for n in walk(loop.body):
        if isinstance(n, Load | BufferStore | IntrinsicArg):
            name = n.buffer.name
            if name not in inner_allocs and name not in buffers and name in f.scope.buffers:
                buffers.append(name)
    variables: list[Var] = []
    for n in walk(loop.body):
        if isinstance(n, Var) and n != loop.var and n in f.scope.vars and n not in variables:
            variables.append(n)
    return buffers, variables


def emit_parallel_loop(f: FunctionEmitter, loop: For) -> None:
    m = f.m
    b = f.builder
    threads = m.num_threads
    buffers, variables = _captures(f, loop)
    fields: list[ll.Type] = [PTR] * len(buffers) + [I64] * len(variables) + [I64, I64, I32]
    task_ty = ll.LiteralStructType(fields)
    start_i, end_i, status_i = len(fields) - 3, len(fields) - 2, len(fields) - 1

    def field_ptr(builder: ll.IRBuilder, task: ll.Value, i: int) -> ll.Value:
        return builder.gep(
            task, [ll.Constant(I32, 0), ll.Constant(I32, i)], inbounds=True, source_etype=task_ty
        )

    # 1. the outlined body: i32 body(ptr noalias buffers..., i64 variables..., i64 start, i64 end).
    #    Captured buffers are distinct allocations, so they keep `noalias`; loading
    #    them from the task struct instead would lose it (and with it LLVM's
    #    freedom to keep accumulators in registers).
    body_ty = ll.FunctionType(I32, [PTR] * len(buffers) + [I64] * len(variables) + [I64, I64])
    body_fn = ll.Function(m.module, body_ty, name=m.fresh_function_name("body"))
    body_fn.linkage = "internal"
    w = FunctionEmitter(m, body_fn, Scope(), in_parallel=True)
    args = list(body_fn.args)
    for arg, name in zip(args, buffers):
        arg.name = name
        arg.add_attribute("noalias")
        w.scope.buffers[name] = arg
    for arg, var in zip(args[len(buffers) :], variables):
        arg.name = var.name
        w.scope.vars[var] = arg
    start, end = args[-2], args[-1]
    with w.for_range(loop.var.name, start, end) as iv:
        w.scope.vars[loop.var] = iv
        w.stmt(loop.body)
    w.builder.ret(ll.Constant(I32, 0))
    ll.IRBuilder(w.fail_block).ret(ll.Constant(I32, -1))
    w.finish_entry()

    #    ... and the pool's entry point: void worker(ptr task) unpacks the task.
    worker = ll.Function(
        m.module, ll.FunctionType(ll.VoidType(), [PTR]), name=m.fresh_function_name("par")
    )
    worker.linkage = "internal"
    task_arg = worker.args[0]
    wb = ll.IRBuilder(worker.append_basic_block("entry"))
    values = [wb.load(field_ptr(wb, task_arg, i), typ=PTR) for i in range(len(buffers))]
    values += [
        wb.load(field_ptr(wb, task_arg, len(buffers) + j), typ=I64) for j in range(len(variables))
    ]
    values += [
        wb.load(field_ptr(wb, task_arg, start_i), typ=I64),
        wb.load(field_ptr(wb, task_arg, end_i), typ=I64),
    ]
    status = wb.call(body_fn, values)
    wb.store(status, field_ptr(wb, task_arg, status_i))
    wb.ret_void()

    # 2. fill one task per thread (contiguous chunks) and run them on the pool
    tasks = f.alloca(task_ty, threads, name=f"{loop.var.name}.tasks")
    extent = f.expr(loop.extent)
    t_const = ll.Constant(I64, threads)
    chunk = b.sdiv(b.add(extent, ll.Constant(I64, threads - 1)), t_const)

    def smin(x: ll.Value, y: ll.Value) -> ll.Value:
        return b.select(b.icmp_signed("<", x, y), x, y)

    task_ptrs = []
    for t in range(threads):
        task = b.gep(tasks, [ll.Constant(I64, t)], inbounds=True, source_etype=task_ty)
        task_ptrs.append(task)
        for i, name in enumerate(buffers):
            b.store(f.scope.buffers[name], field_ptr(b, task, i))
        for j, var in enumerate(variables):
            b.store(f.scope.vars[var], field_ptr(b, task, len(buffers) + j))
        lo = smin(b.mul(chunk, ll.Constant(I64, t)), extent)
        hi = smin(b.add(lo, chunk), extent)
        b.store(lo, field_ptr(b, task, start_i))
        b.store(hi, field_ptr(b, task, end_i))
        b.store(ll.Constant(I32, 0), field_ptr(b, task, status_i))
    # The task's size as LLVM lays it out (folded to a constant).
    stride = b.sub(b.ptrtoint(task_ptrs[1], I64), b.ptrtoint(task_ptrs[0], I64))
    run = m.declare(threadpool.ENTRY, ll.VoidType(), [PTR, PTR, I64, I32])
    b.call(run, [worker, tasks, stride, ll.Constant(I32, threads)])

    # 3. fail the kernel if any chunk failed
    failed: ll.Value = ll.Constant(ll.IntType(1), 0)
    for t in range(threads):
        status = b.load(field_ptr(b, task_ptrs[t], status_i), typ=I32)
        failed = b.or_(failed, b.icmp_signed("!=", status, ll.Constant(I32, 0)))
    cont = f.fn.append_basic_block(f"{loop.var.name}.joined")
    b.cbranch(failed, f.fail_block, cont)
    b.position_at_end(cont)
