"""Every graph op's evaluation against a plain numpy formula, through make_graph and run_graph
(so inference and evaluation agree on shape and dtype)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ir.errors import GraphError, GraphInputError
from ir.graph import OPS, TensorType, make_graph, make_node, normalize_slice, run_graph

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


def _conv_loops(x, w, b, stride, pads, dil, groups):
    """Direct seven-loop convolution (NCHW, OIHW)."""
    n, _, h, wd = x.shape
    co, cig, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, co, oh, ow))
    per = co // groups
    for o, y, z in itertools.product(range(co), range(oh), range(ow)):
        g = o // per
        for ci, i, j in itertools.product(range(cig), range(kh), range(kw)):
            out[:, o, y, z] += (
                xp[:, g * cig + ci, y * stride[0] + i * dil[0], z * stride[1] + j * dil[1]]
                * w[o, ci, i, j]
            )
    return out + (0 if b is None else b.reshape(1, co, 1, 1))


def _pool_loops(x, kernel, stride, pads, op, include_pad=0):
    n, c, h, w = x.shape
    pt, pl, pb, pr = pads
    oh = (h + pt + pb - kernel[0]) // stride[0] + 1
    ow = (w + pl + pr - kernel[1]) // stride[1] + 1
    out = np.zeros((n, c, oh, ow))
    for y, z in itertools.product(range(oh), range(ow)):
        r0, c0 = y * stride[0] - pt, z * stride[1] - pl
        win = x[:, :, max(r0, 0) : r0 + kernel[0], max(c0, 0) : c0 + kernel[1]].astype(np.float64)
        if op == "max":
            out[:, :, y, z] = win.max(axis=(2, 3))
        else:
            count = kernel[0] * kernel[1] if include_pad else win.shape[2] * win.shape[3]
            out[:, :, y, z] = win.sum(axis=(2, 3)) / count
    return out


X = f32(2, 3, 4)
POS = np.abs(X) + 0.5
IMG = f32(2, 4, 7, 6)
CONV_W = f32(6, 2, 3, 2)
CONV_B = f32(6)
LN_S, LN_B = f32(4), f32(4)

# op -> list of (inputs, attrs, reference(*inputs))
CASES = {
    "neg": [([X], {}, lambda x: -x)],
    "exp": [([X], {}, np.exp)],
    "erf": [([X], {}, _erf)],
    "tanh": [([X], {}, np.tanh)],
    "sigmoid": [([X * 20], {}, lambda x: 1 / (1 + np.exp(-x.astype(np.float64))))],
    "relu": [([X], {}, lambda x: np.where(x > 0, x, 0))],
    "sqrt": [([POS], {}, np.sqrt)],
    "reciprocal": [([POS], {}, lambda x: 1 / x)],
    "identity": [([X], {}, lambda x: x)],
    "gelu": [
        ([X], {"approximate": "none"}, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
        (
            [X],
            {"approximate": "tanh"},
            lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        ),
    ],
    "clip": [
        ([X], {"min": 0.0, "max": 0.5}, lambda x: np.minimum(np.maximum(x, 0), 0.5)),
        ([X], {"min": -math.inf, "max": 0.0}, lambda x: np.minimum(x, 0)),
        (
            [np.arange(-5, 5, dtype=np.int64)],
            {"min": -2.5, "max": 3.0},
            lambda x: np.clip(x, -2, 3),
        ),
    ],
    "cast": [([X * 3], {"to": "int64"}, lambda x: np.trunc(x).astype(np.int64))],
    "add": [([X, f32(3, 1)], {}, lambda a, b: a + b)],
    "sub": [([X, f32(4)], {}, lambda a, b: a - b)],
    "mul": [([X, f32(2, 1, 4)], {}, lambda a, b: a * b)],
    "div": [
        ([X, POS[0]], {}, lambda a, b: a / b),
        (
            [np.array([7, -7, 6], np.int64), np.array([2, 2, -4], np.int64)],
            {},
            lambda a, b: np.array([3, -3, -1]),
        ),
    ],
    "pow": [
        (
            [POS, np.float32(1.5) * np.ones((1,), np.float32)],
            {},
            lambda a, b: a.astype(np.float64) ** 1.5,
        )
    ],
    "where": [([X > 0, X, f32(4)], {}, lambda c, a, b: np.where(c, a, b))],
    "matmul": [
        ([f32(2, 3, 5), f32(5, 4)], {}, lambda a, b: a.astype(np.float64) @ b),
        ([f32(5), f32(3, 5, 2)], {}, lambda a, b: np.einsum("k,bkn->bn", a, b.astype(np.float64))),
    ],
    "softmax": [
        ([X], {"axis": 1}, lambda x: np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)),
    ],
    "layer_norm": [
        (
            [X, LN_S, LN_B],
            {"axis": 2, "epsilon": 1e-5},
            lambda x, s, b: (
                (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * s + b
            ),
        ),
        (
            [X, f32(3, 4)],
            {"axis": 1, "epsilon": 1e-3},
            lambda x, s: (
                (x - x.mean((1, 2), keepdims=True))
                / np.sqrt(x.var((1, 2), keepdims=True) + 1e-3)
                * s
            ),
        ),
    ],
    "reduce_mean": [
        ([X], {"axes": (0, 2), "keepdims": 1}, lambda x: x.mean(axis=(0, 2), keepdims=True))
    ],
    "reduce_sum": [([X], {"axes": (1,), "keepdims": 0}, lambda x: x.sum(axis=1))],
    "reduce_max": [([X], {"axes": (2,), "keepdims": 0}, lambda x: x.max(axis=2))],
    "transpose": [([X], {"perm": (2, 0, 1)}, lambda x: x.transpose(2, 0, 1))],
    "reshape": [([X], {"shape": (6, 4)}, lambda x: x.reshape(6, 4))],
    "expand": [([f32(3, 1)], {"shape": (2, 3, 5)}, lambda x: np.broadcast_to(x, (2, 3, 5)))],
    "concat": [([X, f32(2, 1, 4)], {"axis": 1}, lambda a, b: np.concatenate([a, b], axis=1))],
    "split": [([X], {"axis": 2, "sizes": (1, 3)}, lambda x: (x[:, :, :1], x[:, :, 1:]))],
    "slice": [
        (
            [X],
            {"starts": (1, 3), "ends": (3, -1), "axes": (1, 2), "steps": (1, -2)},
            lambda x: x[:, 1:3, 3::-2],
        ),
    ],
    "gather": [
        (
            [f32(10, 4), np.array([[1, 9], [-1, 0]], np.int64)],
            {"axis": 0},
            lambda d, i: d[np.where(i < 0, i + 10, i)],
        ),
        ([X, np.array([3, 0], np.int32)], {"axis": 2}, lambda d, i: d[:, :, [3, 0]]),
    ],
    "conv2d": [
        (
            [IMG, CONV_W, CONV_B],
            {
                "layout": "NCHW",
                "strides": (2, 1),
                "pads": (1, 0, 2, 1),
                "dilations": (1, 2),
                "groups": 2,
            },
            lambda x, w, b: _conv_loops(x, w, b, (2, 1), (1, 0, 2, 1), (1, 2), 2),
        ),
        (
            [IMG.transpose(0, 2, 3, 1).copy(), CONV_W.transpose(2, 3, 1, 0).copy(), CONV_B],
            {
                "layout": "NHWC",
                "strides": (2, 1),
                "pads": (1, 0, 2, 1),
                "dilations": (1, 2),
                "groups": 2,
            },
            lambda x, w, b: _conv_loops(IMG, CONV_W, b, (2, 1), (1, 0, 2, 1), (1, 2), 2).transpose(
                0, 2, 3, 1
            ),
        ),
        (  # depthwise, no bias
            [IMG, f32(4, 1, 3, 3), None],
            {
                "layout": "NCHW",
                "strides": (1, 1),
                "pads": (1, 1, 1, 1),
                "dilations": (1, 1),
                "groups": 4,
            },
            lambda x, w, b: _conv_loops(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 4),
        ),
    ],
    "max_pool2d": [
        (
            [IMG],
            {"layout": "NCHW", "kernel": (3, 2), "strides": (2, 2), "pads": (1, 1, 1, 0)},
            lambda x: _pool_loops(x, (3, 2), (2, 2), (1, 1, 1, 0), "max"),
        ),
    ],
    "avg_pool2d": [
        (
            [IMG],
            {
                "layout": "NCHW",
                "kernel": (3, 3),
                "strides": (2, 2),
                "pads": (1, 1, 1, 1),
                "count_include_pad": c,
            },
            lambda x, c=c: _pool_loops(x, (3, 3), (2, 2), (1, 1, 1, 1), "avg", c),
        )
        for c in (0, 1)
    ]
    + [
        (
            [IMG.transpose(0, 2, 3, 1).copy()],
            {
                "layout": "NHWC",
                "kernel": (2, 2),
                "strides": (2, 2),
                "pads": (0, 0, 0, 0),
                "count_include_pad": 0,
            },
            lambda x: _pool_loops(IMG, (2, 2), (2, 2), (0, 0, 0, 0), "avg").transpose(0, 2, 3, 1),
        )
    ],
    "global_avg_pool": [
        ([IMG], {"layout": "NCHW"}, lambda x: x.mean(axis=(2, 3), keepdims=True)),
        ([IMG], {"layout": "NHWC"}, lambda x: x.mean(axis=(1, 2), keepdims=True)),
    ],
}


def test_every_op_has_a_case() -> None:
    assert sorted(CASES) == sorted(OPS)


@pytest.mark.parametrize(
    ("op", "case"), [(op, i) for op, cases in CASES.items() for i in range(len(cases))]
)
def test_op_evaluates_as_numpy(op: str, case: int) -> None:
    arrays, attrs, reference = CASES[op][case]
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(arrays)]
    want = reference(*arrays)
    want = want if isinstance(want, tuple) else (want,)
    outs = [f"out{i}" for i in range(len(want))]
    given = [(n, TensorType.of(np.asarray(a))) for n, a in zip(names, arrays) if n]
    g = make_graph(op, given, [make_node(op, names, outs, name=op, **attrs)], {}, outs)
    got = run_graph(g, [np.asarray(a) for a in arrays if a is not None])
    for o, (value, expected) in enumerate(zip(got, want)):
        assert value.dtype == np.dtype(g.types[outs[o]].dtype)
        assert value.shape == g.types[outs[o]].shape == np.shape(expected)
        np.testing.assert_allclose(value, expected, rtol=2e-6, atol=2e-6)
        assert not np.shares_memory(value, arrays[0])


@pytest.mark.parametrize(
    ("dim", "bounds", "step", "want"),
    [
        (5, (1, 100), 1, (1, 5)),
        (5, (-2, -1), 1, (3, 4)),
        (5, (-100, 3), 1, (0, 3)),
        (5, (100, -100), -1, (4, -1)),
        (5, (-1, -6), -2, (4, -1)),
        (5, (3, 1), 1, (3, 1)),
    ],
)
def test_normalize_slice_follows_python(dim, bounds, step, want) -> None:
    got = normalize_slice(dim, *bounds, step)
    assert got == want
    seq = list(range(dim))
    end = got[1] if got[1] >= 0 else None
    assert seq[got[0] : end : step] == seq[bounds[0] : bounds[1] : step]


def test_gather_out_of_range_index_is_an_input_error() -> None:
    g = make_graph(
        "g",
        [("i", TensorType((2,), "int64"))],
        [make_node("gather", ["E", "i"], ["y"], name="embed", axis=0)],
        {"E": np.zeros((4, 3), np.float32)},
        ["y"],
    )
    with pytest.raises(GraphInputError, match="gather 'embed': index 4 is out of range for 4 rows"):
        run_graph(g, [np.array([0, 4])])


def test_conv_refuses_mismatched_channels() -> None:
    with pytest.raises(
        GraphError,
        match=r"node 'c' \(conv2d\): the weight .* takes 3 input channels, the input has 4",
    ):
        make_graph(
            "g",
            [("x", TensorType((1, 4, 5, 5), "float32"))],
            [make_node("conv2d", ["x", "W"], ["y"], name="c", layout="NCHW", groups=1)],
            {"W": np.zeros((2, 3, 3, 3), np.float32)},
            ["y"],
        )
