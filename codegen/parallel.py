"""Parallel loops: the body is outlined and run fork-join on pthreads.

    for i in parallel(N): body(i, captured...)
      ->  task[t] = {captured buffers, captured loop variables, start_t, end_t, status}
          pthread_create(worker, &task[t])  for t = 1..T-1   (inline if creation fails)
          worker(&task[0])                  on the calling thread
          pthread_join(...)                 then any non-zero status fails the kernel

T is the target's thread count (the module's `num_threads`); iterations are split
into T contiguous chunks. Parallel loops nested inside the outlined body run
serially (one level of parallelism, no oversubscription). No C extension and no
compiler are involved: the generated code calls libpthread directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from ir.expr import Load, Var
from ir.node import walk
from ir.program import Allocate, BufferStore, For

if TYPE_CHECKING:
    from codegen.emit import FunctionEmitter

I32 = ll.IntType(32)
I64 = ll.IntType(64)
PTR = ll.PointerType()


def _captures(f: FunctionEmitter, loop: For) -> tuple[list[str], list[Var]]:
    """Buffers and loop variables from outside the loop that its body uses."""
    inner_allocs = {n.buffer.name for n in walk(loop.body) if isinstance(n, Allocate)}
    buffers: list[str] = []
    for n in walk(loop.body):
        if isinstance(n, Load | BufferStore):
            name = n.buffer.name
            if name not in inner_allocs and name not in buffers and name in f.scope.buffers:
                buffers.append(name)
    variables: list[Var] = []
    for n in walk(loop.body):
        if isinstance(n, Var) and n != loop.var and n in f.scope.vars and n not in variables:
            variables.append(n)
    return buffers, variables


def emit_parallel_loop(f: FunctionEmitter, loop: For) -> None:
    from codegen.emit import FunctionEmitter, Scope

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

    #    ... and the pthread entry point: ptr worker(ptr task) unpacks the task.
    worker = ll.Function(m.module, ll.FunctionType(PTR, [PTR]), name=m.fresh_function_name("par"))
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
    wb.ret(ll.Constant(PTR, None))

    # 2. fork: fill one task per thread, start threads 1..T-1, run chunk 0 here
    tasks = f.alloca(task_ty, threads, name=f"{loop.var.name}.tasks")
    tids = f.alloca(I64, threads, name=f"{loop.var.name}.tids")
    started = f.alloca(ll.IntType(8), threads, name=f"{loop.var.name}.started")
    extent = f.expr(loop.extent)
    t_const = ll.Constant(I64, threads)
    chunk = b.sdiv(b.add(extent, ll.Constant(I64, threads - 1)), t_const)
    pthread_create = m.declare("pthread_create", I32, [PTR, PTR, PTR, PTR])
    pthread_join = m.declare("pthread_join", I32, [I64, PTR])

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
    for t in range(1, threads):
        tid = b.gep(tids, [ll.Constant(I64, t)], inbounds=True, source_etype=I64)
        flag = b.gep(started, [ll.Constant(I64, t)], inbounds=True, source_etype=ll.IntType(8))
        rc = b.call(pthread_create, [tid, ll.Constant(PTR, None), worker, task_ptrs[t]])
        ok = b.icmp_signed("==", rc, ll.Constant(I32, 0))
        b.store(b.zext(ok, ll.IntType(8)), flag)
        with b.if_then(b.not_(ok)):
            b.call(worker, [task_ptrs[t]])  # could not start a thread: run the chunk here
    b.call(worker, [task_ptrs[0]])

    # 3. join, then fail the kernel if any chunk failed
    failed: ll.Value = ll.Constant(ll.IntType(1), 0)
    for t in range(1, threads):
        flag = b.load(
            b.gep(started, [ll.Constant(I64, t)], inbounds=True, source_etype=ll.IntType(8)),
            typ=ll.IntType(8),
        )
        with b.if_then(b.icmp_unsigned("!=", flag, ll.Constant(ll.IntType(8), 0))):
            tid = b.load(
                b.gep(tids, [ll.Constant(I64, t)], inbounds=True, source_etype=I64), typ=I64
            )
            b.call(pthread_join, [tid, ll.Constant(PTR, None)])
    for t in range(threads):
        status = b.load(field_ptr(b, task_ptrs[t], status_i), typ=I32)
        failed = b.or_(failed, b.icmp_signed("!=", status, ll.Constant(I32, 0)))
    cont = f.fn.append_basic_block(f"{loop.var.name}.joined")
    b.cbranch(failed, f.fail_block, cont)
    b.position_at_end(cont)
