"""Math functions in generated code: vectorizable polynomials for float32 exp/tanh/erf.

LLVM's `llvm.exp.*` on a vector becomes one libm call per lane, and tanh has no
intrinsic at all, so float32 exp and tanh are emitted inline as polynomials that
work on scalars and vectors alike (same code, so scalar and vector lanes agree):
- exp: Cephes' expf — range reduction x = n·ln2 + r, a degree-6 polynomial in r,
  scaled by 2^n built from the exponent bits; relative error ~1e-7.
- tanh: the rational minimax approximation used by Eigen (odd degree 13 over even
  degree 6) on x clamped to ±7.9053 (where float32 tanh is ±1); error ~1 ulp.
- erf: Eigen's rational approximation x·P(x²)/Q(x²) (odd degree 13 over even
  degree 8) on x clamped to ±4 (where float32 erf is ±1); relative error
  < 5e-7 over [-10, 10] (GELU's exact form needs it).
NaN inputs give NaN, exp overflows to +inf like numpy. sqrt is `llvm.sqrt`
(a native instruction), rint `llvm.roundeven` (ties to even, as np.rint); log and
float64 functions use intrinsics or libm (float64 tanh and erf: one libm call per lane).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from codegen.emit_expr import type_suffix

if TYPE_CHECKING:
    from codegen.emit_expr import ExpressionEmitter

_EXP_P = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)
_TANH_P = (
    -2.76076847742355e-16,
    2.00018790482477e-13,
    -8.60467152213735e-11,
    5.12229709037114e-08,
    1.48572235717979e-05,
    6.37261928875436e-04,
    4.89352455891786e-03,
)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
_ERF_P = (
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
)
_ERF_Q = (
    -1.45660718464996e-05,
    -2.13374055278905e-04,
    -1.68282697438203e-03,
    -7.37332916720468e-03,
    -1.42647390514189e-02,
)
_CONTRACT = ("contract",)


def _const(t: ll.Type, value: float | int) -> ll.Constant:
    if isinstance(t, ll.VectorType):
        return ll.Constant(t, [value] * t.count)
    return ll.Constant(t, value)


def call(f: ExpressionEmitter, fn: str, dtype: str, x: ll.Value) -> ll.Value:
    t = x.type
    if dtype == "float32" and fn == "exp":
        return _exp_f32(f, x)
    if dtype == "float32" and fn == "tanh":
        return _tanh_f32(f, x)
    if dtype == "float32" and fn == "erf":
        return _erf_f32(f, x)
    if fn == "rint":
        # Ties to even whatever the rounding mode (llvm.rint follows it): vrndscale/roundps.
        intrinsic = f.m.declare(f"llvm.roundeven.{type_suffix(t)}", t, [t])
        return f.builder.call(intrinsic, [x])
    if fn in ("exp", "log", "sqrt"):
        intrinsic = f.m.declare(f"llvm.{fn}.{type_suffix(t)}", t, [t])
        return f.builder.call(intrinsic, [x], fastmath=("contract",))
    # float64 tanh and erf: libm, one call per lane.
    b = f.builder
    scalar = t.element if isinstance(t, ll.VectorType) else t
    libm = f.m.declare(fn, scalar, [scalar])
    if not isinstance(t, ll.VectorType):
        return b.call(libm, [x])
    out: ll.Value = ll.Constant(t, ll.Undefined)
    for lane in range(t.count):
        i = ll.Constant(ll.IntType(32), lane)
        out = b.insert_element(out, b.call(libm, [b.extract_element(x, i)]), i)
    return out


def _poly(f: ExpressionEmitter, x: ll.Value, coeffs: tuple[float, ...]) -> ll.Value:
    b = f.builder
    acc: ll.Value = _const(x.type, coeffs[0])
    for c in coeffs[1:]:
        acc = b.fadd(b.fmul(acc, x, flags=_CONTRACT), _const(x.type, c), flags=_CONTRACT)
    return acc


def _clamp(f: ExpressionEmitter, x: ll.Value, lo: float, hi: float) -> ll.Value:
    b = f.builder
    t = x.type
    x = b.select(b.fcmp_ordered("<", x, _const(t, lo)), _const(t, lo), x)
    return b.select(b.fcmp_ordered(">", x, _const(t, hi)), _const(t, hi), x)


def _exp_f32(f: ExpressionEmitter, x0: ll.Value) -> ll.Value:
    b = f.builder
    t = x0.type
    lanes = t.count if isinstance(t, ll.VectorType) else 1
    i32 = ll.VectorType(ll.IntType(32), lanes) if lanes > 1 else ll.IntType(32)
    x = _clamp(f, x0, -88.3762626647949, 88.3762626647949)
    floor = f.m.declare(f"llvm.floor.{type_suffix(t)}", t, [t])
    # Contracted: the range reduction is three FMAs (as exact as the separate operations
    # or more: Cody-Waite's product is not rounded before the subtraction).
    fx = b.call(
        floor,
        [
            b.fadd(
                b.fmul(x, _const(t, 1.44269504088896341), flags=_CONTRACT),
                _const(t, 0.5),
                flags=_CONTRACT,
            )
        ],
    )
    r = b.fsub(x, b.fmul(fx, _const(t, 0.693359375), flags=_CONTRACT), flags=_CONTRACT)
    r = b.fadd(r, b.fmul(fx, _const(t, 2.12194440e-4), flags=_CONTRACT), flags=_CONTRACT)
    z = b.fmul(r, r)
    y = _poly(f, r, _EXP_P)
    y = b.fadd(b.fadd(b.fmul(y, z, flags=_CONTRACT), r), _const(t, 1.0))
    # 2^n from the bits of fx + 1.5·2^23, whose low mantissa bits hold the integer fx
    # (|fx| <= 128), rather than fptosi: fptosi of NaN is poison in LLVM, so it needed a
    # select to give NaN back, two more vector instructions on every exp (vcmpunordps and
    # vblendvps, 2 µops each on AVX2 Zen). This way a NaN input stays NaN through the
    # ordered clamp, the polynomial and the product, with no select.
    n_bits = b.bitcast(b.fadd(fx, _const(t, 12582912.0)), i32)
    bits = b.shl(b.add(n_bits, _const(i32, 127)), _const(i32, 23))
    result = b.fmul(y, b.bitcast(bits, t))
    return b.select(
        b.fcmp_ordered(">", x0, _const(t, 88.72283935546875)), _const(t, float("inf")), result
    )


def _tanh_f32(f: ExpressionEmitter, x0: ll.Value) -> ll.Value:
    b = f.builder
    x = _clamp(f, x0, -7.90531110763549805, 7.90531110763549805)
    x2 = b.fmul(x, x)
    p = b.fmul(_poly(f, x2, _TANH_P), x)
    q = _poly(f, x2, _TANH_Q)
    return b.fdiv(p, q)  # NaN stays NaN through the ordered clamp: no select


def _erf_f32(f: ExpressionEmitter, x0: ll.Value) -> ll.Value:
    b = f.builder
    x = _clamp(f, x0, -4.0, 4.0)
    x2 = b.fmul(x, x)
    p = b.fmul(_poly(f, x2, _ERF_P), x)
    q = _poly(f, x2, _ERF_Q)
    return b.fdiv(p, q)  # NaN stays NaN through the ordered clamp: no select
