"""Tests for the workload library: registry, parameters, byte limits, references, evaluator."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping

import numpy as np
import pytest
from param_sets import PARAM_SETS

from ir import dtype as dt
from ir.errors import BufferTooLargeError, WorkloadError
from ir.library import (
    DEFAULT_MAX_BYTES,
    OPS,
    get_op,
    instantiate,
    make_inputs,
    max_bytes,
    reduction_length,
    resolve_params,
    workload_bytes,
)

# DESIGN.md's table, in order, with each operator's parameter names.
DESIGN_PARAMS: dict[str, tuple[str, ...]] = {
    "matmul": ("m", "n", "k"),
    "batch_matmul": ("b", "m", "n", "k"),
    "dense": ("m", "n", "k", "bias", "relu"),
    "conv2d_nhwc": ("n", "h", "w", "ci", "co", "kh", "kw", "stride", "pad", "dilation"),
    "conv2d_nchw": ("n", "h", "w", "ci", "co", "kh", "kw", "stride", "pad", "dilation"),
    "depthwise_conv2d_nhwc": ("n", "h", "w", "c", "kh", "kw", "stride", "pad"),
    "max_pool2d": ("n", "h", "w", "c", "kh", "kw", "stride", "pad"),
    "avg_pool2d": ("n", "h", "w", "c", "kh", "kw", "stride", "pad"),
    "softmax": ("m", "n"),
    "layer_norm": ("m", "n"),
    "reduce_sum": ("m", "n"),
    "reduce_max": ("m", "n"),
    "gelu": ("m", "n"),
    "transpose": ("m", "n"),
    "matmul_int8": ("m", "n", "k"),
    "dense_int8": ("m", "n", "k", "x_zero_point", "y_zero_point"),
    "conv2d_nhwc_int8": (
        *("n", "h", "w", "ci", "co", "kh", "kw", "stride", "pad", "dilation"),
        *("x_zero_point", "y_zero_point"),
    ),
    "matmul_bf16": ("m", "n", "k"),
    "dense_bf16": ("m", "n", "k", "bias", "relu"),
    "batch_matmul_bf16": ("b", "m", "n", "k"),
}
LOW_PRECISION = {n for n in DESIGN_PARAMS if n.endswith(("_int8", "_bf16"))}

ALL_OPS = list(DESIGN_PARAMS)
CASES = [(name, i) for name in ALL_OPS for i in range(len(PARAM_SETS.get(name, ())))]


def within_tolerance(out: np.ndarray, ref: np.ndarray, k: int) -> np.ndarray:
    """DESIGN.md's bound |out − ref| ≤ 1e-4·|ref| + 1e-5·√K·max|ref| (exact for integers)."""
    if np.issubdtype(ref.dtype, np.integer):
        return out == ref
    ref64 = ref.astype(np.float64)
    scale = np.abs(ref64).max() if ref64.size else 0.0
    err = np.abs(out.astype(np.float64) - ref64)
    return err <= 1e-4 * np.abs(ref64) + 1e-5 * math.sqrt(k) * scale


# ---------------------------------------------------------------------------
# Registry and parameter declarations


def test_registry_is_designs_table_in_order() -> None:
    assert list(OPS) == ALL_OPS
    assert len(OPS) == 20


@pytest.mark.parametrize("name", ALL_OPS)
def test_parameter_names_and_bounds(name: str) -> None:
    op = OPS[name]
    assert op.name == name
    assert tuple(p.name for p in op.params) == DESIGN_PARAMS[name]
    for p in op.params:
        if p.name in ("bias", "relu"):
            assert (p.minimum, p.choices) == (0, (0, 1))
        elif p.name == "pad":
            assert (p.minimum, p.choices) == (0, None)
        elif p.name.endswith("_zero_point"):
            assert (p.minimum, p.maximum, p.choices) == (0, 255, None)
        else:
            assert (p.minimum, p.choices) == (1, None)
        assert p.default >= p.minimum


def test_get_op_unknown_lists_known() -> None:
    with pytest.raises(WorkloadError) as exc:
        get_op("foo")
    msg = str(exc.value)
    assert "'foo'" in msg and "matmul, batch_matmul" in msg and "matmul_int8" in msg
    assert get_op("softmax") is OPS["softmax"]


@pytest.mark.parametrize("name", ALL_OPS)
def test_defaults_build_and_match_reference(name: str) -> None:
    """The built workload's outputs have the reference's shapes and dtypes, in order."""
    op, params, wl = instantiate(name, {})
    assert params == op.defaults()
    assert wl.name == name
    inputs = make_inputs(wl)
    refs = op.reference(params, *inputs)
    assert isinstance(refs, tuple) and len(refs) == len(wl.outputs)
    for t, ref in zip(wl.outputs, refs):
        assert ref.shape == t.concrete_shape(), (t.name, ref.shape)
        assert ref.dtype == dt.to_numpy(t.dtype), (t.name, ref.dtype)
    # Every input and output is documented by name, and float ops use float32.
    for t in (*wl.inputs, *wl.outputs):
        assert f"{t.name}[" in op.doc, f"{t.name} is not documented in {name}'s doc"
        if name not in LOW_PRECISION:
            assert t.dtype == "float32"
    # Defaults are small: a naive loop nest runs in well under a second.
    flops = op.flops(params)
    assert flops is None or flops <= 10**7
    assert workload_bytes(wl) < 2**20


def test_dense_bias_input_only_when_enabled() -> None:
    _, _, with_bias = instantiate("dense", {"bias": 1})
    _, _, without = instantiate("dense", {"bias": 0, "relu": 0})
    assert [t.name for t in with_bias.inputs] == ["X", "W", "bias"]
    assert [t.name for t in without.inputs] == ["X", "W"]
    assert [t.name for t in without.computes()] == ["Y"]


def test_matmul_int8_dtypes() -> None:
    _, _, wl = instantiate("matmul_int8", {})
    assert [t.dtype for t in wl.inputs] == ["uint8", "int8"]
    assert wl.outputs[0].dtype == "int32"


def test_conv_has_a_pad_compute_even_without_padding() -> None:
    """Block names must not depend on parameters, so traces replay across pad values."""
    for pad in (0, 2):
        _, _, wl = instantiate("conv2d_nhwc", {"pad": pad})
        assert [t.name for t in wl.computes()] == ["pad", "Y"]


# ---------------------------------------------------------------------------
# resolve_params


def test_resolve_overrides_defaults_and_parses_text() -> None:
    op = OPS["matmul"]
    assert resolve_params(op, {"m": "256", "k": 3}) == {"m": 256, "n": 128, "k": 3}
    assert resolve_params(OPS["conv2d_nhwc"], {"pad": "0"})["pad"] == 0


@pytest.mark.parametrize(
    ("name", "given", "culprit"),
    [
        ("matmul", {"q": 3}, "'q'"),
        ("matmul", {"m": -4}, "m"),
        ("matmul", {"k": 0}, "k"),
        ("matmul", {"n": "1.5"}, "n"),
        ("matmul", {"n": "abc"}, "n"),
        ("matmul", {"m": True}, "m"),
        ("matmul", {"m": 2.0}, "m"),
        ("matmul", {"m": ""}, "m"),
        ("dense", {"bias": 2}, "bias"),
        ("dense", {"relu": -1}, "relu"),
        ("conv2d_nhwc", {"pad": -1}, "pad"),
        ("conv2d_nhwc", {"stride": 0}, "stride"),
        ("conv2d_nchw", {"dilation": 0}, "dilation"),
    ],
)
def test_resolve_errors_name_the_culprit(
    name: str, given: Mapping[str, object], culprit: str
) -> None:
    with pytest.raises(WorkloadError) as exc:
        resolve_params(OPS[name], given)  # type: ignore[arg-type]
    msg = str(exc.value)
    assert name in msg and culprit in msg
    assert "\n" not in msg


def test_unknown_parameter_lists_the_known_ones() -> None:
    with pytest.raises(WorkloadError, match=r"unknown parameter 'x'; known: m, n, k"):
        resolve_params(OPS["matmul"], {"x": 1})


def test_unknown_operator_through_instantiate() -> None:
    with pytest.raises(WorkloadError, match="unknown operator 'foo'; known: matmul"):
        instantiate("foo", {})


@pytest.mark.parametrize(
    ("name", "given", "words"),
    [
        ("conv2d_nhwc", {"h": 3, "kh": 5, "pad": 0}, ["height", "h=3", "kh=5"]),
        ("conv2d_nchw", {"w": 5, "kw": 3, "pad": 0, "dilation": 3}, ["width", "dilation=3"]),
        ("depthwise_conv2d_nhwc", {"w": 2, "kw": 3, "pad": 0}, ["width", "kw=3"]),
        ("max_pool2d", {"h": 1, "kh": 3, "pad": 0}, ["height", "kh=3"]),
        ("avg_pool2d", {"w": 2, "kw": 5, "pad": 1}, ["width", "kw=5"]),
        ("max_pool2d", {"kh": 2, "pad": 2}, ["pad=2", "kh=2"]),
        ("avg_pool2d", {"kw": 1, "pad": 1}, ["pad=1", "kw=1"]),
    ],
)
def test_empty_outputs_are_refused(name: str, given: dict[str, int], words: list[str]) -> None:
    with pytest.raises(WorkloadError) as exc:
        instantiate(name, given)
    msg = str(exc.value)
    assert msg.startswith(f"{name}: ")
    for w in words:
        assert w in msg


def test_padding_rescues_a_kernel_larger_than_the_input() -> None:
    _, _, wl = instantiate("conv2d_nhwc", {"h": 3, "w": 3, "kh": 5, "kw": 5, "pad": 1})
    assert wl.outputs[0].concrete_shape() == (1, 1, 1, 16)


# ---------------------------------------------------------------------------
# Byte limits


def test_huge_workload_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOMTUNE_MAX_BYTES", raising=False)
    start = time.perf_counter()
    for given in ({"m": 10**12}, {"m": str(10**12)}, {"m": 10**40, "n": 10**40}):
        with pytest.raises(BufferTooLargeError) as exc:
            instantiate("matmul", given)
        assert str(DEFAULT_MAX_BYTES) in str(exc.value)
    with pytest.raises(BufferTooLargeError, match="conv2d_nhwc"):
        instantiate("conv2d_nhwc", {"h": 10**6, "w": 10**6})
    assert time.perf_counter() - start < 1.0


def test_max_bytes_env_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, wl = instantiate("matmul", {})
    need = workload_bytes(wl)
    assert need == 3 * 128 * 128 * 4
    monkeypatch.setenv("LOOMTUNE_MAX_BYTES", str(need))
    assert max_bytes() == need
    instantiate("matmul", {})
    monkeypatch.setenv("LOOMTUNE_MAX_BYTES", str(need - 1))
    with pytest.raises(BufferTooLargeError) as exc:
        instantiate("matmul", {})
    assert str(need) in str(exc.value) and str(need - 1) in str(exc.value)


@pytest.mark.parametrize("raw", ["lots", "1.5", "-3", "0"])
def test_bad_max_bytes_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("LOOMTUNE_MAX_BYTES", raw)
    with pytest.raises(WorkloadError, match="LOOMTUNE_MAX_BYTES"):
        instantiate("matmul", {})


def test_default_max_bytes_is_4_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOMTUNE_MAX_BYTES", raising=False)
    assert max_bytes() == 4 * 2**30


def test_workload_bytes_counts_intermediates() -> None:
    _, p, wl = instantiate("conv2d_nhwc", {})
    n, h, w, ci, co, kh, kw, pad = (p[k] for k in ("n", "h", "w", "ci", "co", "kh", "kw", "pad"))
    x, wt = n * h * w * ci, kh * kw * ci * co
    padded = n * (h + 2 * pad) * (w + 2 * pad) * ci
    y = n * h * w * co  # stride 1, pad 1, 3x3: same size
    assert workload_bytes(wl) == 4 * (x + wt + padded + y)
    _, _, i8 = instantiate("matmul_int8", {"m": 2, "n": 3, "k": 5})
    assert workload_bytes(i8) == 2 * 5 + 5 * 3 + 4 * 2 * 3


# ---------------------------------------------------------------------------
# FLOPs and reduction lengths


def test_flops() -> None:
    assert OPS["matmul"].flops({"m": 3, "n": 5, "k": 7}) == 2 * 3 * 5 * 7
    assert OPS["matmul_int8"].flops({"m": 3, "n": 5, "k": 7}) == 2 * 3 * 5 * 7
    assert OPS["batch_matmul"].flops({"b": 2, "m": 3, "n": 5, "k": 7}) == 2 * 2 * 3 * 5 * 7
    conv = {"n": 2, "h": 9, "w": 8, "ci": 3, "co": 4, "kh": 3, "kw": 2, "stride": 2, "pad": 1}
    ho, wo = (9 + 2 - 3) // 2 + 1, (8 + 2 - 2) // 2 + 1
    assert OPS["conv2d_nhwc"].flops({**conv, "dilation": 1}) == 2 * 2 * ho * wo * 4 * 3 * 3 * 2
    assert OPS["transpose"].flops({"m": 4, "n": 5}) is None
    for name in ALL_OPS:
        if name != "transpose":
            value = OPS[name].flops(OPS[name].defaults())
            assert isinstance(value, int) and value > 0


def test_reduction_length() -> None:
    assert reduction_length(instantiate("matmul", {"k": 37})[2]) == 37
    conv = instantiate("conv2d_nchw", {"ci": 5, "kh": 3, "kw": 2})[2]
    assert reduction_length(conv) == 5 * 3 * 2
    assert reduction_length(instantiate("softmax", {"n": 99})[2]) == 99
    assert reduction_length(instantiate("gelu", {})[2]) == 1
    assert reduction_length(instantiate("transpose", {})[2]) == 1


# ---------------------------------------------------------------------------
# Inputs


def test_make_inputs_ranges_and_determinism() -> None:
    _, _, wl = instantiate("layer_norm", {"m": 64, "n": 64})
    a = make_inputs(wl, seed=0)
    b = make_inputs(wl, seed=0)
    c = make_inputs(wl, seed=1)
    assert [x.shape for x in a] == [(64, 64), (64,), (64,)]
    for x, y, z in zip(a, b, c):
        assert x.dtype == np.float32 and x.flags.c_contiguous
        assert np.array_equal(x, y) and not np.array_equal(x, z)
        assert x.min() >= -1.0 and x.max() <= 1.0
    assert a[0].min() < -0.99 and a[0].max() > 0.99


def test_make_inputs_integers_span_their_type() -> None:
    _, _, wl = instantiate("matmul_int8", {})
    a, b = make_inputs(wl)
    assert a.dtype == np.uint8 and b.dtype == np.int8
    assert (int(a.min()), int(a.max())) == (0, 255)
    assert (int(b.min()), int(b.max())) == (-128, 127)


# ---------------------------------------------------------------------------
# The numpy references against explicit loops (so a wrong reference cannot hide)


def _naive_window(
    x: np.ndarray, i: int, j: int, kh: int, kw: int, stride: int, pad: int, dil: int
) -> list[tuple[int, int, int, int]]:
    """(rh, rw, y, x) for the window cells of output (i, j) that lie inside the input."""
    cells = []
    for rh, rw in itertools.product(range(kh), range(kw)):
        y, xx = i * stride + rh * dil - pad, j * stride + rw * dil - pad
        if 0 <= y < x.shape[1] and 0 <= xx < x.shape[2]:
            cells.append((rh, rw, y, xx))
    return cells


CONV_SMALL = {"n": 2, "h": 6, "w": 5, "ci": 3, "co": 2, "kh": 3, "kw": 2, "stride": 2, "pad": 2}


def test_conv_references_against_loops() -> None:
    p = {**CONV_SMALL, "dilation": 2}
    _, _, wl = instantiate("conv2d_nhwc", p)
    X, W = make_inputs(wl)
    (Y,) = OPS["conv2d_nhwc"].reference(p, X, W)
    expected = np.zeros(Y.shape, dtype=np.float64)
    for b, i, j in itertools.product(range(Y.shape[0]), range(Y.shape[1]), range(Y.shape[2])):
        for rh, rw, y, x in _naive_window(X, i, j, p["kh"], p["kw"], p["stride"], p["pad"], 2):
            expected[b, i, j] += X[b, y, x].astype(np.float64) @ W[rh, rw].astype(np.float64)
    np.testing.assert_allclose(Y, expected, rtol=1e-5, atol=1e-5)
    # NCHW is the same convolution with transposed operands.
    (Yc,) = OPS["conv2d_nchw"].reference(
        p,
        np.ascontiguousarray(X.transpose(0, 3, 1, 2)),
        np.ascontiguousarray(W.transpose(3, 2, 0, 1)),
    )
    np.testing.assert_allclose(Yc, Y.transpose(0, 3, 1, 2), rtol=1e-5, atol=1e-6)


def test_depthwise_and_pool_references_against_loops() -> None:
    p = {k: v for k, v in CONV_SMALL.items() if k not in ("ci", "co")} | {"c": 3}
    pp = p | {"pad": 1}  # pools need pad < kw
    _, _, wl = instantiate("depthwise_conv2d_nhwc", p)
    X, W = make_inputs(wl)
    (D,) = OPS["depthwise_conv2d_nhwc"].reference(p, X, W)
    (M,) = OPS["max_pool2d"].reference(pp, X)
    (A,) = OPS["avg_pool2d"].reference(pp, X)
    for b, i, j in itertools.product(range(D.shape[0]), range(D.shape[1]), range(D.shape[2])):
        cells = _naive_window(X, i, j, p["kh"], p["kw"], p["stride"], p["pad"], 1)
        want = sum((X[b, y, x] * W[rh, rw] for rh, rw, y, x in cells), np.zeros(3))
        np.testing.assert_allclose(D[b, i, j], want, rtol=1e-5, atol=1e-6)
    for b, i, j in itertools.product(range(M.shape[0]), range(M.shape[1]), range(M.shape[2])):
        cells = _naive_window(X, i, j, pp["kh"], pp["kw"], pp["stride"], pp["pad"], 1)
        vals = np.array([X[b, y, x] for _, _, y, x in cells])
        np.testing.assert_array_equal(M[b, i, j], vals.max(axis=0))
        np.testing.assert_allclose(A[b, i, j], vals.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_row_references() -> None:
    _, p, wl = instantiate("layer_norm", {"m": 3, "n": 10})
    X, g, b = make_inputs(wl)
    (Y,) = OPS["layer_norm"].reference(p, X, g, b)
    x = X.astype(np.float64)
    mu = x.sum(-1, keepdims=True) / 10
    var = ((x - mu) ** 2).sum(-1, keepdims=True) / 10
    np.testing.assert_allclose(Y, (x - mu) / np.sqrt(var + 1e-5) * g + b, rtol=1e-4, atol=1e-5)
    (S,) = OPS["softmax"].reference({"m": 3, "n": 10}, X)
    np.testing.assert_allclose(S.sum(-1), 1.0, rtol=1e-6)
    (G,) = OPS["gelu"].reference({"m": 3, "n": 10}, X)
    assert G.dtype == np.float32
    np.testing.assert_allclose(
        G, 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3))), rtol=1e-5, atol=1e-6
    )
    (T,) = OPS["transpose"].reference({"m": 3, "n": 10}, X)
    assert T.shape == (10, 3) and T.flags.c_contiguous and np.array_equal(T, X.T)


# ---------------------------------------------------------------------------
# Parameter sets and the independent evaluator


def test_param_sets_cover_every_op_and_extent() -> None:
    assert set(PARAM_SETS) == set(ALL_OPS)
    for name, sets in PARAM_SETS.items():
        assert len(sets) >= 3, name
        extents: set[int] = set()
        for given in sets:
            _, _, wl = instantiate(name, given)
            for t in (*wl.inputs, *wl.outputs):
                extents.update(t.concrete_shape())
        assert {1, 7, 127, 1000} <= extents, (name, sorted(extents))


@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_evaluator_agrees_with_reference(name: str, index: int) -> None:
    from ir.evaluate import evaluate

    op, params, wl = instantiate(name, PARAM_SETS[name][index])
    inputs = make_inputs(wl, seed=index)
    refs = op.reference(params, *inputs)
    outs = evaluate(wl, inputs)
    k = reduction_length(wl)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        assert np.array_equal(np.isnan(out), np.isnan(ref)) if ref.dtype.kind == "f" else True
        ok = within_tolerance(out, ref, k)
        assert ok.all(), f"{name} {params}: {np.count_nonzero(~ok)} elements off"
