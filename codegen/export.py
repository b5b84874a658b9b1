"""A program as code a C program links: ``.so`` + header, ``.o``, ``.ll`` or ``.s``.

The exported function is the one :mod:`codegen.emit` writes for the JIT::

    int SYMBOL(const float* A, const float* B, float* C);  // inputs, then outputs

so an exported kernel and a JIT-ed one are the same code (same IR text, same
compile cache entry). A ``.so`` is linked by the system C compiler driver
(``cc``) against libc, libm and libpthread only; the header next to it
documents every parameter's shape and dtype, because a C pointer carries
neither.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from codegen import threadpool
from codegen.emit import emit_dispatch_module, emit_module
from codegen.jit import (
    CompiledModule,
    LinkerNotFoundError,
    LinkError,
    compile_ir,
    link_shared_library,
    undefined_symbols,
    write_assembly,
    write_llvm_ir,
    write_object,
)
from ir.errors import LoomtuneError
from ir.lower import lower
from ir.program import Program
from ir.schedule.shift import LINE_BYTES, ShiftRefused, Streamed, shift_tiles, streamed_input
from ir.target import Target

__all__ = [
    "C_TYPES",
    "FORMATS",
    "ExportError",
    "c_dims",
    "c_header",
    "c_parameter_names",
    "check_request",
    "check_symbol",
    "export_kernel",
    "header_path",
    "shift_variants",
    "target_lines",
]

FORMATS = ("so", "obj", "ll", "asm")
"""What :func:`export_kernel` writes: shared library (+ header), object, optimised LLVM IR, assembly."""

C_TYPES = {
    "float32": "float",
    "float64": "double",
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "bool": "uint8_t",  # stored as one byte, 0 or 1 (codegen.emit.memory_type)
    "bfloat16": "uint16_t",  # the bits: the upper half of a float32 of the same value
}
"""The C element type of each loomtune dtype, as the header spells it."""


_NO_CC = (
    "the system C compiler `cc` is needed to link a .so and none is on PATH; "
    "install one, or use --format obj and link the object yourself"
)


class ExportError(LoomtuneError):
    """An export that cannot be done as asked: bad symbol or format, no ``cc``, a failed link."""


# ---------------------------------------------------------------------------
# Names

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# C (up to C23) and C++ keywords: the header is read by both languages.
_KEYWORDS = frozenset(
    {
        "auto",
        "break",
        "case",
        "char",
        "const",
        "continue",
        "default",
        "do",
        "double",
        "else",
        "enum",
        "extern",
        "float",
        "for",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "register",
        "restrict",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "switch",
        "typedef",
        "union",
        "unsigned",
        "void",
        "volatile",
        "while",
        "bool",
        "true",
        "false",
        "nullptr",
        "alignas",
        "alignof",
        "constexpr",
        "static_assert",
        "thread_local",
        "typeof",
        "typeof_unqual",
        "asm",
        "catch",
        "class",
        "const_cast",
        "decltype",
        "delete",
        "dynamic_cast",
        "explicit",
        "export",
        "friend",
        "mutable",
        "namespace",
        "new",
        "noexcept",
        "operator",
        "private",
        "protected",
        "public",
        "reinterpret_cast",
        "static_cast",
        "template",
        "this",
        "throw",
        "try",
        "typeid",
        "typename",
        "using",
        "virtual",
        "wchar_t",
        "char8_t",
        "char16_t",
        "char32_t",
        "concept",
        "consteval",
        "constinit",
        "co_await",
        "co_return",
        "co_yield",
        "requires",
        "and",
        "and_eq",
        "bitand",
        "bitor",
        "compl",
        "not",
        "not_eq",
        "or",
        "or_eq",
        "xor",
        "xor_eq",
    }
)

# Macros <stdint.h> defines: a parameter so named would be macro-expanded in the header.
_STDINT_MACRO = re.compile(
    r"U?INT(?:_LEAST|_FAST)?[0-9]+_(?:MAX|MIN|C|WIDTH)|U?INTMAX_(?:MAX|MIN|C|WIDTH)"
    r"|U?INTPTR_(?:MAX|MIN|WIDTH)|(?:PTRDIFF|SIZE|WCHAR|WINT|SIG_ATOMIC)_(?:MAX|MIN|WIDTH)"
)

# Functions generated code calls (codegen.emit, codegen.emit_expr, codegen.mathfn, and
# the thread pool codegen.threadpool linked into it), and `main`. A kernel exported under one of these names would replace the C
# library's function for the whole program that links it.
_LIBRARY_NAMES = frozenset(
    {
        "main",
        "aligned_alloc",
        "malloc",
        "calloc",
        "realloc",
        "free",
        "memset",
        "memcpy",
        "memmove",
        "exp",
        "expf",
        "log",
        "logf",
        "sqrt",
        "sqrtf",
        "tanh",
        "tanhf",
        "erf",
        "erff",
        "floor",
        "floorf",
        "pthread_create",
        threadpool.ENTRY,
        *threadpool.IMPORTS,
    }
)


def _c_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an identifier in a C/C++ header, or None when it can."""
    if not _C_IDENTIFIER.fullmatch(name):
        return "a C name is ASCII letters, digits and underscores, not starting with a digit"
    if name in _KEYWORDS:
        return "it is a C or C++ keyword"
    if name.startswith("__") or (name[0] == "_" and name[1:2].isupper()):
        return "names starting with __ or _ and a capital are reserved for the C implementation"
    return None


def check_symbol(symbol: str) -> None:
    """Refuse a function name a C program could not declare or link safely."""
    problem = _c_name_problem(symbol)
    if problem is None and symbol in _LIBRARY_NAMES:
        problem = "the C library already defines it (the kernel would replace it)"
    if problem is not None:
        raise ExportError(f"invalid symbol name {symbol!r}: {problem}; choose another with --name")


def c_parameter_names(names: Sequence[str], reserved: Iterable[str] = ()) -> list[str]:
    """Parameter names for a declaration: each tensor's own where C accepts it.

    A custom workload's tensor may be called ``int`` or ``λ`` (Python
    identifiers), a model's ``onnx::MatMul_0``; such a parameter is declared
    as ``argN`` and the comment block keeps its real name. ``reserved`` names
    are taken by other parameters of the declaration.
    """
    reserved = frozenset(reserved)
    usable = [_c_name_problem(n) is None and not _STDINT_MACRO.fullmatch(n) for n in names]
    taken = set(reserved) | {n for n, ok in zip(names, usable) if ok}
    out = []
    for i, (name, ok) in enumerate(zip(names, usable)):
        if not ok or name in reserved:
            name = f"arg{i}"
            while name in taken:  # a tensor may itself be called arg0
                name += "_"
            taken.add(name)
        out.append(name)
    return out


def header_path(output: str | Path) -> Path:
    """The header written next to a shared library: ``libx.so`` -> ``libx.h``."""
    return Path(output).with_suffix(".h")


# ---------------------------------------------------------------------------
# The header


def c_dims(shape: tuple[int, ...]) -> str:
    """``[2][3]``: a shape as the header comments write it."""
    return "".join(f"[{d}]" for d in shape) if shape else " (scalar)"


def target_lines(target: Target, width: int = 68) -> list[str]:
    """The canonical target string over several lines, broken only between features."""
    lines = [f"llvm -mcpu={target.cpu}"]
    if target.features:
        line = "-mattr="
        for i, feature in enumerate(target.features):
            piece = feature + ("," if i < len(target.features) - 1 else "")
            if len(line) + len(piece) > width:
                lines.append(line)
                line = "  "
            line += piece
        lines.append(line)
    lines.append(f"-num-threads={target.num_threads}")
    return lines


def c_header(program: Program, symbol: str, *, target: Target | None = None) -> str:
    """A C/C++ header declaring ``symbol`` with every parameter documented.

    Pointers say nothing of shapes, so the comment block is the contract: the
    order, shape, dtype and direction of each buffer. ``target``, when given,
    is recorded because the code runs only on CPUs with its features.
    """
    check_symbol(symbol)
    for buf in program.params:
        if buf.dtype not in C_TYPES:
            raise ExportError(f"parameter {buf.name}: dtype {buf.dtype} has no C type")
    names = c_parameter_names([buf.name for buf in program.params])
    n_inputs = len(program.inputs)
    guard = f"LOOMTUNE_{symbol}_H"

    doc = [
        f"{symbol}: generated by loomtune from {program.name!r}.",
    ]
    if target is not None:
        # The feature list is long: wrap it so the header reads in an editor.
        doc.append("Compiled for (runs only on CPUs with these features):")
        doc += ["  " + line for line in target_lines(target)]
    doc += [
        "",
        "Parameters, in call order (dense row-major arrays; outputs must not",
        "overlap any other buffer):",
    ]
    width = max((len(n) for n in names), default=0)
    for i, (buf, name) in enumerate(zip(program.params, names)):
        role = "input " if i < n_inputs else "output"
        shape = buf.concrete_shape()
        line = f"  {name.ljust(width)}  {role}  {buf.dtype}{c_dims(shape)}"
        if name != buf.name:
            line += f"  (tensor {buf.name!r})"
        if buf.dtype == "bool":
            line += "  (one byte, 0 or 1)"
        doc.append(line)
    variants = shift_variants(program)
    if variants is not None:
        streamed, programs = variants
        doc += [
            "",
            f"Compiled {len(programs)} times, once per offset of "
            f"{names[streamed.param]} in a {LINE_BYTES}-byte",
            f"line: each call runs the code whose tiles start on {names[streamed.param]}'s lines",
            "(the same results at any address).",
        ]
    doc += [
        "",
        "Returns 0 on success, -1 if a scratch allocation failed.",
        "Needs only libc, libm and libpthread.",
    ]
    if target is not None and target.num_threads > 1:
        doc += [
            f"Parallel loops run on up to {target.num_threads} threads: the caller and the",
            "library's worker threads, started at the first call and kept. A loop",
            "that finds them busy with another call's runs on its caller alone.",
        ]

    params = []
    for i, (buf, name) in enumerate(zip(program.params, names)):
        const = "const " if i < n_inputs else ""
        params.append(f"{const}{C_TYPES[buf.dtype]}* {name}")
    return header_text(guard, doc, [f"int {symbol}({', '.join(params) if params else 'void'});"])


def header_text(
    guard: str, doc: list[str], declarations: list[str], defines: tuple[str, ...] = ()
) -> str:
    """A C/C++ header: include guard, `<stdint.h>`, the comment block `doc`, `defines`, then
    `declarations` in `extern "C"` for C++ callers."""
    lines = [
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "/*",
        *[f" * {line}".rstrip() for line in doc],
        " */",
        "",
        *([*defines, ""] if defines else []),
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        *declarations,
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Export


def shift_variants(program: Program) -> tuple[Streamed, dict[int, Program]] | None:
    """The input whose offset picks the variant and the program for each shift of its
    tiles (`ir.schedule.shift`), one per element offset in a cache line; None when the
    kernel has one variant (no streamed input, or a shift it refuses)."""
    streamed = streamed_input(program)
    if streamed is None:
        return None
    try:
        shifts = range(1, LINE_BYTES // streamed.itemsize)
        return streamed, {0: program, **{s: shift_tiles(program, streamed, s) for s in shifts}}
    except ShiftRefused:
        return None


def _compile(program: Program, target: Target, symbol: str) -> CompiledModule:
    """Lower, emit and compile as :func:`codegen.kernel.compile_program` does, with every
    variant a call may pick in the one module (`codegen.emit.emit_dispatch_module`)."""
    lowered = lower(program)
    options = {
        "num_threads": target.num_threads,
        "vector_bits": target.vector_bits,
        "features": target.features,
    }
    variants = shift_variants(program)
    if variants is None:
        text = emit_module(lowered, symbol, **options)
    else:
        streamed, programs = variants
        lowered_variants = {s: lowered if s == 0 else lower(p) for s, p in programs.items()}
        text = emit_dispatch_module(lowered_variants, streamed, symbol, **options)
    # emit's `declare` reuses a global of the same name: a kernel named like a
    # function it calls would call itself. _LIBRARY_NAMES covers today's calls;
    # this catches any added later.
    probe = emit_module(
        lowered, "loomtune_probe", num_threads=target.num_threads, vector_bits=target.vector_bits
    )
    if symbol in undefined_symbols(probe):
        raise ExportError(
            f"invalid symbol name {symbol!r}: the kernel itself calls {symbol}; choose another with --name"
        )
    return compile_ir(text, target)


def _link(module: CompiledModule, output: Path) -> None:
    """Object to a temporary file, then ``cc -shared`` it into ``output``."""
    with tempfile.TemporaryDirectory(prefix="loomtune-export-") as tmp:
        obj = write_object(module, Path(tmp) / f"{output.stem}.o")
        try:
            link_shared_library(obj, output, thread_pool=module.uses_thread_pool)
        except LinkerNotFoundError:
            raise ExportError(_NO_CC) from None
        except LinkError as exc:
            raise ExportError(str(exc).splitlines()[0]) from None


def check_request(symbol: str, fmt: str, output: str | Path) -> None:
    """Everything about an export that can be refused before compiling anything.

    The CLI calls it first so that a refused export prints only its error line.
    """
    check_symbol(symbol)
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r} (expected one of {', '.join(FORMATS)})")
    output = Path(output)
    if not output.parent.is_dir():
        raise ExportError(f"cannot write {output}: directory {output.parent} does not exist")
    if fmt == "so" and header_path(output) == output:
        raise ExportError(
            f"cannot write {output}: the header would overwrite it (name the library *.so)"
        )
    if fmt == "so" and shutil.which("cc") is None:
        raise ExportError(_NO_CC)


def export_kernel(
    program: Program,
    target: Target,
    *,
    symbol: str | None = None,
    fmt: str,
    output: str | Path,
) -> list[Path]:
    """Compile ``program`` for ``target`` and write it as ``fmt``; returns the paths written.

    ``symbol`` defaults to the program's name. ``so`` also writes the header
    (:func:`header_path`); the other formats write one file. ``target`` may
    name another CPU than this one: nothing here runs the code.
    """
    symbol = program.name if symbol is None else symbol
    check_request(symbol, fmt, output)
    output = Path(output)
    header = header_path(output)
    header_text = c_header(program, symbol, target=target) if fmt == "so" else ""

    module = _compile(program, target, symbol)
    writers: dict[str, Callable[[CompiledModule, Path], Path]] = {
        "obj": write_object,
        "ll": write_llvm_ir,
        "asm": write_assembly,
    }
    try:
        if fmt == "so":
            _link(module, output)
            header.write_text(header_text)
            return [output, header]
        return [writers[fmt](module, output)]
    except OSError as exc:
        raise ExportError(f"cannot write {exc.filename or output}: {exc.strerror or exc}") from None
