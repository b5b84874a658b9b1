"""A module with tensor instructions is vectorized by LLVM at the target's full width.

LLVM prefers 256-bit vectors on Intel's AVX-512 CPUs where it vectorizes by itself;
the copies that pack an int8 weight into AMX's and VNNI's layouts are scalar byte
copies its SLP vectorizer turns into byte permutes, twice as many at 256 bits.
Compiled for Sapphire Rapids (anywhere: the assembly is read, nothing runs).
"""

from __future__ import annotations

import re

from codegen.jit import _feature_string, compile_ir, wide_vectors
from ir.target import Target

SPR = Target.parse("llvm -mcpu=sapphirerapids -mattr=+avx2,+avx512f,+avx512bw,+avx512vnni")
AVX2 = Target.parse("llvm -mcpu=haswell -mattr=+avx2,+fma")

VNNI_CALL = "@llvm.x86.avx512.vpdpbusd.512"


def _module(with_vnni: bool) -> str:
    """A byte-add loop LLVM vectorizes by itself, and (maybe) a VNNI call beside it."""
    vnni = (
        f"declare <16 x i32> {VNNI_CALL}(<16 x i32>, <16 x i32>, <16 x i32>)\n"
        "define <16 x i32> @dot(<16 x i32> %c, <16 x i32> %a, <16 x i32> %b) {\n"
        f"  %r = call <16 x i32> {VNNI_CALL}(<16 x i32> %c, <16 x i32> %a, <16 x i32> %b)\n"
        "  ret <16 x i32> %r\n}\n"
        if with_vnni
        else ""
    )
    return (
        vnni
        + """define void @add(ptr noalias %a, ptr noalias %b, ptr noalias %c) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %pa = getelementptr i8, ptr %a, i64 %i
  %pb = getelementptr i8, ptr %b, i64 %i
  %pc = getelementptr i8, ptr %c, i64 %i
  %x = load i8, ptr %pa
  %y = load i8, ptr %pb
  %s = add i8 %x, %y
  store i8 %s, ptr %pc
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, 4096
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""
    )


def _widest(asm: str) -> str:
    adds = re.findall(r"vpaddb\s[^\n]*", asm)
    assert adds, "the byte loop is not vectorized"
    return (
        "zmm"
        if any("zmm" in a for a in adds)
        else "ymm"
        if any("ymm" in a for a in adds)
        else "xmm"
    )


def test_only_modules_with_tensor_instructions_drop_the_256_bit_preference() -> None:
    assert wide_vectors("declare x86_amx @llvm.x86.tdpbusd.internal(i16, i16, i16)")
    assert wide_vectors(_module(with_vnni=True))
    assert not wide_vectors(_module(with_vnni=False))
    assert "-prefer-256-bit" in _feature_string(SPR, wide=True).split(",")
    assert "-prefer-256-bit" not in _feature_string(SPR).split(",")
    assert "-prefer-256-bit" not in _feature_string(AVX2, wide=True).split(",")


def test_llvm_vectorizes_a_tensorized_module_at_512_bits_and_others_at_256() -> None:
    assert _widest(compile_ir(_module(with_vnni=True), SPR).assembly()) == "zmm"
    assert _widest(compile_ir(_module(with_vnni=False), SPR).assembly()) == "ymm"
