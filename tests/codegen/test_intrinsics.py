"""Tensor intrinsics in machine code: vpdpbusd, AMX tiles (compiled anywhere, run where the
CPU has them), the AMX permission guard, and refusals for targets without the feature."""

from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from codegen.amx import AMX_DENIED, request_amx_permission
from codegen.emit import emit_module
from codegen.export import export_kernel
from codegen.host import host_target
from codegen.intrinsics import IntrinsicFeatureError
from codegen.jit import compile_object
from codegen.kernel import KernelRuntimeError, compile_program
from ir.intrinsics import INTRINSICS
from ir.lower import lower
from ir.program import Program
from ir.schedule import Schedule
from ir.target import Target, parse_short
from ir.task import library_task
from workers.verify import mismatch

AMX_FEATURES = ("+amx-tile", "+amx-int8")
SAPPHIRE = Target.parse("llvm -mcpu=sapphirerapids -mattr=+avx512f,+avx512vnni,+amx-tile,+amx-int8")
HOST = host_target(1)


def amx_matmul(m: int = 32, n: int = 32, k: int = 128) -> Program:
    """matmul_int8 as 16 x 16 tiles of C, K in steps of 64, B packed in AMX's VNNI layout."""
    sch = Schedule(library_task("matmul_int8", {"m": m, "n": n, "k": k}).program)
    i, j, r = sch.get_loops("C")
    i0, i1 = sch.split(i, [None, 16])
    j0, j1 = sch.split(j, [None, 16])
    r0, r1, r2 = sch.split(r, [None, 16, 4])
    sch.reorder(i0, j0, r0, i1, j1, r1, r2)
    sch.transform_layout("C", "B", INTRINSICS["amx_int8"].packs[0][1])
    sch.tensorize(i1, "amx_int8", features=[f[1:] for f in AMX_FEATURES])
    return sch.program


def vnni_matmul(m: int = 8, n: int = 32, k: int = 16) -> Program:
    sch = Schedule(library_task("matmul_int8", {"m": m, "n": n, "k": k}).program)
    i, j, r = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    r0, r1 = sch.split(r, [None, 4])
    sch.reorder(i, j0, r0, j1, r1)
    sch.transform_layout("C", "B", INTRINSICS["vnni"].packs[0][1])
    sch.tensorize(j1, "vnni")
    return sch.program


def assembly(program: Program, target: Target) -> str:
    """Compiled for `target` without running (no JIT): its assembly via an object's IR."""
    from codegen.jit import _optimized, _Options

    text = emit_module(lower(program), "kernel", features=target.features)
    compile_object(text, target)  # the export path compiles too
    module, machine, _ = _optimized(text, target, _Options(), frozenset())
    return str(machine.emit_assembly(module))


def test_amx_kernel_compiles_to_tile_instructions_anywhere() -> None:
    asm = assembly(amx_matmul(), SAPPHIRE)
    for instruction in ("tdpbusd", "tileloadd", "tilestored", "ldtilecfg"):
        assert instruction in asm, instruction
    # the module asks for tile permission itself (a constructor calling arch_prctl)
    text = emit_module(lower(amx_matmul()), "kernel", features=SAPPHIRE.features)
    assert "llvm.global_ctors" in text and "i64 158, i64 4131, i64 18" in text


def test_amx_kernel_runs_exactly_where_the_cpu_has_amx() -> None:
    if not (HOST.has_feature("amx-tile") and HOST.has_feature("amx-int8")):
        pytest.skip(f"not run: this CPU ({HOST.cpu}) has no AMX; compiled only (test above)")
    assert request_amx_permission()
    task = library_task("matmul_int8", {"m": 32, "n": 32, "k": 128})
    kernel = compile_program(amx_matmul(), HOST)
    a, b = task.make_inputs()
    c = np.zeros((32, 32), np.int32)
    kernel(a, b, c)
    np.testing.assert_array_equal(c, task.reference([a, b])[0])


def amx_register_tile(m: int = 32, n: int = 32, k: int = 256) -> Program:
    """A 2 x 2 tile of C over 4 steps of K, all unrolled: one straight-line `TileRegion`."""
    sch = Schedule(library_task("matmul_int8", {"m": m, "n": n, "k": k}).program)
    i, j, r = sch.get_loops("C")
    i0, i2, i1 = sch.split(i, [None, 2, 16])
    j0, j2, j1 = sch.split(j, [None, 2, 16])
    r0, rk, r1, r2 = sch.split(r, [None, 4, 16, 4])
    sch.reorder(i0, j0, r0, rk, i2, j2, i1, j1, r1, r2)
    sch.transform_layout("C", "B", INTRINSICS["amx_int8"].packs[0][1])
    tile = sch.tensorize(sch.blockize(i1), "amx_int8", features=[f[1:] for f in AMX_FEATURES])
    for loop in (rk, i2, j2):
        sch.unroll(loop)
    sch.decompose_reduction(tile, r0)  # the init before the products, as the space leaves it
    return sch.program


def test_a_register_tile_of_amx_products_keeps_its_c_tiles_in_registers() -> None:
    """16 products of a 2 x 2 tile over 4 K steps: C loaded and stored once per tile, each A
    and B tile loaded once per step (4 + 4 x 4 loads, 4 stores), compiled for Sapphire Rapids
    anywhere; run where the CPU has AMX."""
    asm = assembly(amx_register_tile(), SAPPHIRE)
    count = {op: asm.count(op) for op in ("tdpbusd", "tileloadd", "tilestored")}
    assert count == {"tdpbusd": 16, "tileloadd": 20, "tilestored": 4}
    if not (HOST.has_feature("amx-tile") and HOST.has_feature("amx-int8")):
        pytest.skip(f"not run: this CPU ({HOST.cpu}) has no AMX; assembly checked only")
    task = library_task("matmul_int8", {"m": 32, "n": 32, "k": 256})
    a, b = task.make_inputs()
    c = np.zeros((32, 32), np.int32)
    compile_program(amx_register_tile(), HOST)(a, b, c)
    np.testing.assert_array_equal(c, task.reference([a, b])[0])


def test_amx_kernel_without_permission_fails_with_a_message() -> None:
    """Where the OS refuses AMX (this CPU has none), the kernel returns before its first tile
    instruction: an error naming AMX, not SIGILL."""
    if HOST.has_feature("amx-tile"):
        pytest.skip("this CPU has AMX: permission is granted, nothing to refuse")
    assert request_amx_permission() is False
    target = Target(HOST.cpu, (*HOST.features, *AMX_FEATURES), 1)
    kernel = compile_program(amx_matmul(), target)
    task = library_task("matmul_int8", {"m": 32, "n": 32, "k": 128})
    with pytest.raises(
        KernelRuntimeError, match="AMX tiles, which the operating system did not permit"
    ):
        kernel(*task.make_inputs(), np.zeros((32, 32), np.int32))


def test_vnni_kernel_uses_vpdpbusd() -> None:
    znver4 = Target.parse("llvm -mcpu=znver4 -mattr=+avx512f,+avx512bw,+avx512vnni")
    asm = assembly(vnni_matmul(), znver4)
    assert "vpdpbusd" in asm and "vpmaddwd" not in asm


def bf16_matmul(m: int = 8, n: int = 32, k: int = 16) -> Program:
    sch = Schedule(library_task("matmul_bf16", {"m": m, "n": n, "k": k}).program)
    i, j, r = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    r0, r1 = sch.split(r, [None, 2])
    sch.reorder(i, j0, r0, j1, r1)
    sch.transform_layout("C", "B", INTRINSICS["avx512_bf16"].packs[0][1])
    sch.tensorize(j1, "avx512_bf16")
    return sch.program


def test_avx512_bf16_kernel_uses_vdpbf16ps_on_zmm() -> None:
    """Compiled for Cooper Lake anywhere: every product is one vdpbf16ps on zmm registers
    (no scalar bf16 widening, no float32 FMA); run only where the CPU has AVX-512 BF16."""
    asm = assembly(bf16_matmul(), parse_short("cooperlake"))
    dots = [line.split() for line in asm.splitlines() if "vdpbf16ps" in line]
    assert len(dots) == 8 * 2 * 8  # m x n/16 x k/2, unrolled by LLVM
    assert all(d[-1].startswith("%zmm") for d in dots)
    assert "vfmadd" not in asm
    if not HOST.has_feature("avx512bf16"):
        pytest.skip(f"not run: this CPU ({HOST.cpu}) has no AVX-512 BF16; assembly checked only")
    task = library_task("matmul_bf16", {"m": 8, "n": 32, "k": 16})
    a, b = task.make_inputs()
    c = np.full((8, 32), np.nan, np.float32)
    compile_program(bf16_matmul(), HOST)(a, b, c)
    assert mismatch(c, task.reference([a, b])[0], 16) is None


def test_codegen_refuses_an_intrinsic_the_target_lacks() -> None:
    with pytest.raises(IntrinsicFeatureError, match=r"needs the target feature\(s\) avx512vnni"):
        emit_module(lower(vnni_matmul()), "kernel", features=("+avx", "+avx2", "+fma"))
    with pytest.raises(IntrinsicFeatureError, match="amx-tile, amx-int8"):
        emit_module(lower(amx_matmul()), "kernel", features=("+avx512f",))
    skylake = parse_short("skylake-avx512")
    assert skylake is not None and not skylake.has_feature("avx512bf16")
    with pytest.raises(IntrinsicFeatureError, match=r"needs the target feature\(s\) avx512bf16"):
        emit_module(lower(bf16_matmul()), "kernel", features=skylake.features)


def test_amx_bf16_kernel_compiles_to_tdpbf16ps() -> None:
    sch = Schedule(library_task("matmul_bf16", {"m": 16, "n": 16, "k": 64}).program)
    i, j, r = sch.get_loops("C")
    r0, r1, r2 = sch.split(r, [None, 16, 2])
    sch.reorder(r0, i, j, r1, r2)
    sch.transform_layout("C", "B", INTRINSICS["amx_bf16"].packs[0][1])
    sch.tensorize(i, "amx_bf16", features=["amx-tile", "amx-bf16"])
    target = Target.parse("llvm -mcpu=sapphirerapids -mattr=+avx512f,+amx-tile,+amx-bf16")
    asm = assembly(sch.program, target)
    assert "tdpbf16ps" in asm and "tileloadd" in asm


def test_exported_amx_library_asks_for_tiles_before_its_first_tile_instruction(
    tmp_path: Path,
) -> None:
    """The .so's constructor makes the request; here (no AMX) the call returns AMX_DENIED
    instead of dying, and on an AMX machine it computes the product."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler driver (cc) to link a shared library")
    program = amx_matmul()
    target = HOST if HOST.has_feature("amx-tile") else SAPPHIRE
    export_kernel(program, target, symbol="amx_mm", fmt="so", output=tmp_path / "amx.so")
    lib = ctypes.CDLL(str(tmp_path / "amx.so"))
    task = library_task("matmul_int8", {"m": 32, "n": 32, "k": 128})
    a, b = task.make_inputs()
    c = np.zeros((32, 32), np.int32)
    rc = lib.amx_mm(*(ctypes.c_void_p(x.ctypes.data) for x in (a, b, c)))
    if HOST.has_feature("amx-tile"):
        assert rc == 0
        np.testing.assert_array_equal(c, task.reference([a, b])[0])
    else:
        assert rc == AMX_DENIED and not c.any()


def packed_by_rows(op: str, intrinsic: str, m: int = 8, n: int = 48, k: int = 32) -> Program:
    """`op` on `intrinsic` with its packing copy written a packed row at a time
    (`pack_int8x4` / `pack_bf16x2`): W's rows n elements apart, 16 columns of them per row."""
    intrin = INTRINSICS[intrinsic]
    pack = INTRINSICS[intrin.pack_copy].extents[1]
    sch = Schedule(library_task(op, {"m": m, "n": n, "k": k}).program)
    i, j, r = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    r0, r1 = sch.split(r, [None, pack])
    sch.reorder(i, j0, r0, j1, r1)
    copy = sch.transform_layout("C", "B", intrin.packs[0][1], intrin.packs[0][2])
    sch.tensorize(j1, intrinsic)
    columns = sch.get_loops(copy)[-2]
    sch.tensorize(sch.blockize(columns), intrin.pack_copy)
    return sch.program


@pytest.mark.parametrize(
    ("op", "intrinsic", "cpu", "instruction", "row"),
    [
        ("matmul_int8", "vnni", "znver4", "vpdpbusd", "<64 x i8>"),
        ("matmul_bf16", "avx512_bf16", "cooperlake", "vdpbf16ps", "<32 x i16>"),
    ],
)
def test_a_packed_row_is_written_whole(
    op: str, intrinsic: str, cpu: str, instruction: str, row: str
) -> None:
    """The packing copy stores each packed row as one 64-byte vector by construction (not
    scalar elements LLVM's vectorizer may or may not gather). Compiled anywhere; run where
    the CPU has the product's instruction, whose result then checks the layout."""
    program = packed_by_rows(op, intrinsic)
    target = parse_short(cpu)
    text = emit_module(lower(program), "kernel", features=target.features)
    element = row.split()[-1].rstrip(">")
    assert f"store {row}" in text
    assert not re.search(rf"store {element} ", text)
    assert instruction in assembly(program, target)
    if not HOST.has_feature(INTRINSICS[intrinsic].features[0]):
        pytest.skip(f"not run: this CPU ({HOST.cpu}) has no {intrinsic}; compiled only")
    task = library_task(op, {"m": 8, "n": 48, "k": 32})
    a, b = task.make_inputs()
    c = np.full((8, 48), -1, task.output_specs()[0][1])
    compile_program(program, HOST)(a, b, c)
    assert mismatch(c, task.reference([a, b])[0], 32) is None
