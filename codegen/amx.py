"""AMX tile permission: Linux kills a process touching AMX tiles unless it asked first.

The request is `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` (syscall
158 with 0x1023 and 18), once per process. Generated code makes it itself: a
module with AMX intrinsics gets a constructor that asks and records the
answer, and its kernel returns `AMX_DENIED` without touching a tile when the
answer was no — so a kernel run without permission fails with a message, it
does not die of SIGILL. Constructors run when the JIT finalises a module
(`CompiledModule`) and when an exported `.so` is loaded, so the CLI, the
Python API, measurement children and exported libraries are all covered;
`request_amx_permission` is the same request from Python (workers make it at
start-up, before any kernel).
"""

from __future__ import annotations

import ctypes
import functools

from llvmlite import ir as ll

from codegen.emit_expr import I32, I64, PTR

SYS_ARCH_PRCTL = 158
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
AMX_DENIED = -2
"""A kernel's return code when the OS did not permit AMX tiles."""

_GRANTED = "loomtune.amx_granted"


@functools.cache
def request_amx_permission() -> bool:
    """Ask once for this process; True when granted (False on CPUs or kernels without AMX)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(
            ctypes.c_long(SYS_ARCH_PRCTL),
            ctypes.c_long(ARCH_REQ_XCOMP_PERM),
            ctypes.c_long(XFEATURE_XTILEDATA),
        )
    except (OSError, AttributeError):
        return False
    return rc == 0


def amx_granted_flag(module: ll.Module) -> ll.GlobalVariable:
    """The module's permission flag, with the constructor that sets it (made once per module)."""
    existing = module.globals.get(_GRANTED)
    if existing is not None:
        return existing  # type: ignore[return-value]
    flag = ll.GlobalVariable(module, I32, name=_GRANTED)
    flag.linkage = "internal"
    flag.initializer = ll.Constant(I32, 0)
    syscall = module.globals.get("syscall") or ll.Function(
        module, ll.FunctionType(I64, [I64], var_arg=True), name="syscall"
    )
    ctor = ll.Function(module, ll.FunctionType(ll.VoidType(), []), name="loomtune.amx_permit")
    ctor.linkage = "internal"
    b = ll.IRBuilder(ctor.append_basic_block("entry"))
    rc = b.call(
        syscall,
        [
            ll.Constant(I64, SYS_ARCH_PRCTL),
            ll.Constant(I64, ARCH_REQ_XCOMP_PERM),
            ll.Constant(I64, XFEATURE_XTILEDATA),
        ],
    )
    b.store(b.zext(b.icmp_signed("==", rc, ll.Constant(I64, 0)), I32), flag)
    b.ret_void()
    entry_ty = ll.LiteralStructType([I32, PTR, PTR])
    ctors = ll.GlobalVariable(module, ll.ArrayType(entry_ty, 1), name="llvm.global_ctors")
    ctors.linkage = "appending"
    ctors.initializer = ll.Constant(
        ll.ArrayType(entry_ty, 1),
        [ll.Constant(entry_ty, [ll.Constant(I32, 65535), ctor, ll.Constant(PTR, None)])],
    )
    return flag
