"""A compiled kernel called with numpy arrays, checked before any native code runs."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from codegen.amx import AMX_DENIED
from codegen.emit import emit_module
from codegen.host import host_target
from codegen.jit import CompiledModule, compile_ir
from ir import dtype as dt
from ir.errors import LoomtuneError
from ir.lower import lower
from ir.program import Program
from ir.target import Target


class KernelArgumentError(LoomtuneError):
    """An array passed to a kernel has the wrong count, shape, dtype or layout."""


class KernelRuntimeError(LoomtuneError):
    """The kernel reported a failure (e.g. a scratch allocation failed)."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool


class Kernel:
    """Native code for one program; call it with inputs then outputs (numpy arrays)."""

    def __init__(
        self, program: Program, lowered: Program, module: CompiledModule, symbol: str
    ) -> None:
        self.program = program
        self.lowered = lowered
        self.module = module
        self.symbol = symbol
        self.params = tuple(
            ParamSpec(b.name, b.concrete_shape(), b.dtype, i >= len(program.inputs))
            for i, b in enumerate(program.params)
        )
        cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(self.params)))
        self._fn = cfunc(module.address(symbol))

    @property
    def ir_text(self) -> str:
        return self.module.ir_text

    def check(self, arrays: tuple[np.ndarray, ...]) -> list[int]:
        if len(arrays) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            raise KernelArgumentError(
                f"kernel {self.symbol} takes {len(self.params)} arrays ({names}), got {len(arrays)}"
            )
        ptrs = []
        for spec, a in zip(self.params, arrays):
            if not isinstance(a, np.ndarray):
                raise KernelArgumentError(
                    f"{spec.name}: expected a numpy array, got {type(a).__name__}"
                )
            if a.dtype != dt.to_numpy(spec.dtype):
                raise KernelArgumentError(f"{spec.name}: dtype {a.dtype}, expected {spec.dtype}")
            if tuple(a.shape) != spec.shape:
                raise KernelArgumentError(
                    f"{spec.name}: shape {tuple(a.shape)}, expected {spec.shape}"
                )
            if not a.flags.c_contiguous:
                raise KernelArgumentError(
                    f"{spec.name}: array is not C-contiguous (use np.ascontiguousarray)"
                )
            if spec.is_output and not a.flags.writeable:
                raise KernelArgumentError(f"{spec.name}: output array is read-only")
            ptrs.append(a.ctypes.data)
        return ptrs

    def __call__(self, *arrays: np.ndarray) -> None:
        rc = self._fn(*self.check(arrays))
        if rc == AMX_DENIED:
            raise KernelRuntimeError(
                f"kernel {self.symbol} uses AMX tiles, which the operating system did not permit "
                "(arch_prctl ARCH_REQ_XCOMP_PERM refused)"
            )
        if rc != 0:
            raise KernelRuntimeError(f"kernel {self.symbol} failed with code {rc} (out of memory?)")

    def bind_call(self, *arrays: np.ndarray):
        """A zero-argument callable with the arguments checked once (for timing loops)."""
        ptrs = self.check(arrays)
        fn = self._fn
        keepalive = (self, arrays)  # the machine code and the arrays must outlive the callable

        def call() -> int:
            assert keepalive
            return fn(*ptrs)

        return call


def compile_program(
    program: Program,
    target: Target | None = None,
    *,
    symbol: str | None = None,
    loop_vectorize: bool = True,
) -> Kernel:
    """Lower, emit LLVM IR, optimise (O3, target CPU) and JIT; cached by the IR text."""
    target = target or host_target()
    symbol = symbol or program.name
    lowered = lower(program)
    text = emit_module(
        lowered,
        symbol,
        num_threads=target.num_threads,
        vector_bits=target.vector_bits,
        features=target.features,
    )
    module = compile_ir(text, target, loop_vectorize=loop_vectorize)
    return Kernel(program, lowered, module, symbol)
