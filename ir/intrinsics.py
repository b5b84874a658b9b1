"""Tensor intrinsics: what an instruction computes, described in the DSL, by name.

A tensor intrinsic (TensorIR's term) is a pair: a *description* — a small
compute whose loop nest, dtypes and operand layouts `tensorize` matches
against a scheduled block — and an *implementation*, the LLVM code that runs
it (`codegen.intrinsics`, keyed by the same name), plus the target features
the instruction needs. The description's operands are its output (the
accumulator: read and written) and then its inputs, in the workload's order;
its loops are the reference's loops in build order (spatial, then reduction).

Layouts: an operand's description shape is row-major, and a candidate must
access it with the same element strides — except the row stride of the
operands in `free_rows` (AMX tiles: any row stride, passed to the
instruction), which may be anything at least as wide as a row. `packs` gives,
for an operand a workload reads as a plain [K, N] matrix, the index map
(`transform_layout`) into the layout the instruction wants and its inverse
(so the packing copy can iterate over the packed layout: contiguous stores).

    register_intrinsic(TensorIntrinsic("my_dot", build_my_dot, features=("avx512vnni",)))

then `sch.tensorize(block, "my_dot")` and an implementation registered under
"my_dot" in `codegen.intrinsics`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ir import compute as te
from ir.build import build_program
from ir.compute import Workload
from ir.errors import LoomtuneError
from ir.expr import cast
from ir.node import walk
from ir.program import BlockRealize, For, Program


class IntrinsicError(LoomtuneError):
    """An unknown intrinsic name, or one registered twice."""


@dataclass(frozen=True)
class TensorIntrinsic:
    """A registered tensor instruction: its description and the features it needs."""

    name: str
    build: Callable[[], Workload]
    features: tuple[str, ...]
    free_rows: frozenset[str] = frozenset()
    packs: tuple[tuple[str, Callable[..., tuple], Callable[..., tuple]], ...] = ()
    doc: str = ""
    max_outputs: int | None = None
    """Most outputs a register tile keeps live at once (None: the tiling rule's default).
    AMX has 8 tile registers: 4 C tiles beside 2 A and 2 B tiles."""
    unroll_reduction: bool = False
    """The accumulators stay in registers only within straight-line code (AMX tiles, which
    LLVM neither forwards from a store nor carries around a loop), so the tiling rule
    unrolls the inner reduction tile around the register tile."""
    pack_sum: str | None = None
    """The intrinsic that sums the columns of one packed row (dense_int8's column sums of
    W, read from the packed copy: `read_through`); None: the sums read the plain matrix."""
    pack_copy: str | None = None
    """The intrinsic that writes one row of the packed layout (`packs`) from the rows of
    the plain matrix, for the tiling rule's packing copy; None: the copy stays loops."""
    _program: list[Program] = field(default_factory=list, compare=False, repr=False)

    @property
    def program(self) -> Program:
        """The description as a naive loop nest (built once)."""
        if not self._program:
            self._program.append(build_program(self.build()))
        return self._program[0]

    @property
    def extents(self) -> tuple[int, ...]:
        """The description's loop extents, outermost first (it is one naive nest)."""
        return tuple(int(n.extent.value) for n in walk(self.program.body) if isinstance(n, For))  # type: ignore[attr-defined]

    @property
    def ops_per_call(self) -> int:
        """Multiply-adds times two: the operations one call performs (0 for a copy)."""
        block = next(n for n in walk(self.program.body) if isinstance(n, BlockRealize)).block
        if not block.is_reduction:
            return 0
        return 2 * math.prod(self.extents)

    def missing_features(self, features: tuple[str, ...] | frozenset[str]) -> list[str]:
        """The required features `features` (names without '+') lacks."""
        have = {f.lstrip("+") for f in features}
        return [f for f in self.features if f not in have]


def _only_block(program: Program) -> str:
    blocks = [n for n in walk(program.body) if isinstance(n, BlockRealize)]
    if len(blocks) != 1:
        raise IntrinsicError(f"intrinsic description {program.name} must be one compute")
    return blocks[0].block.name


INTRINSICS: dict[str, TensorIntrinsic] = {}


def register_intrinsic(intrinsic: TensorIntrinsic) -> TensorIntrinsic:
    known = INTRINSICS.get(intrinsic.name)
    if known is not None and known is not intrinsic:
        raise IntrinsicError(f"tensor intrinsic {intrinsic.name!r} is already registered")
    _only_block(intrinsic.program)  # a description that does not build fails here, not later
    INTRINSICS[intrinsic.name] = intrinsic
    return intrinsic


def get_intrinsic(name: str) -> TensorIntrinsic:
    try:
        return INTRINSICS[name]
    except KeyError:
        raise IntrinsicError(
            f"unknown tensor intrinsic {name!r}; known: {', '.join(INTRINSICS)}"
        ) from None


def auxiliary_intrinsics() -> frozenset[str]:
    """The intrinsics that serve a product (its `pack_copy` and `pack_sum`): a kernel that
    calls only these is not tensorized."""
    return frozenset(
        name for i in INTRINSICS.values() for name in (i.pack_copy, i.pack_sum) if name
    )


# ---------------------------------------------------------------------------
# The built-in intrinsics


def _vnni() -> Workload:
    """vpdpbusd: 16 int32 lanes, each += the dot product of 4 u8 (broadcast) and 4 s8."""
    A = te.placeholder((4,), "uint8", "A")
    B = te.placeholder((16, 4), "int8", "B")
    k = te.reduce_axis(4, "k")
    C = te.compute(
        (16,), lambda j: te.sum(cast("int32", A[k]) * cast("int32", B[j, k]), axis=k), "C"
    )
    return Workload("vnni", (A, B), (C,))


def _avx512_bf16() -> Workload:
    """vdpbf16ps: 16 float32 lanes, each += the dot product of 2 bf16 (broadcast) and 2 bf16."""
    A = te.placeholder((2,), "bfloat16", "A")
    B = te.placeholder((16, 2), "bfloat16", "B")
    k = te.reduce_axis(2, "k")
    C = te.compute(
        (16,), lambda j: te.sum(cast("float32", A[k]) * cast("float32", B[j, k]), axis=k), "C"
    )
    return Workload("avx512_bf16", (A, B), (C,))


def _amx(dtype_a: str, dtype_b: str, acc: str, pack: int) -> Callable[[], Workload]:
    """An AMX tile product: C[16,16] += A[16, 16·pack] · B, B in the VNNI layout
    B[k // pack, n·pack + k % pack] (16 rows of 64 bytes), as tdpbusd/tdpbf16ps want."""

    def build() -> Workload:
        A = te.placeholder((16, 16 * pack), dtype_a, "A")
        B = te.placeholder((16, 16 * pack), dtype_b, "B")
        ko = te.reduce_axis(16, "ko")
        ki = te.reduce_axis(pack, "ki")
        C = te.compute(
            (16, 16),
            lambda i, j: te.sum(
                cast(acc, A[i, ko * pack + ki]) * cast(acc, B[ko, j * pack + ki]), axis=[ko, ki]
            ),
            "C",
        )
        return Workload(f"amx_{dtype_a}", (A, B), (C,))

    return build


def _pack_rows(dtype: str, pack: int) -> Callable[[], Workload]:
    """One 64-byte row of an interleaved layout: P[c, r] = W[r, c] for 16 columns of
    `pack` rows of a plain matrix (vnni's and AMX's int8 [.., 16, 4], bf16's [.., 16, 2]).

    LLVM's SLP vectorizer turns the unrolled byte copy into 8 loads, 6 byte permutes and
    2 stores per row at 256 bits where one concatenation of the rows and one permute do."""

    def build() -> Workload:
        W = te.placeholder((pack, 16), dtype, "W")
        P = te.compute((16, pack), lambda c, r: W[r, c], "P")
        return Workload(f"pack_{dtype}", (W,), (P,))

    return build


PACK_INT8X4 = register_intrinsic(
    TensorIntrinsic(
        "pack_int8x4",
        _pack_rows("int8", 4),
        features=("avx512bw",),
        free_rows=frozenset({"W"}),
        doc="a packed row: 16 columns x 4 rows of an int8 matrix, interleaved (64 bytes)",
    )
)
PACK_BF16X2 = register_intrinsic(
    TensorIntrinsic(
        "pack_bf16x2",
        _pack_rows("bfloat16", 2),
        features=("avx512bw",),
        free_rows=frozenset({"W"}),
        doc="a packed row: 16 columns x 2 rows of a bfloat16 matrix, interleaved (64 bytes)",
    )
)


def _colsum_int8x4() -> Workload:
    """S[c] (s32) += the 4 s8 of column c of a packed row: one vpdpbusd against ones."""
    P = te.placeholder((16, 4), "int8", "P")
    r = te.reduce_axis(4, "r")
    S = te.compute((16,), lambda c: te.sum(cast("int32", P[c, r]), axis=r), "S")
    return Workload("colsum_int8x4", (P,), (S,))


COLSUM_INT8X4 = register_intrinsic(
    TensorIntrinsic(
        "colsum_int8x4",
        _colsum_int8x4,
        features=("avx512vnni",),
        doc="column sums of a packed int8 row: 16 int32 lanes += 4 s8 each (vpdpbusd by ones)",
    )
)
VNNI = register_intrinsic(
    TensorIntrinsic(
        "vnni",
        _vnni,
        features=("avx512vnni",),
        packs=(
            (
                "B",
                lambda k, n: (n // 16, k // 4, n % 16, k % 4),
                lambda p, q, r, c: (q * 4 + c, p * 16 + r),
            ),
        ),
        pack_sum="colsum_int8x4",
        pack_copy="pack_int8x4",
        doc="AVX-512 VNNI vpdpbusd: u8 x s8 -> s32, 16 lanes x 4; B packed [N/16][K/4][16][4]",
    )
)
AVX512_BF16 = register_intrinsic(
    TensorIntrinsic(
        "avx512_bf16",
        _avx512_bf16,
        features=("avx512bf16",),
        packs=(
            (
                "B",
                lambda k, n: (n // 16, k // 2, n % 16, k % 2),
                lambda p, q, r, c: (q * 2 + c, p * 16 + r),
            ),
        ),
        pack_copy="pack_bf16x2",
        doc="AVX-512 BF16 vdpbf16ps: bf16 x bf16 -> f32, 16 lanes x 2; B packed [N/16][K/2][16][2]",
    )
)
AMX_INT8 = register_intrinsic(
    TensorIntrinsic(
        "amx_int8",
        _amx("uint8", "int8", "int32", 4),
        features=("amx-tile", "amx-int8"),
        free_rows=frozenset({"A", "B", "C"}),
        max_outputs=4,
        unroll_reduction=True,
        packs=(
            (
                "B",
                lambda k, n: (k // 64, n // 16, k // 4 % 16, n % 16 * 4 + k % 4),
                lambda a, b, c, d: (a * 64 + c * 4 + d % 4, b * 16 + d // 4),
            ),
        ),
        pack_sum="colsum_int8x4",
        pack_copy="pack_int8x4",
        doc="AMX tdpbusd: a 16x16 int32 tile += 16x64 u8 . 64x16 s8 (B in VNNI layout)",
    )
)
AMX_BF16 = register_intrinsic(
    TensorIntrinsic(
        "amx_bf16",
        _amx("bfloat16", "bfloat16", "float32", 2),
        features=("amx-tile", "amx-bf16"),
        free_rows=frozenset({"A", "B", "C"}),
        max_outputs=4,
        unroll_reduction=True,
        packs=(
            (
                "B",
                lambda k, n: (k // 32, n // 16, k // 2 % 16, n % 16 * 2 + k % 2),
                lambda a, b, c, d: (a * 32 + c * 2 + d % 2, b * 16 + d // 2),
            ),
        ),
        pack_copy="pack_bf16x2",
        doc="AMX tdpbf16ps: a 16x16 float32 tile += 16x32 bf16 . 32x16 bf16 (B in pairs)",
    )
)
