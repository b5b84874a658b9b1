"""A whole model as one shared library a C program links, and its header.

    int N_run(const float* x, float* y);                    // inputs, then outputs
    int N_run_arena(void* arena, const float* x, float* y); // the caller's arena

What goes into ``libN.so`` (linked by the system ``cc`` exactly as an exported
kernel is, against libc, libm and libpthread only):

- one object per distinct task, its kernel emitted as for the JIT
  (``N_k0``, ``N_k1``, …: the task's stored schedule, else its default loop nest),
  as the compiled model runs it (``codegen.model_prepack``: blocks of a schedule that
  only repack a weight ran once at export, so the kernel reads the packed copy);
- the driver (LLVM IR built here): copy the inputs into the arena, call the plan's
  steps in order on their arena or weight addresses, copy the outputs out; a kernel's
  non-zero status is returned at once;
- the weights, as the kernels read them (the load-time nodes — an OIHW→HWIO
  transpose, a folded Gemm transpose — and the packing prologues already run), each at a 64-byte aligned
  offset of one read-only blob the assembler includes from a file (``.incbin``):
  LLVM never sees the bytes. As an LLVM constant a weight costs its IR text (three
  characters a byte) and the compiler's copy: 128 MB of weights took 6 s and 1.5 GB
  of memory to write and compile, so BERT-base's 434 MB would take about 5 GB; by
  ``.incbin`` its whole export takes 20–26 s, most of it writing and linking the bytes;
- the arena of ``N_run``: 64-byte aligned, zero-filled (``.bss``), of the plan's
  ``arena_bytes`` (activations placed by liveness, ``ir/graph/memory.py``).

A GNU version script exports ``N_run`` and ``N_run_arena`` only, so the kernels of
two models never meet in one program.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from llvmlite import ir as ll

from codegen.emit import emit_module
from codegen.export import (
    C_TYPES,
    ExportError,
    c_dims,
    c_parameter_names,
    check_request,
    check_symbol,
    header_path,
    header_text,
    target_lines,
)
from codegen.jit import LinkerNotFoundError, LinkError, compile_object, link_shared_library
from codegen.model import prepare_constants
from codegen.model_prepack import model_kernels
from ir import dtype as dt
from ir.graph.memory import ALIGNMENT
from ir.graph.plan import ModelPlan, Step
from ir.lower import lower
from ir.node import walk
from ir.program import For, Program
from ir.target import Target

__all__ = ["ModelExport", "check_model_request", "default_name", "export_model", "model_header"]

I8 = ll.IntType(8)
I32 = ll.IntType(32)
I64 = ll.IntType(64)
PTR = ll.PointerType()

MAX_WEIGHT_BYTES = 2**31 - 2**20
"""Weights a library holds: code reaches them PC-relative (±2 GiB, the small code model)."""

BAD_ARENA = -2
"""What ``N_run_arena`` returns for a NULL or misaligned arena."""


@dataclass(frozen=True)
class ModelExport:
    """What :func:`export_model` wrote, and the sizes a user asks about."""

    library: Path
    header: Path
    kernels: int  # kernel functions: one per distinct task (and set of constant arguments)
    steps: int  # kernel calls per inference
    weight_bytes: int
    arena_bytes: int


def default_name(model_file: str | os.PathLike) -> str:
    """A C identifier from the model's file name: ``resnet-18.onnx`` → ``resnet_18``."""
    stem = re.sub(r"[^A-Za-z0-9_]", "_", Path(model_file).stem.split(".")[0]).strip("_")
    if not stem or stem[0].isdigit():
        stem = "model_" + stem
    try:
        check_symbol(stem)
    except ExportError:  # a keyword or a C library name: `int.onnx`, `free.onnx`
        stem += "_model"
    return stem


def check_model_request(name: str, output: str | os.PathLike) -> None:
    """Everything about a model export refusable before anything compiles."""
    check_symbol(name)
    check_request(f"{name}_run", "so", output)
    check_symbol(f"{name}_run_arena")


# ---------------------------------------------------------------------------
# The weights


def _weight_layout(constants: Mapping[str, np.ndarray]) -> tuple[dict[str, int], int]:
    """Each weight's byte offset in the blob (64-byte aligned, in name order) and its size."""
    offsets, end = {}, 0
    for name in sorted(constants):
        offsets[name] = end
        end += -(-max(constants[name].nbytes, 1) // ALIGNMENT) * ALIGNMENT
    return offsets, end


def _write_weights(
    path: Path, constants: Mapping[str, np.ndarray], offsets: Mapping[str, int]
) -> None:
    """The blob, written array by array (BERT-base's 414 MB is never copied in one piece)."""
    with path.open("wb") as f:
        for name in sorted(constants, key=offsets.__getitem__):
            f.seek(offsets[name])
            f.write(np.ascontiguousarray(constants[name]).tobytes())
        f.truncate(f.tell() + (-f.tell()) % ALIGNMENT)


def _weights_asm(symbol: str, blob: Path, nbytes: int) -> str:
    """Module-level assembly defining ``symbol`` as the blob's bytes, read-only, 64-byte aligned."""
    quoted = str(blob).replace("\\", "\\\\").replace('"', '\\"')
    lines = [
        '.pushsection .rodata.loomtune_weights,"a",@progbits',
        ".p2align 6",
        f".hidden {symbol}",
        f".type {symbol},@object",
        f".size {symbol},{nbytes}",
        f"{symbol}:",
        f'.incbin "{quoted}"',
        ".popsection",
    ]

    def ir_string(text: str) -> str:
        return "".join(c if c.isprintable() and c not in '"\\' else f"\\{ord(c):02X}" for c in text)

    return "".join(f'module asm "{ir_string(line)}"\n' for line in lines)


# ---------------------------------------------------------------------------
# The driver


def _driver_ir(
    plan: ModelPlan,
    steps: Sequence[Step],
    name: str,
    n_params: list[int],
    offsets: Mapping[str, int],
    has_weights: bool,
) -> str:
    """``N_run_arena`` (the steps over a caller's arena) and ``N_run`` (over the library's)."""
    module = ll.Module(name=f"{name}_driver")
    g = plan.graph
    inputs = [v for v, _ in plan.inputs]
    outputs = list(plan.outputs)
    kernels = [
        ll.Function(module, ll.FunctionType(I32, [PTR] * n), name=f"{name}_k{i}")
        for i, n in enumerate(n_params)
    ]
    memcpy = ll.Function(module, ll.FunctionType(PTR, [PTR, PTR, I64]), name="memcpy")
    weights = None
    if has_weights:  # defined by the module's assembly (_weights_asm)
        weights = ll.GlobalVariable(module, ll.ArrayType(I8, 0), name=f"{name}_weights")
        weights.visibility = "hidden"
        weights.align = ALIGNMENT

    run_ty = ll.FunctionType(I32, [PTR] * (1 + len(inputs) + len(outputs)))
    fn = ll.Function(module, run_ty, name=f"{name}_run_arena")
    arena, *args = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))

    def address(value: str) -> ll.Value:
        base = plan.base(value)
        slot = plan.slots.get(base)
        if slot is not None:
            return b.gep(arena, [ll.Constant(I64, slot.offset)], inbounds=True, source_etype=I8)
        assert weights is not None, f"{value} is neither in the arena nor a weight"
        return b.gep(weights, [ll.Constant(I64, offsets[base])], inbounds=True, source_etype=I8)

    def nbytes(value: str) -> ll.Constant:
        t = g.types[value]
        return ll.Constant(I64, t.size * dt.itemsize(t.dtype))

    # 1. a NULL or misaligned arena is refused (kernels assume 64-byte aligned tiles)
    misaligned = b.and_(b.ptrtoint(arena, I64), ll.Constant(I64, ALIGNMENT - 1))
    bad = b.or_(
        b.icmp_unsigned("==", arena, ll.Constant(PTR, None)),
        b.icmp_unsigned("!=", misaligned, ll.Constant(I64, 0)),
    )
    with b.if_then(bad, likely=False):
        b.ret(ll.Constant(I32, BAD_ARENA))
    # 2. inputs in, 3. the steps, stopping at the first failed kernel, 4. outputs out
    for value, arg in zip(inputs, args):
        b.call(memcpy, [address(value), arg, nbytes(value)])
    for step in steps:
        pointers = [address(a.value) for a in (*step.inputs, step.output)]
        rc = b.call(kernels[step.task], pointers)
        with b.if_then(b.icmp_signed("!=", rc, ll.Constant(I32, 0)), likely=False):
            b.ret(rc)
    for value, arg in zip(outputs, args[len(inputs) :]):
        b.call(memcpy, [arg, address(value), nbytes(value)])
    b.ret(ll.Constant(I32, 0))

    own = ll.GlobalVariable(
        module, ll.ArrayType(I8, max(plan.arena_bytes, ALIGNMENT)), f"{name}_arena"
    )
    own.linkage = "internal"
    own.initializer = ll.Constant(own.value_type, None)
    own.align = ALIGNMENT
    run = ll.Function(
        module, ll.FunctionType(I32, [PTR] * (len(inputs) + len(outputs))), f"{name}_run"
    )
    rb = ll.IRBuilder(run.append_basic_block("entry"))
    rb.ret(rb.call(fn, [own, *run.args]))
    return str(module)


# ---------------------------------------------------------------------------
# The header


def model_header(
    plan: ModelPlan,
    name: str,
    target: Target,
    *,
    source: str,
    weight_bytes: int,
) -> str:
    """The C/C++ header: both functions, every input and output's shape and dtype, the
    arena's size, what the return codes mean and which calls may run at once."""
    g = plan.graph
    values = [v for v, _ in plan.inputs] + list(plan.outputs)
    for v in values:
        if g.types[v].dtype not in C_TYPES:
            raise ExportError(f"model value {v!r}: dtype {g.types[v].dtype} has no C type")
    params = c_parameter_names(values, reserved=("arena",))
    n_in = len(plan.inputs)
    macro = f"{name.upper()}_ARENA_BYTES"
    width = max(len(p) for p in params)
    doc = [
        f"{name}: generated by loomtune from {source}.",
        "Compiled for (runs only on CPUs with these features):",
        *["  " + line for line in target_lines(target)],
        "",
        "Inputs, then outputs, in the model's order (dense row-major arrays):",
    ]
    for i, (v, p) in enumerate(zip(values, params)):
        t = g.types[v]
        line = (
            f"  {p.ljust(width)}  {'input ' if i < n_in else 'output'}  {t.dtype}{c_dims(t.shape)}"
        )
        doc.append(line + (f"  (value {v!r})" if p != v else ""))
    doc += [
        "",
        f"{name}_run uses the library's own arena ({macro} bytes): ONE CALL AT A",
        "TIME (callers on several threads must serialise). Each call runs its",
        f"kernels on up to {target.num_threads} thread(s): the caller and the library's",
        "worker threads (pthreads), started at the first call and kept. A loop",
        "that finds them busy with another call's runs on its caller alone.",
        f"{name}_run_arena runs on the caller's arena ({macro} bytes, 64-byte",
        f"aligned: aligned_alloc(64, {macro})): calls on distinct arenas may run",
        "at the same time. Inputs are copied in and outputs out: no pointer is",
        "kept after the call returns.",
        f"Weights ({weight_bytes:,} bytes) are embedded in the library (read-only).",
        "Needs only libc, libm and libpthread.",
        "",
        "Returns 0 on success, -1 if a kernel's scratch allocation failed,",
        f"{BAD_ARENA} if the arena is NULL or not 64-byte aligned.",
    ]
    decl = [
        ("const " if i < n_in else "") + f"{C_TYPES[g.types[v].dtype]}* {p}"
        for i, (v, p) in enumerate(zip(values, params))
    ]
    guard = f"LOOMTUNE_{name}_H"
    return header_text(
        guard,
        doc,
        [
            f"int {name}_run({', '.join(decl)});",
            f"int {name}_run_arena({', '.join(['void* arena', *decl])});",
        ],
        defines=(f"#define {macro} {max(plan.arena_bytes, ALIGNMENT)}",),
    )


# ---------------------------------------------------------------------------
# Export


def _kernel_object(program: Program, symbol: str, target: Target) -> tuple[bytes, bool]:
    """One task's kernel, emitted exactly as :func:`codegen.kernel.compile_program` emits it,
    and whether it runs a parallel loop (on the thread pool linked into it)."""
    lowered = lower(program)
    text = emit_module(
        lowered, symbol, num_threads=target.num_threads, vector_bits=target.vector_bits
    )
    parallel = target.num_threads > 1 and any(
        isinstance(n, For) and n.kind == "parallel" for n in walk(lowered.body)
    )
    return compile_object(text, target), parallel


def export_model(
    plan: ModelPlan,
    target: Target,
    *,
    name: str,
    output: str | os.PathLike,
    programs: Mapping[str, Program] | None = None,
    source: str = "an ONNX model",
    prepack: bool = True,
) -> ModelExport:
    """Compile every task of ``plan`` (its scheduled program in ``programs``, else the default
    loop nest) for ``target`` and link them, the driver and the weights into ``output``;
    the header goes next to it (:func:`codegen.export.header_path`)."""
    check_model_request(name, output)
    output, header = Path(output), header_path(output)
    programs = programs or {}
    read = {plan.base(a.value) for s in plan.steps for a in s.inputs}
    read |= {plan.base(v) for v in plan.outputs}
    run = model_kernels(
        plan, programs, prepare_constants(plan, read - set(plan.slots)), prepack=prepack
    )
    constants = run.constants
    offsets, weight_bytes = _weight_layout(constants)
    if weight_bytes > MAX_WEIGHT_BYTES:
        raise ExportError(
            f"the model's weights take {weight_bytes / 2**30:.1f} GiB; "
            f"a library holds at most {MAX_WEIGHT_BYTES / 2**30:.1f} GiB"
        )
    header_text = model_header(plan, name, target, source=source, weight_bytes=weight_bytes)
    with tempfile.TemporaryDirectory(prefix="loomtune-export-") as tmp:
        folder = Path(tmp)
        objects, n_params, thread_pool = [], [], False
        for i, program in enumerate(run.programs):
            n_params.append(len(program.params))
            path = folder / f"k{i}.o"
            code, parallel = _kernel_object(program, f"{name}_k{i}", target)
            path.write_bytes(code)
            objects.append(path)
            thread_pool |= parallel
        text = _driver_ir(plan, run.steps, name, n_params, offsets, bool(constants))
        if constants:
            blob = folder / "weights.bin"
            _write_weights(blob, constants, offsets)
            del constants  # only the file is needed now
            text += _weights_asm(f"{name}_weights", blob, weight_bytes)
        driver = folder / "driver.o"
        kernels = [f"{name}_k{i}" for i in range(len(run.programs))]
        driver.write_bytes(compile_object(text, target, external=kernels))
        try:
            link_shared_library(
                [*objects, driver],
                output,
                exports=[f"{name}_run", f"{name}_run_arena"],
                thread_pool=thread_pool,
            )
        except LinkerNotFoundError as exc:
            raise ExportError(str(exc).splitlines()[0]) from None
        except LinkError as exc:
            raise ExportError(str(exc).splitlines()[0]) from None
    try:
        header.write_text(header_text)
    except OSError as exc:
        raise ExportError(f"cannot write {header}: {exc.strerror or exc}") from None
    return ModelExport(
        output, header, len(run.programs), len(plan.steps), weight_bytes, plan.arena_bytes
    )
