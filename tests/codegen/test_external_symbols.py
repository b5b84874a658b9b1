"""Kernels are generated code only: they may call libc, libm and libpthread, nothing else."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codegen.emit import emit_module
from codegen.jit import undefined_symbols
from ir.library import OPS
from ir.lower import lower
from ir.task import library_task

# What generated code may call: memory from libc, math from libm, threads from libpthread.
ALLOWED = {
    "aligned_alloc", "malloc", "free", "memset", "memcpy",
    "expf", "exp", "logf", "log", "sqrtf", "sqrt", "tanhf", "tanh",
    "pthread_create", "pthread_join",
}  # fmt: skip


@pytest.mark.parametrize("op", list(OPS))
def test_only_libc_libm_libpthread(op: str) -> None:
    task = library_task(op)
    text = emit_module(lower(task.program), op)
    external = undefined_symbols(text)
    assert external <= ALLOWED, f"{op} calls {sorted(external - ALLOWED)}"


def test_symbol_check_sees_calls() -> None:
    # softmax needs scratch memory and a parallel loop needs pthreads: the check is not vacuous.
    assert "aligned_alloc" in undefined_symbols(emit_module(lower(library_task("softmax").program), "softmax"))
    program = lower(library_task("transpose").program)
    outer = program.body
    program = replace(program, body=replace(outer, kind="parallel"))
    assert {"pthread_create", "pthread_join"} <= undefined_symbols(emit_module(program, "t", num_threads=2))
