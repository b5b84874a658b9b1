"""Implementations of the tensor intrinsics (`ir.intrinsics`): the LLVM code of each.

An implementation gets the emitter and the call's operands — a pointer to each
operand's first element and its element strides, one per loop of the
intrinsic's description — in the description's order (accumulator first). It
is registered under the intrinsic's name, so users add instructions the way
they add schedule rules:

    @register_implementation("my_dot")
    def _my_dot(f: FunctionEmitter, ops: Sequence[Operand]) -> None: ...

LLVM does not choose these instructions by itself (a vectorised u8 x s8 dot
product becomes ~46 `vpmaddwd`-based instructions, not one `vpdpbusd`), hence
explicit intrinsics. AMX tiles are `x86_amx` values of LLVM's `.internal`
intrinsics, for which LLVM writes the tile configuration (`ldtilecfg`) itself;
a module using them also asks Linux for permission to use the tile data
(`codegen.amx`). LLVM neither forwards a stored tile to a later load nor
carries one around a loop, so within a straight-line run of tile products (a
`TileRegion`: an unrolled nest of nothing else) the emitter keeps the C tiles
in registers, loads each A and B tile once for the products next to each
other, and stores the C tiles once at the end.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from llvmlite import ir as ll

from codegen.emit_expr import I8, I32, I64, PTR, ExpressionEmitter
from ir.errors import IRError
from ir.expr import Const, Var
from ir.intrinsics import get_intrinsic
from ir.node import Node, walk
from ir.program import For, IntrinsicCall, SeqStmt, Stmt

FunctionEmitter = ExpressionEmitter
"""What implementations emit into (`codegen.emit.FunctionEmitter`, which extends it)."""

I16 = ll.IntType(16)


@dataclass(frozen=True)
class Operand:
    """An operand's first element and its element strides per description loop."""

    ptr: ll.Value
    strides: tuple[int, ...]
    name: str
    key: Hashable = None
    """The address as the program spells it (buffer, index, the values of its variables):
    equal keys are the same element within one straight-line region."""


Implementation = Callable[[FunctionEmitter, Sequence[Operand]], None]
IMPLEMENTATIONS: dict[str, Implementation] = {}
AMX_INTRINSICS: set[str] = set()
"""Intrinsics whose code touches AMX tiles: their modules request tile permission."""


class IntrinsicFeatureError(IRError):
    """The target lacks a feature the intrinsic's instruction needs."""


def register_implementation(
    name: str, *, amx: bool = False
) -> Callable[[Implementation], Implementation]:
    def decorate(fn: Implementation) -> Implementation:
        known = IMPLEMENTATIONS.get(name)
        if known is not None and known is not fn:
            raise IRError(f"an implementation of intrinsic {name!r} is already registered")
        IMPLEMENTATIONS[name] = fn
        if amx:
            AMX_INTRINSICS.add(name)
        return fn

    return decorate


def emit_intrinsic(
    f: FunctionEmitter, call: IntrinsicCall, features: frozenset[str] | None
) -> None:
    """Emit `call` into `f`; `features` (the target's, if known) must include the intrinsic's."""
    impl = IMPLEMENTATIONS.get(call.name)
    if impl is None:
        raise IRError(
            f"codegen: no implementation of tensor intrinsic {call.name!r} "
            "(register one with codegen.intrinsics.register_implementation)"
        )
    if features is not None:
        missing = get_intrinsic(call.name).missing_features(features)
        if missing:
            raise IntrinsicFeatureError(
                f"intrinsic {call.name} needs the target feature(s) {', '.join(missing)}, "
                "which the target lacks; tune for this target again"
            )
    if f.vec is not None:
        raise IRError(f"codegen: intrinsic {call.name} inside a vectorized loop")
    ops = [
        Operand(
            f.gep(a.buffer, f.expr(a.indices[0])),
            tuple(int(s[0]) for s in a.steps),
            a.buffer.name,
            _address_key(f, a.buffer, a.indices[0]),
        )
        for a in call.args
    ]
    impl(f, ops)


def _address_key(f: FunctionEmitter, buffer: Node, index: Node) -> Hashable:
    values = []
    for v in sorted({n for n in walk(index) if isinstance(n, Var)}, key=lambda v: v.name):
        value = f.scope.vars.get(v)
        if value is not None:  # a loop's value: a constant when unrolled, else its phi
            values.append((v.name, str(value) if isinstance(value, ll.Constant) else id(value)))
    return (buffer, index, tuple(values))


_LOADED_TILES = 4
"""A and B tiles a region keeps for reuse: a 2 x 2 register tile's two of each."""


@dataclass
class TileRegion:
    """AMX tiles held in registers across a straight-line run of tile products."""

    acc: dict[Hashable, tuple[ll.Value, ll.Value, ll.Value]] = field(default_factory=dict)
    """C tiles by address: (tile, pointer, row stride in bytes), stored at the end."""
    loaded: OrderedDict[Hashable, ll.Value] = field(default_factory=OrderedDict)
    """The last A and B tiles loaded, by address, least recently used first."""

    def load(self, f: FunctionEmitter, op: Operand, stride: ll.Value) -> ll.Value:
        tile = self.loaded.get(op.key)
        if tile is None:
            tile = f.builder.call(_tile_load(f), [_ROWS, _COLSB, op.ptr, stride])
            if len(self.loaded) >= _LOADED_TILES:
                self.loaded.popitem(last=False)
        self.loaded[op.key] = tile
        self.loaded.move_to_end(op.key)
        return tile

    def flush(self, f: FunctionEmitter) -> None:
        """Store every C tile (the end of the region)."""
        for tile, ptr, stride in self.acc.values():
            f.builder.call(_tile_store(f), [_ROWS, _COLSB, ptr, stride, tile])
        self.acc.clear()
        self.loaded.clear()


def tile_products_only(stmt: Node) -> bool:
    """Whether `stmt` is a straight-line run of AMX tile products: unrolled loops of
    constant extent and sequences around them, nothing else (a `TileRegion`)."""
    calls = 0
    for n in walk(stmt):
        if isinstance(n, IntrinsicCall):
            if n.name not in AMX_INTRINSICS:
                return False
            calls += 1
        elif isinstance(n, For):
            if n.kind != "unrolled" or not isinstance(n.extent, Const):
                return False
        elif isinstance(n, SeqStmt):
            continue
        elif isinstance(n, Stmt):
            return False
    return calls > 0


def _expect(name: str, op: Operand, strides: Sequence[int | None]) -> None:
    """Strides an implementation relies on (None: any); tensorize checked them already."""
    if len(op.strides) != len(strides) or any(
        w is not None and w != s for s, w in zip(op.strides, strides)
    ):
        raise IRError(
            f"codegen: intrinsic {name} operand {op.name} has strides {op.strides}, needs {tuple(strides)}"
        )


# ---------------------------------------------------------------------------
# AVX-512 VNNI


@register_implementation("vnni")
def _vnni(f: FunctionEmitter, ops: Sequence[Operand]) -> None:
    """C[16] (s32) += 4 u8 of A (broadcast to every lane) . B[16][4] (s8): one vpdpbusd."""
    c_op, a_op, b_op = ops
    _expect("vnni", c_op, (1, 0))
    _expect("vnni", a_op, (0, 1))
    _expect("vnni", b_op, (4, 1))
    b = f.builder
    v16 = ll.VectorType(I32, 16)
    word = b.load(a_op.ptr, typ=I32, align=1)
    lane0 = b.insert_element(ll.Constant(v16, ll.Undefined), word, ll.Constant(I32, 0))
    a = b.shuffle_vector(lane0, ll.Constant(v16, ll.Undefined), ll.Constant(v16, [0] * 16))
    _vpdpbusd(f, c_op.ptr, b.bitcast(a, _V64), b_op.ptr)


_V64 = ll.VectorType(I8, 64)


def _vpdpbusd(
    f: FunctionEmitter, acc_ptr: ll.Value, unsigned: ll.Value, signed_ptr: ll.Value
) -> None:
    """acc[16] (s32, in memory) += 64 u8 `unsigned` . the 64 s8 at `signed_ptr`, by lanes of 4."""
    b = f.builder
    v16 = ll.VectorType(I32, 16)
    acc = b.load(acc_ptr, typ=v16, align=4)
    w = b.load(signed_ptr, typ=_V64, align=1)
    fn = f.m.declare("llvm.x86.avx512.vpdpbusd.512", v16, [v16, _V64, _V64])
    b.store(b.call(fn, [acc, unsigned, w]), acc_ptr, align=4)


# ---------------------------------------------------------------------------
# Packing copies: one 64-byte row of an interleaved layout


def _pack_rows(f: FunctionEmitter, ops: Sequence[Operand], name: str, bits: int) -> None:
    """P[c * pack + r] = W[r][c] for 16 columns: the `pack` rows of W loaded whole (16
    elements each, their row stride given), concatenated and permuted at once (one
    `vpermb` / `vpermw` where the target has it, else what LLVM picks)."""
    p_op, w_op = ops
    pack = 32 // bits
    _expect(name, p_op, (pack, 1))
    _expect(name, w_op, (1, None))
    b = f.builder
    elem = ll.IntType(bits)
    row = ll.VectorType(elem, 16)
    rows = [
        b.load(
            b.gep(w_op.ptr, [ll.Constant(I64, r * w_op.strides[1])], source_etype=elem),
            typ=row,
            align=1,
        )
        for r in range(pack)
    ]
    while len(rows) > 1:  # concatenate pairwise: [r0 r1 r2 r3]
        width = len(rows[0].type)
        both = ll.Constant(ll.VectorType(I32, 2 * width), list(range(2 * width)))
        rows = [b.shuffle_vector(rows[k], rows[k + 1], both) for k in range(0, len(rows), 2)]
    whole = rows[0]
    mask = [r * 16 + c for c in range(16) for r in range(pack)]
    out = b.shuffle_vector(
        whole,
        ll.Constant(whole.type, ll.Undefined),
        ll.Constant(ll.VectorType(I32, 16 * pack), mask),
    )
    b.store(out, p_op.ptr, align=1)


@register_implementation("pack_int8x4")
def _pack_int8x4(f: FunctionEmitter, ops: Sequence[Operand]) -> None:
    _pack_rows(f, ops, "pack_int8x4", 8)


@register_implementation("pack_bf16x2")
def _pack_bf16x2(f: FunctionEmitter, ops: Sequence[Operand]) -> None:
    _pack_rows(f, ops, "pack_bf16x2", 16)


@register_implementation("colsum_int8x4")
def _colsum_int8x4(f: FunctionEmitter, ops: Sequence[Operand]) -> None:
    """S[16] (s32) += the 4 s8 of each of a packed row's 16 columns: vpdpbusd with ones as
    its unsigned operand, one instruction per 64 bytes."""
    s_op, p_op = ops
    _expect("colsum_int8x4", s_op, (1, 0))
    _expect("colsum_int8x4", p_op, (4, 1))
    _vpdpbusd(f, s_op.ptr, ll.Constant(_V64, [1] * 64), p_op.ptr)


# ---------------------------------------------------------------------------
# AVX-512 BF16


class _NamedType(ll.Type):
    """An LLVM type llvmlite has no class for, spelled by its name (`bfloat`, `x86_amx`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _to_string(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NamedType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


_BFLOAT = _NamedType("bfloat")
"""Only the dpbf16ps operands; values of IR bfloat16 are i16 everywhere else
(`emit_expr.BFLOAT16_BITS`)."""


@register_implementation("avx512_bf16")
def _avx512_bf16(f: FunctionEmitter, ops: Sequence[Operand]) -> None:
    """C[16] (f32) += 2 bf16 of A (broadcast to every lane) . B[16][2] (bf16): one vdpbf16ps.

    LLVM 17+ types the operands `<32 x bfloat>`; A's pair is loaded as one i32 and
    broadcast, as vnni's four bytes are."""
    c_op, a_op, b_op = ops
    _expect("avx512_bf16", c_op, (1, 0))
    _expect("avx512_bf16", a_op, (0, 1))
    _expect("avx512_bf16", b_op, (2, 1))
    b = f.builder
    v16 = ll.VectorType(ll.FloatType(), 16)
    i16 = ll.VectorType(I32, 16)
    v32 = ll.VectorType(_BFLOAT, 32)
    acc = b.load(c_op.ptr, typ=v16, align=4)
    pair = b.load(a_op.ptr, typ=I32, align=2)
    lane0 = b.insert_element(ll.Constant(i16, ll.Undefined), pair, ll.Constant(I32, 0))
    a = b.shuffle_vector(lane0, ll.Constant(i16, ll.Undefined), ll.Constant(i16, [0] * 16))
    w = b.bitcast(b.load(b_op.ptr, typ=ll.VectorType(I16, 32), align=2), v32)
    fn = f.m.declare("llvm.x86.avx512bf16.dpbf16ps.512", v16, [v16, v32, v32])
    out = b.call(fn, [acc, b.bitcast(a, v32), w])
    b.store(out, c_op.ptr, align=4)


# ---------------------------------------------------------------------------
# AMX


AMX = _NamedType("x86_amx")
"""A tile register value."""


_ROWS = ll.Constant(I16, 16)
_COLSB = ll.Constant(I16, 64)


def _tile_load(f: FunctionEmitter) -> ll.Function:
    return f.m.declare("llvm.x86.tileloadd64.internal", AMX, [I16, I16, PTR, I64])


def _tile_store(f: FunctionEmitter) -> ll.Function:
    return f.m.declare("llvm.x86.tilestored64.internal", ll.VoidType(), [I16, I16, PTR, I64, AMX])


def _amx_tile_product(f: FunctionEmitter, ops: Sequence[Operand], instr: str, size: int) -> None:
    """C (16 x 16 x 4 bytes) += A (16 rows x 64 bytes) . B (16 rows x 64 bytes, VNNI layout),
    each tile loaded with its row stride in bytes; `size` is the element size of A and B.
    Inside a `TileRegion` C stays in its register and A and B are loaded once."""
    c_op, a_op, b_op = ops
    pack = 4 // size
    _expect(instr, c_op, (None, 1, 0, 0))
    _expect(instr, a_op, (None, 0, pack, 1))
    _expect(instr, b_op, (0, pack, None, 1))
    b = f.builder
    dot = f.m.declare(f"llvm.x86.{instr}.internal", AMX, [I16, I16, I16, AMX, AMX, AMX])
    c_stride = ll.Constant(I64, c_op.strides[0] * 4)
    a_stride = ll.Constant(I64, a_op.strides[0] * size)
    b_stride = ll.Constant(I64, b_op.strides[2] * size)
    region: TileRegion | None = getattr(f, "tiles", None)
    if region is None:
        load = _tile_load(f)
        c = b.call(load, [_ROWS, _COLSB, c_op.ptr, c_stride])
        a = b.call(load, [_ROWS, _COLSB, a_op.ptr, a_stride])
        w = b.call(load, [_ROWS, _COLSB, b_op.ptr, b_stride])
        out = b.call(dot, [_ROWS, _COLSB, _COLSB, c, a, w])
        b.call(_tile_store(f), [_ROWS, _COLSB, c_op.ptr, c_stride, out])
        return
    held = region.acc.get(c_op.key)
    c = held[0] if held else b.call(_tile_load(f), [_ROWS, _COLSB, c_op.ptr, c_stride])
    a = region.load(f, a_op, a_stride)
    w = region.load(f, b_op, b_stride)
    out = b.call(dot, [_ROWS, _COLSB, _COLSB, c, a, w])
    region.acc[c_op.key] = (out, c_op.ptr, c_stride)


@register_implementation("amx_int8", amx=True)
def _amx_int8(f: FunctionEmitter, ops: Sequence[Operand]) -> None:
    _amx_tile_product(f, ops, "tdpbusd", 1)


@register_implementation("amx_bf16", amx=True)
def _amx_bf16(f: FunctionEmitter, ops: Sequence[Operand]) -> None:
    _amx_tile_product(f, ops, "tdpbf16ps", 2)
