"""Tests for the compile layer: targets, the JIT, the cache and exports."""

from __future__ import annotations

import ctypes
import re
import shutil
import threading
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from codegen import jit
from codegen.host import (
    host_cpu_features,
    host_cpu_name,
    host_target,
    is_host,
    llvm_version,
    parse_target,
)
from codegen.jit import (
    CompiledModule,
    CompileError,
    LinkerNotFoundError,
    compile_ir,
    link_shared_library,
    undefined_symbols,
    write_assembly,
    write_llvm_ir,
    write_object,
)
from ir.target import Target, TargetError

# c[i] = a[i] + b[i] for i < n; returns 0 (the status a kernel reports).
ADD_IR = r"""
define i32 @add(ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %pa = getelementptr inbounds float, ptr %a, i64 %i
  %pb = getelementptr inbounds float, ptr %b, i64 %i
  %pc = getelementptr inbounds float, ptr %c, i64 %i
  %x = load float, ptr %pa, align 4
  %y = load float, ptr %pb, align 4
  %z = fadd float %x, %y
  store float %z, ptr %pc, align 4
  %next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}
"""

# out[i] = tanhf(x[i]) + fma(x[i], 2, 0): a libm call and an intrinsic.
TANH_IR = r"""
declare float @tanhf(float)
declare float @llvm.fma.f32(float, float, float)

define void @tanh_kernel(ptr noalias %x, ptr noalias %out, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr inbounds float, ptr %x, i64 %i
  %po = getelementptr inbounds float, ptr %out, i64 %i
  %v = load float, ptr %px, align 4
  %t = call float @tanhf(float %v)
  %f = call float @llvm.fma.f32(float %v, float 2.0, float 0.0)
  %r = fadd float %t, %f
  store float %r, ptr %po, align 4
  %next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""

# One explicit 8-wide vector add: needs 256-bit registers if the CPU has them.
VEC8_IR = r"""
define void @vadd8(ptr noalias %a, ptr noalias %b, ptr noalias %c) {
  %x = load <8 x float>, ptr %a, align 4
  %y = load <8 x float>, ptr %b, align 4
  %z = fadd <8 x float> %x, %y
  store <8 x float> %z, ptr %c, align 4
  ret void
}
"""

VEC16_IR = VEC8_IR.replace("<8 x float>", "<16 x float>").replace("vadd8", "vadd16")

ADD_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
)


def _ptr(array: np.ndarray) -> int:
    return array.ctypes.data


def _check_add(fn: ctypes._CFuncPtr, n: int) -> None:
    """Call an ``add`` kernel on fresh arrays; the output starts as NaN."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, n).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    c = np.full(n, np.nan, dtype=np.float32)
    assert fn(_ptr(a), _ptr(b), _ptr(c), n) == 0
    assert c.shape == (n,) and c.dtype == np.float32
    np.testing.assert_array_equal(c, a + b)


@pytest.fixture
def host() -> Target:
    return host_target()


# ---------------------------------------------------------------------------
# Target


def test_host_target_describes_this_machine(host: Target) -> None:
    assert host.cpu == host_cpu_name() == llvm.get_host_cpu_name()
    assert host.features == host_cpu_features()
    assert list(host.features) == sorted(host.features)
    assert all(f.startswith("+") for f in host.features)
    assert host.num_threads == 1
    assert is_host(host)
    assert host_target(4).num_threads == 4
    assert re.fullmatch(r"\d+\.\d+\.\d+", llvm_version())


def test_target_parse_round_trip_and_canonical_order() -> None:
    target = Target.parse("llvm -num-threads=4 -mattr=+sse2,+avx2,+fma,-avx512f -mcpu=haswell")
    assert target == Target("haswell", ("+avx2", "+fma", "+sse2"), 4)
    assert str(target) == "llvm -mcpu=haswell -mattr=+avx2,+fma,+sse2 -num-threads=4"
    assert target.canonical() == str(target)
    assert Target.parse(str(target)) == target
    # Duplicates and order do not matter to equality.
    assert Target("haswell", ("+fma", "+avx2", "+fma", "+sse2"), 4) == target
    assert hash(Target("haswell", ("+fma", "+avx2", "+sse2"), 4)) == hash(target)


def test_target_parse_defaults_and_host() -> None:
    assert Target.parse("llvm -mcpu=x86-64") == Target("x86-64", (), 1)
    assert str(Target.parse("llvm  -mcpu=x86-64 ")) == "llvm -mcpu=x86-64 -num-threads=1"
    assert parse_target("host") == host_target()
    assert parse_target("host -num-threads=3") == host_target(3)
    host = host_target(2)
    assert Target.parse(host.canonical()) == host


def test_host_is_resolved_by_codegen_not_by_the_pure_record() -> None:
    with pytest.raises(TargetError, match="parse_target"):
        Target.parse("host -num-threads=2")
    assert Target.parse("host", host=lambda n: Target("x86-64", (), n)) == Target("x86-64")


@pytest.mark.parametrize(
    ("text", "culprit"),
    [
        ("", "empty"),
        ("gpu -mcpu=x", "'gpu'"),
        ("llvm -mattr=+avx2", "-mcpu"),
        ("llvm -mcpu=haswell -O3", "'-O3'"),
        ("llvm -mcpu=haswell -mtriple=x86_64", "-mtriple"),
        ("llvm -mcpu=haswell -num-threads=0", "'0'"),
        ("llvm -mcpu=haswell -num-threads=-2", "'-2'"),
        ("llvm -mcpu=haswell -num-threads=two", "'two'"),
        ("llvm -mcpu=haswell -mattr=avx2", "'avx2'"),
        ("llvm -mcpu=haswell -mattr=+avx2,,+fma", "empty entry"),
        ("llvm -mcpu=haswell -mcpu=znver3", "-mcpu given twice"),
        ("llvm -mcpu=", "-mcpu"),
        ("llvm -mcpu", "-mcpu"),
        ("host -mcpu=haswell", "-mcpu=haswell"),
    ],
)
def test_bad_target_strings_name_the_culprit(text: str, culprit: str) -> None:
    with pytest.raises(TargetError) as info:
        Target.parse(text)
    message = str(info.value)
    assert culprit in message
    assert "\n" not in message
    assert isinstance(info.value, ValueError)


def test_bad_target_records() -> None:
    with pytest.raises(TargetError, match="num-threads"):
        Target("haswell", (), 0)
    with pytest.raises(TargetError, match="avx2"):
        Target("haswell", ("avx2",))
    with pytest.raises(TargetError, match="mcpu"):
        Target("")


def test_vector_bits() -> None:
    assert Target("x86-64", ("+sse2",)).vector_bits == 128
    assert Target("haswell", ("+avx",)).vector_bits == 256
    assert Target("haswell", ("+avx2", "+fma")).vector_bits == 256
    assert Target("skylake-avx512", ("+avx2", "+avx512f")).vector_bits == 512
    assert Target("x86-64").vector_bits == 128


# ---------------------------------------------------------------------------
# JIT


def test_libc_libm_libpthread_symbols_resolve() -> None:
    jit.ensure_llvm()
    for symbol in ("tanhf", "expf", "malloc", "pthread_create", "pthread_join"):
        assert llvm.address_of_symbol(symbol), symbol


@pytest.mark.parametrize("n", [1, 7, 8, 1003])
def test_add_kernel_matches_numpy(host: Target, n: int) -> None:
    module = compile_ir(ADD_IR, host)
    _check_add(ADD_TYPE(module.address("add")), n)


def test_loop_vectorizer_can_be_switched_off(host: Target) -> None:
    on = compile_ir(ADD_IR, host)
    off = compile_ir(ADD_IR, host, loop_vectorize=False)
    assert on is not off
    assert "vector.body" in on.optimized_ir
    assert "vector.body" not in off.optimized_ir
    assert "<4 x float>" not in off.optimized_ir and "<8 x float>" not in off.optimized_ir
    _check_add(ADD_TYPE(off.address("add")), 1003)


def test_tanhf_call_works(host: Target) -> None:
    module = compile_ir(TANH_IR, host)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        module.address("tanh_kernel")
    )
    x = np.linspace(-4, 4, 101, dtype=np.float32)
    out = np.full_like(x, np.nan)
    fn(_ptr(x), _ptr(out), x.size)
    np.testing.assert_allclose(out, np.tanh(x) + 2 * x, rtol=1e-6, atol=1e-6)


def test_cache_returns_the_same_module(host: Target) -> None:
    first = compile_ir(ADD_IR, host)
    assert compile_ir(ADD_IR, host) is first
    assert compile_ir(ADD_IR, host_target()) is first  # equal target, new object
    assert compile_ir(ADD_IR, host.with_threads(2)) is not first
    assert compile_ir(ADD_IR + "\n", host) is not first


def test_cache_is_bounded(host: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit, "CACHE_SIZE", 2)
    jit.cache_clear()
    texts = [f"{ADD_IR}\n; variant {i}\n" for i in range(3)]
    first = compile_ir(texts[0], host)
    compile_ir(texts[1], host)
    assert compile_ir(texts[0], host) is first  # touched: now most recent
    compile_ir(texts[2], host)  # evicts texts[1]
    assert jit.cache_size() == 2
    assert compile_ir(texts[0], host) is first
    jit.cache_clear()
    assert jit.cache_size() == 0
    # A module outlives its eviction: its code stays callable.
    _check_add(ADD_TYPE(first.address("add")), 9)


def test_invalid_ir_raises_compile_error(host: Target) -> None:
    with pytest.raises(CompileError) as info:
        compile_ir("define i32 @f() {\n  ret i64 0\n}\n", host)
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith("invalid LLVM IR:")
    assert "error" in first_line


def test_unverifiable_ir_raises_compile_error(host: Target) -> None:
    text = r"""
define i32 @f(i1 %c) {
entry:
  br i1 %c, label %a, label %b
a:
  %x = add i32 1, 2
  br label %b
b:
  ret i32 %x
}
"""
    with pytest.raises(CompileError, match=r"does not verify.*dominate"):
        compile_ir(text, host)


def test_unresolvable_call_is_refused(host: Target) -> None:
    text = "declare void @no_such_function_anywhere()\n" + ADD_IR.replace(
        "exit:\n  ret i32 0", "exit:\n  call void @no_such_function_anywhere()\n  ret i32 0"
    )
    assert undefined_symbols(text) == {"no_such_function_anywhere"}
    with pytest.raises(CompileError, match="no_such_function_anywhere"):
        compile_ir(text, host)


def test_unknown_symbol_address_raises(host: Target) -> None:
    module = compile_ir(ADD_IR, host)
    assert module.defined_functions == {"add"}
    with pytest.raises(KeyError, match="nope"):
        module.address("nope")


def test_compiles_from_threads(host: Target) -> None:
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            module = CompiledModule(f"{ADD_IR}\n; thread {i}\n", host)
            _check_add(ADD_TYPE(module.address("add")), 100 + i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_undefined_symbols_lists_calls_not_intrinsics() -> None:
    assert undefined_symbols(TANH_IR) == {"tanhf"}
    assert undefined_symbols(ADD_IR) == set()
    with pytest.raises(CompileError):
        undefined_symbols("this is not IR")


# ---------------------------------------------------------------------------
# Code generation and export


def test_explicit_vector_uses_wide_registers(host: Target) -> None:
    if host.vector_bits < 256:
        pytest.skip("host CPU has no 256-bit vectors")
    assembly = compile_ir(VEC8_IR, host).assembly()
    assert "ymm" in assembly or "zmm" in assembly


def test_target_features_reach_the_code_generator() -> None:
    # Compiled only, never called: the host need not have these CPUs.
    sse = compile_ir(VEC8_IR, Target.parse("llvm -mcpu=x86-64 -mattr=+sse2")).assembly()
    assert "xmm" in sse and "ymm" not in sse
    avx512 = Target.parse("llvm -mcpu=skylake-avx512 -mattr=+avx2,+avx512f,+avx512vl")
    assert "zmm" in compile_ir(VEC16_IR, avx512).assembly()


def test_object_links_into_a_shared_library(host: Target, tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to link with")
    module = compile_ir(TANH_IR + ADD_IR, host)
    obj = write_object(module, tmp_path / "kernel.o")
    assert obj.read_bytes()[:4] == b"\x7fELF"
    so = link_shared_library(obj, tmp_path / "libkernel.so")
    library = ctypes.CDLL(str(so))
    add = library.add
    add.restype = ctypes.c_int32
    add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    _check_add(add, 1003)
    x = np.linspace(-1, 1, 17, dtype=np.float32)
    out = np.full_like(x, np.nan)
    library.tanh_kernel(ctypes.c_void_p(_ptr(x)), ctypes.c_void_p(_ptr(out)), ctypes.c_int64(17))
    np.testing.assert_allclose(out, np.tanh(x) + 2 * x, rtol=1e-6, atol=1e-6)


def test_text_exports(host: Target, tmp_path: Path) -> None:
    module = compile_ir(ADD_IR, host)
    assembly = write_assembly(module, tmp_path / "k.s").read_text()
    assert "add:" in assembly
    optimized = write_llvm_ir(module, tmp_path / "k.ll").read_text()
    assert "target triple" in optimized
    assert undefined_symbols(optimized) == set()  # re-parses
    original = write_llvm_ir(module, tmp_path / "orig.ll", optimized=False).read_text()
    assert original == ADD_IR


def test_link_without_cc_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LinkerNotFoundError, match="no-such-cc"):
        link_shared_library(tmp_path / "k.o", tmp_path / "k.so", cc="no-such-cc")
