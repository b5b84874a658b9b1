"""LLVM IR text to native code: optimise, JIT (MCJIT) and export.

This layer receives IR *text* and knows nothing of loomtune's own IR, so any
producer of LLVM IR can use it. Compiling is separate from generating and
cached by content (sha256 of the text, the canonical target and the options).

Two target machines are made per module, on purpose: MCJIT wants the JIT
code model (large on x86-64: JIT memory may land anywhere in the address
space), while an object meant for a ``.so`` wants position-independent code
with the small code model. Both have the same CPU and features, so the
optimised IR is the same for both.

Parallel loops call the thread pool's entry (``codegen/threadpool.py``, LLVM IR too):
JIT-ed modules share one pool per process (compiled here once, registered with
``llvm.add_symbol``); an exported object gets the runtime linked in (hidden, one
COMDAT group), so a library holds one pool and depends on nothing new.
"""

from __future__ import annotations

import ctypes.util
import functools
import hashlib
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm

from codegen import threadpool
from codegen.heap import keep_scratch_in_heap
from codegen.host import host_cpu_disabled_features, host_cpu_name, host_target
from ir.errors import LoomtuneError
from ir.target import Target

__all__ = [
    "CACHE_SIZE",
    "CompileError",
    "CompiledModule",
    "LinkError",
    "LinkerNotFoundError",
    "cache_clear",
    "cache_size",
    "compile_ir",
    "compile_object",
    "create_target_machine",
    "ensure_llvm",
    "link_shared_library",
    "optimize",
    "undefined_symbols",
    "wide_vectors",
    "write_assembly",
    "write_llvm_ir",
    "write_object",
]

CACHE_SIZE = 256
"""Compiled modules kept by :func:`compile_ir` (least recently used dropped)."""

# llvmlite calls release the GIL and share LLVM's global context, which is not
# thread-safe: every parse, pass run, JIT and emit holds this lock.
_LLVM_LOCK = threading.RLock()


class CompileError(LoomtuneError):
    """LLVM rejected the IR (parse or verify) or it calls an unknown symbol.

    The first line of the message is a one-line summary; LLVM's own message
    follows.
    """


class LinkError(RuntimeError):
    """The system linker failed; the message carries its output."""


class LinkerNotFoundError(LinkError):
    """No C compiler driver (``cc``) on PATH to link a shared library."""


# ---------------------------------------------------------------------------
# LLVM start-up


@functools.cache
def ensure_llvm() -> None:
    """Initialise the native target once and make libc/libm/libpthread visible.

    ``llvm.initialize()`` raises in llvmlite >= 0.45 (the core initialises
    itself); only the native target and asm printer are still needed.

    MCJIT finds libc/libm functions through the process anyway, but
    ``llvm.address_of_symbol`` (used here to refuse calls that cannot be
    resolved, which would otherwise jump to address 0) only searches libraries
    loaded through LLVM, so they are loaded permanently.
    """
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # Module-level assembly (an exported model's `.incbin` of its weights) is
    # parsed by the target's assembler when the object is written.
    llvm.initialize_native_asmparser()
    for symbol, library in (("expf", "m"), ("pthread_create", "pthread"), ("malloc", "c")):
        if llvm.address_of_symbol(symbol):
            continue
        path = ctypes.util.find_library(library)
        if path is not None:
            llvm.load_library_permanently(path)


# ---------------------------------------------------------------------------
# Target machines and the optimisation pipeline


TENSOR_INSTRUCTIONS = ("@llvm.x86.tdp", "@llvm.x86.avx512.vpdpbusd", "@llvm.x86.avx512bf16.")
"""Calls that mark a module as using tensor instructions (AMX, AVX-512 VNNI, AVX-512 BF16)."""


def wide_vectors(ir_text: str) -> bool:
    """Whether a module's own vector width should also be LLVM's vectorizers' width.

    LLVM prefers 256-bit vectors on Intel's AVX-512 CPUs (its `prefer-256-bit`
    tuning) wherever it vectorizes by itself. A module with tensor instructions
    also copies weights into their layouts, scalar byte copies that the SLP
    vectorizer turns into shuffles: at 256 bits twice as many loads and
    byte permutes as at 512 (docs/decisions.md, "dense_int8 per call").
    """
    return any(name in ir_text for name in TENSOR_INSTRUCTIONS)


def _feature_string(target: Target, *, wide: bool = False) -> str:
    """Features for ``create_target_machine``: the enabled ones, and on the host
    CPU also the host's disabled ones; with `wide` (and AVX-512), no 256-bit preference.

    A CPU name implies features; a virtual machine can hide some of them
    (AVX-512, say), so on the host's CPU name the features the host lacks are
    switched off explicitly.
    """
    features = list(target.features)
    if target.cpu == host_cpu_name():
        enabled = {feature[1:] for feature in target.features}
        features += [f for f in host_cpu_disabled_features() if f[1:] not in enabled]
    if wide and "+avx512f" in features:
        features.append("-prefer-256-bit")
    return ",".join(features)


def create_target_machine(
    target: Target, *, jit: bool = False, wide: bool = False
) -> llvm.TargetMachine:
    """A target machine for ``target``'s CPU and features at O3.

    ``jit=False`` (export): PIC relocations and the default (small) code
    model, as a ``.so`` needs. ``jit=True``: what MCJIT wants (the JIT code
    model, default relocations). ``wide``: see `wide_vectors`.
    """
    ensure_llvm()
    llvm_target = llvm.Target.from_triple(llvm.get_process_triple())
    if jit:
        return llvm_target.create_target_machine(
            cpu=target.cpu,
            features=_feature_string(target, wide=wide),
            opt=3,
            reloc="default",
            codemodel="jitdefault",
            jit=True,
        )
    return llvm_target.create_target_machine(
        cpu=target.cpu,
        features=_feature_string(target, wide=wide),
        opt=3,
        reloc="pic",
        codemodel="default",
    )


def optimize(
    module_ref: llvm.ModuleRef,
    target_machine: llvm.TargetMachine,
    opt_level: int = 3,
    loop_vectorize: bool = True,
    slp_vectorize: bool = True,
) -> None:
    """Run LLVM's default per-module pipeline (new pass manager) in place.

    The target machine gives the passes the CPU's costs (vector width, FMA),
    so it must describe the machine the code is for. Turning the vectorizers
    off lets a test see the schedule's own vectorization.
    """
    if not 0 <= opt_level <= 3:
        raise ValueError(f"opt_level must be 0..3, got {opt_level}")
    tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    tuning.loop_vectorization = loop_vectorize
    tuning.slp_vectorization = slp_vectorize
    # Interleaving is part of the loop vectorizer; off with it.
    tuning.loop_interleaving = loop_vectorize
    with _LLVM_LOCK:
        builder = llvm.create_pass_builder(target_machine, tuning)
        passes = builder.getModulePassManager()
        passes.run(module_ref, builder)


# ---------------------------------------------------------------------------
# Parsing


def _summary(message: str) -> str:
    """The first informative line of an LLVM error message."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    # parse_assembly's message starts with a generic "LLVM IR parsing error".
    for line in lines:
        if "error" in line.lower() and line.lower() != "llvm ir parsing error":
            return line
    return lines[0] if lines else "unknown LLVM error"


def _parse(ir_text: str, *, verify: bool = True) -> llvm.ModuleRef:
    """Parse (and verify) IR text; LLVM's complaints become CompileError."""
    ensure_llvm()
    with _LLVM_LOCK:
        try:
            module = llvm.parse_assembly(ir_text)
        except RuntimeError as exc:
            raise CompileError(f"invalid LLVM IR: {_summary(str(exc))}\n{exc}") from None
        if verify:
            try:
                module.verify()
            except RuntimeError as exc:
                raise CompileError(
                    f"LLVM IR does not verify: {_summary(str(exc))}\n{exc}"
                ) from None
    return module


def _undeclared(module: llvm.ModuleRef) -> set[str]:
    return {
        fn.name for fn in module.functions if fn.is_declaration and not fn.name.startswith("llvm.")
    }


def undefined_symbols(ir_text: str) -> set[str]:
    """Functions the module declares but does not define, intrinsics excluded.

    What a compiled kernel needs from the outside world (libc, libm,
    libpthread and nothing else, by design).
    """
    module = _parse(ir_text, verify=False)
    with _LLVM_LOCK:
        return _undeclared(module)


# ---------------------------------------------------------------------------
# The thread pool's runtime

_POOL_LOCK = threading.Lock()
_POOL_ENGINE: list[llvm.ExecutionEngine] = []


def _jit_thread_pool() -> None:
    """Compile the pool runtime once per process and register its entry for MCJIT.

    Compiled for this CPU whatever the kernel's target (its code is scalar). The engine
    is detached, never disposed: pool workers run its code until the process ends, and a
    disposed engine at interpreter exit would unmap code a spinning worker is in.
    """
    with _POOL_LOCK:
        if _POOL_ENGINE:
            return
        module = _parse(threadpool.runtime_ir(export=False))
        machine = create_target_machine(host_target(1), jit=True)
        with _LLVM_LOCK:
            module.triple = llvm.get_process_triple()
            module.data_layout = str(machine.target_data)
            optimize(module, machine)
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
            address = int(engine.get_function_address(threadpool.ENTRY))
            llvm.add_symbol(threadpool.ENTRY, address)
        engine.detach()
        _POOL_ENGINE.append(engine)


def _link_runtime(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    """Link the pool runtime (export flavour: hidden, one COMDAT group) into ``module``
    when it calls it, optimised for ``machine``; a no-op otherwise."""
    with _LLVM_LOCK:
        if threadpool.ENTRY not in _undeclared(module):
            return
    runtime = _parse(threadpool.runtime_ir(export=True))
    with _LLVM_LOCK:
        runtime.triple = module.triple
        runtime.data_layout = module.data_layout
        optimize(runtime, machine)
        module.link_in(runtime)


# ---------------------------------------------------------------------------
# Compiled modules


@dataclass(frozen=True)
class _Options:
    opt_level: int = 3
    loop_vectorize: bool = True
    slp_vectorize: bool = True


def _optimized(
    ir_text: str, target: Target, options: _Options, external: frozenset[str]
) -> tuple[llvm.ModuleRef, llvm.TargetMachine, frozenset[str]]:
    """Parse and verify, refuse calls that neither the process nor ``external`` resolves,
    optimise for ``target``: the module, the (export) target machine it was made for and
    the functions the text defines."""
    module = _parse(ir_text)
    with _LLVM_LOCK:
        unresolved = sorted(
            name
            for name in _undeclared(module)
            if name not in external
            and name != threadpool.ENTRY
            and not llvm.address_of_symbol(name)
        )
        if unresolved:
            raise CompileError(
                f"unresolved external symbol(s): {', '.join(unresolved)}\n"
                "kernels may call only libc, libm and libpthread"
            )
        defined = frozenset(fn.name for fn in module.functions if not fn.is_declaration)
        # Triple and data layout first: the passes read type sizes and vector costs from them.
        machine = create_target_machine(target, wide=wide_vectors(ir_text))
        module.triple = llvm.get_process_triple()
        module.data_layout = str(machine.target_data)
        optimize(module, machine, options.opt_level, options.loop_vectorize, options.slp_vectorize)
    return module, machine, defined


def compile_object(ir_text: str, target: Target, *, external: Iterable[str] = ()) -> bytes:
    """A position-independent object of ``ir_text`` for ``target``, with no JIT.

    For code that is only exported (an exported model's kernels and its driver):
    the same parse, checks and O3 pipeline as :class:`CompiledModule`, so the same
    machine code, without the JIT's second code generation. ``external`` names
    functions another object of the same library defines (the driver calls the kernels).
    """
    module, machine, _ = _optimized(ir_text, target, _Options(), frozenset(external))
    _link_runtime(module, machine)
    with _LLVM_LOCK:
        return bytes(machine.emit_object(module))


class CompiledModule:
    """IR text compiled for a target: JIT-ed functions plus export artefacts.

    Keeps the execution engine (and so the machine code) alive as long as the
    object lives; addresses from :meth:`address` are valid only that long.
    """

    def __init__(
        self,
        ir_text: str,
        target: Target,
        *,
        opt_level: int = 3,
        loop_vectorize: bool = True,
        slp_vectorize: bool = True,
    ) -> None:
        self.ir_text = ir_text
        self.target = target
        self.options = _Options(opt_level, loop_vectorize, slp_vectorize)

        # 1. parse, verify, refuse calls nothing could resolve; 2. optimise
        module, self._export_machine, self.defined_functions = _optimized(
            ir_text, target, self.options, frozenset()
        )
        with _LLVM_LOCK:
            # Kept as text before MCJIT's code generator touches the module
            # (codegen-prepare rewrites IR); exports re-parse it.
            self.optimized_ir: str = str(module)
            self.uses_thread_pool = threadpool.ENTRY in _undeclared(module)
        if self.uses_thread_pool:
            _jit_thread_pool()
        with _LLVM_LOCK:
            # 3. JIT; the engine owns the module and its target machine now
            self._engine = llvm.create_mcjit_compiler(
                module, create_target_machine(target, jit=True, wide=wide_vectors(ir_text))
            )
            self._engine.finalize_object()
            self._engine.run_static_constructors()

        self._assembly: str | None = None
        self._object: bytes | None = None

    def address(self, symbol: str) -> int:
        """The address of the defined function ``symbol``; KeyError if none."""
        if symbol not in self.defined_functions:
            raise KeyError(f"no function {symbol!r} defined in this module")
        with _LLVM_LOCK:
            address = int(self._engine.get_function_address(symbol))
        if not address:
            raise KeyError(f"function {symbol!r} has no address after JIT")
        return address

    def _export_module(self) -> llvm.ModuleRef:
        module = _parse(self.optimized_ir, verify=False)
        _link_runtime(module, self._export_machine)
        return module

    def export_ir(self) -> str:
        """The optimised IR as exports write it: with the thread pool linked in, if it calls it."""
        module = self._export_module()
        with _LLVM_LOCK:
            return str(module)

    def assembly(self) -> str:
        """Target assembly (AT&T syntax on x86) of the optimised module."""
        if self._assembly is None:
            module = self._export_module()
            with _LLVM_LOCK:
                self._assembly = str(self._export_machine.emit_assembly(module))
        return self._assembly

    def object_code(self) -> bytes:
        """A relocatable, position-independent object file (ELF on Linux)."""
        if self._object is None:
            module = self._export_module()
            with _LLVM_LOCK:
                self._object = bytes(self._export_machine.emit_object(module))
        return self._object

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.defined_functions))
        return f"CompiledModule([{names}], target={self.target.canonical()!r})"


_CACHE: OrderedDict[tuple[str, str, _Options], CompiledModule] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def compile_ir(
    ir_text: str,
    target: Target,
    *,
    opt_level: int = 3,
    loop_vectorize: bool = True,
    slp_vectorize: bool = True,
) -> CompiledModule:
    """Compile IR text for ``target``, reusing an earlier result for equal input.

    The key is the sha256 of the text, the canonical target string and the
    options; the :data:`CACHE_SIZE` most recently used modules are kept.
    Failures are not cached.
    """
    keep_scratch_in_heap()  # before any kernel runs in this process
    options = _Options(opt_level, loop_vectorize, slp_vectorize)
    key = (hashlib.sha256(ir_text.encode()).hexdigest(), target.canonical(), options)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    compiled = CompiledModule(
        ir_text,
        target,
        opt_level=opt_level,
        loop_vectorize=loop_vectorize,
        slp_vectorize=slp_vectorize,
    )
    with _CACHE_LOCK:
        # Another thread may have compiled the same text meanwhile: keep one.
        compiled = _CACHE.setdefault(key, compiled)
        _CACHE.move_to_end(key)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return compiled


def cache_clear() -> None:
    """Forget every cached module (their code lives on while referenced)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def cache_size() -> int:
    """How many modules the compile cache holds."""
    with _CACHE_LOCK:
        return len(_CACHE)


# ---------------------------------------------------------------------------
# Export


def write_object(module: CompiledModule, path: str | Path) -> Path:
    """Write ``module``'s PIC object file to ``path``."""
    path = Path(path)
    path.write_bytes(module.object_code())
    return path


def write_assembly(module: CompiledModule, path: str | Path) -> Path:
    """Write ``module``'s assembly to ``path``."""
    path = Path(path)
    path.write_text(module.assembly())
    return path


def write_llvm_ir(module: CompiledModule, path: str | Path, *, optimized: bool = True) -> Path:
    """Write the optimised IR, self-contained (or, ``optimized=False``, the input text) to ``path``."""
    path = Path(path)
    path.write_text(module.export_ir() if optimized else module.ir_text)
    return path


def link_shared_library(
    obj_path: str | Path | Sequence[str | Path],
    so_path: str | Path,
    *,
    cc: str = "cc",
    exports: Sequence[str] | None = None,
    thread_pool: bool = False,
) -> Path:
    """Link object files into a shared library with the system C compiler.

    Only ``-lm -lpthread`` (and libc) are linked: a kernel needs nothing else.
    With ``exports``, only those symbols are visible outside the library (a GNU
    version script): a model's kernels stay internal, so two models' libraries
    can be loaded by one program. ``thread_pool``: the objects run parallel loops, so
    the library is never unloaded (``-z nodelete``): its pool's workers outlive a
    ``dlclose`` and keep running its code.
    """
    driver = shutil.which(cc)
    if driver is None:
        raise LinkerNotFoundError(
            f"no C compiler '{cc}' on PATH: cannot link {so_path} "
            "(install one, or export an object file instead)"
        )
    so_path = Path(so_path)
    objects = [obj_path] if isinstance(obj_path, str | Path) else list(obj_path)
    command = [driver, "-shared", "-o", str(so_path), *map(str, objects), "-lm", "-lpthread"]
    if thread_pool:
        command.append("-Wl,-z,nodelete")
    with tempfile.TemporaryDirectory(prefix="loomtune-link-") as tmp:
        if exports is not None:
            script = Path(tmp) / "exports.map"
            script.write_text("{ global: " + "".join(f"{s}; " for s in exports) + "local: *; };\n")
            command.append(f"-Wl,--version-script={script}")
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()
        raise LinkError(
            f"linking {so_path} failed (exit {done.returncode}): "
            f"{output.splitlines()[0] if output else 'no output'}\n{output}"
        )
    return so_path
