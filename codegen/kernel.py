"""A compiled kernel called with numpy arrays, checked before any native code runs.

A kernel that streams an input unpacked (`ir.schedule.shift`) is compiled once more for
each offset of that input within a cache line it is called with: the variant's column
tiles start on a line of the caller's array. The variants compute the same result.
"""

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
from ir.schedule.shift import Streamed, shift_tiles, streamed_input
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
        self,
        program: Program,
        lowered: Program,
        module: CompiledModule,
        symbol: str,
        *,
        target: Target | None = None,
        loop_vectorize: bool = True,
    ) -> None:
        self.program = program
        self.lowered = lowered
        self.module = module
        self.symbol = symbol
        self.params = tuple(
            ParamSpec(b.name, b.concrete_shape(), b.dtype, i >= len(program.inputs))
            for i, b in enumerate(program.params)
        )
        self._cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(self.params)))
        self._fn = self._cfunc(module.address(symbol))
        self._target = target
        self._loop_vectorize = loop_vectorize
        self.streamed: Streamed | None = streamed_input(program) if target is not None else None
        """The input whose offset picks the variant; None: one variant for every address."""
        self._variants: dict[int, tuple[CompiledModule, object]] = {0: (module, self._fn)}

    @property
    def variant_shifts(self) -> tuple[int, ...]:
        """The shifts (in elements) compiled so far; (0,) for a kernel with one variant."""
        return tuple(sorted(self._variants))

    def variant(self, ptrs: list[int]):
        """The native function for arrays at `ptrs`: the variant whose tiles start on the
        streamed input's lines (compiled on first use)."""
        if self.streamed is None:
            return self._fn
        shift = self.streamed.shift_for(ptrs[self.streamed.param])
        found = self._variants.get(shift)
        if found is None:
            try:
                program = shift_tiles(self.program, self.streamed, shift)
                module = _compile_module(program, self._target, self.symbol, self._loop_vectorize)
            except LoomtuneError:  # refused (or a variant LLVM rejects): the base runs anywhere
                found = self._variants[0]
            else:
                found = (module, self._cfunc(module.address(self.symbol)))
            self._variants[shift] = found
        return found[1]

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
        ptrs = self.check(arrays)
        rc = self.variant(ptrs)(*ptrs)
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
        fn = self.variant(ptrs)
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
    """Lower, emit LLVM IR, optimise (O3, target CPU) and JIT; cached by the IR text. The
    variants for a streamed input's other offsets are compiled when first called for."""
    target = target or host_target()
    symbol = symbol or program.name
    lowered = lower(program)
    module = _compile_lowered(lowered, target, symbol, loop_vectorize)
    return Kernel(program, lowered, module, symbol, target=target, loop_vectorize=loop_vectorize)


def _compile_module(
    program: Program, target: Target, symbol: str, loop_vectorize: bool
) -> CompiledModule:
    return _compile_lowered(lower(program), target, symbol, loop_vectorize)


def _compile_lowered(
    lowered: Program, target: Target, symbol: str, loop_vectorize: bool
) -> CompiledModule:
    text = emit_module(
        lowered,
        symbol,
        num_threads=target.num_threads,
        vector_bits=target.vector_bits,
        features=target.features,
    )
    return compile_ir(text, target, loop_vectorize=loop_vectorize)
