"""Kernels are generated code only: they may call libc, libm and libpthread, nothing else."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codegen import threadpool
from codegen.emit import emit_module
from codegen.jit import undefined_symbols
from ir.library import OPS
from ir.lower import lower
from ir.task import library_task

# What generated code may call: memory from libc, math from libm, threads from libpthread.
ALLOWED = {
    "aligned_alloc",
    "malloc",
    "free",
    "memset",
    "memcpy",
    "expf",
    "exp",
    "logf",
    "log",
    "sqrtf",
    "sqrt",
    "tanhf",
    "tanh",
    "erf",
}
# ... and the thread pool's entry: the pool itself is linked in (JIT: once per process)
# and calls libc and libpthread only.
POOL = threadpool.ENTRY
POOL_ALLOWED = {
    "syscall",
    "mmap",
    "munmap",
    "madvise",
    "getpid",
    "sched_yield",
    "clock_gettime",
    "pthread_create",
    "pthread_detach",
    "sigfillset",
    "pthread_sigmask",
}


@pytest.mark.parametrize("op", list(OPS))
def test_only_libc_libm_libpthread(op: str) -> None:
    task = library_task(op)
    text = emit_module(lower(task.program), op)
    external = undefined_symbols(text)
    assert external <= ALLOWED | {POOL}, f"{op} calls {sorted(external - ALLOWED)}"


def test_the_thread_pool_calls_only_libc_and_libpthread() -> None:
    for export in (False, True):
        assert undefined_symbols(threadpool.runtime_ir(export=export)) == POOL_ALLOWED


def test_symbol_check_sees_calls() -> None:
    # softmax needs scratch memory and a parallel loop the pool: the check is not vacuous.
    assert "aligned_alloc" in undefined_symbols(
        emit_module(lower(library_task("softmax").program), "softmax")
    )
    program = lower(library_task("transpose").program)
    outer = program.body
    program = replace(program, body=replace(outer, kind="parallel"))
    assert POOL in undefined_symbols(emit_module(program, "t", num_threads=2))


def test_intermediates_compacted_into_a_loop_live_on_the_stack() -> None:
    # softmax fused into its row loop: x_max, x_exp and exp_sum are one row's worth each,
    # allocated per row; on the stack there is no aligned_alloc/free per iteration.
    import numpy as np

    from codegen.kernel import compile_program
    from ir.schedule import Schedule
    from workers.verify import empty_outputs, verify

    task = library_task("softmax", {"m": 33, "n": 257})
    sch = Schedule(task.program)
    row = sch.get_loops(sch.get_block("Y"))[0]
    for name in ("exp_sum", "x_exp", "x_max"):
        sch.compute_at(sch.get_block(name), row)
    lowered = lower(sch.program)
    assert not lowered.allocs, "every intermediate was compacted into the row loop"
    assert not {"aligned_alloc", "malloc", "free"} & undefined_symbols(
        emit_module(lowered, "softmax")
    )
    kernel = compile_program(sch.program)
    inputs = task.make_inputs(0)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    assert verify(outputs, task.reference(inputs), task.output_names, task.reduction_length) is None
    assert np.isfinite(outputs[0]).all()
