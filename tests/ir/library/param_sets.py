"""Parameter sets per library operator, shared by the library and codegen correctness tests.

Together the sets of each operator reach extents 1, 7, 127 and 1000 (odd sizes
catch tail handling; 1 catches degenerate loops), each large extent paired
with small others so a naive scalar loop nest stays well under 0.5 s. The
conv and pool sets also mix stride, dilation and padding, including padding
as wide as the kernel (output cells that see only padding).
"""

from __future__ import annotations

_MATMUL = [
    {"m": 1, "n": 7, "k": 127},
    {"m": 127, "n": 1000, "k": 7},
    {"m": 7, "n": 1, "k": 1000},
    {"m": 1000, "n": 7, "k": 1},
]

_CONV = [
    {"n": 1, "h": 7, "w": 7, "ci": 127, "co": 7, "kh": 3, "kw": 3, "stride": 1, "pad": 1, "dilation": 1},
    {"n": 1, "h": 1000, "w": 7, "ci": 3, "co": 5, "kh": 3, "kw": 1, "stride": 2, "pad": 0, "dilation": 2},
    {"n": 7, "h": 1, "w": 127, "ci": 7, "co": 1, "kh": 1, "kw": 7, "stride": 3, "pad": 2, "dilation": 1},
    {"n": 1, "h": 4, "w": 4, "ci": 2, "co": 1000, "kh": 2, "kw": 2, "stride": 1, "pad": 0, "dilation": 1},
    {"n": 1, "h": 3, "w": 3, "ci": 1000, "co": 3, "kh": 3, "kw": 3, "stride": 1, "pad": 1, "dilation": 1},
    {"n": 2, "h": 5, "w": 6, "ci": 3, "co": 4, "kh": 2, "kw": 3, "stride": 2, "pad": 3, "dilation": 3},
]  # fmt: skip

_DEPTHWISE = [
    {"n": 1, "h": 7, "w": 7, "c": 127, "kh": 3, "kw": 3, "stride": 1, "pad": 1},
    {"n": 1, "h": 1000, "w": 7, "c": 3, "kh": 5, "kw": 1, "stride": 2, "pad": 2},
    {"n": 7, "h": 1, "w": 127, "c": 1, "kh": 1, "kw": 7, "stride": 3, "pad": 0},
    {"n": 1, "h": 4, "w": 4, "c": 1000, "kh": 2, "kw": 2, "stride": 1, "pad": 0},
    {"n": 2, "h": 5, "w": 6, "c": 3, "kh": 2, "kw": 3, "stride": 2, "pad": 3},
]

# Pools need pad < kh and pad < kw (a window of padding only has nothing to pool).
_POOL = [
    {"n": 1, "h": 7, "w": 7, "c": 127, "kh": 3, "kw": 3, "stride": 1, "pad": 1},
    {"n": 1, "h": 1000, "w": 7, "c": 3, "kh": 5, "kw": 2, "stride": 2, "pad": 1},
    {"n": 7, "h": 1, "w": 127, "c": 1, "kh": 1, "kw": 7, "stride": 3, "pad": 0},
    {"n": 1, "h": 4, "w": 4, "c": 1000, "kh": 2, "kw": 2, "stride": 2, "pad": 1},
    {"n": 2, "h": 9, "w": 8, "c": 3, "kh": 4, "kw": 3, "stride": 3, "pad": 2},
]

_ROWS = [
    {"m": 1, "n": 1000},
    {"m": 7, "n": 127},
    {"m": 1000, "n": 7},
    {"m": 127, "n": 1},
    {"m": 1, "n": 1},
]

PARAM_SETS: dict[str, list[dict[str, int]]] = {
    "matmul": _MATMUL,
    "batch_matmul": [
        {"b": 1, "m": 7, "n": 127, "k": 1000},
        {"b": 7, "m": 127, "n": 1, "k": 7},
        {"b": 1000, "m": 1, "n": 7, "k": 127},
        {"b": 3, "m": 5, "n": 6, "k": 1},
    ],
    "dense": [
        {"m": 1, "n": 7, "k": 127, "bias": 1, "relu": 1},
        {"m": 127, "n": 1000, "k": 7, "bias": 0, "relu": 1},
        {"m": 7, "n": 1, "k": 1000, "bias": 1, "relu": 0},
        {"m": 1000, "n": 7, "k": 1, "bias": 0, "relu": 0},
    ],
    "conv2d_nhwc": _CONV,
    "conv2d_nchw": _CONV,
    "depthwise_conv2d_nhwc": _DEPTHWISE,
    "max_pool2d": _POOL,
    "avg_pool2d": _POOL,
    "softmax": _ROWS,
    "layer_norm": _ROWS,
    "reduce_sum": _ROWS,
    "reduce_max": _ROWS,
    "gelu": _ROWS,
    "transpose": _ROWS,
    "matmul_int8": _MATMUL,
    "dense_int8": [
        {"m": 1, "n": 7, "k": 127, "x_zero_point": 0, "y_zero_point": 255},
        {"m": 127, "n": 1000, "k": 7, "x_zero_point": 128, "y_zero_point": 128},
        {"m": 7, "n": 1, "k": 1000, "x_zero_point": 255, "y_zero_point": 0},
    ],
    "conv2d_nhwc_int8": [
        {**_CONV[0], "x_zero_point": 3, "y_zero_point": 128},
        {**_CONV[2], "x_zero_point": 128, "y_zero_point": 7},
        {**_CONV[3], "x_zero_point": 255, "y_zero_point": 232},
    ],
    "matmul_bf16": _MATMUL,
    "dense_bf16": [
        {"m": 1, "n": 7, "k": 127, "bias": 1, "relu": 1},
        {"m": 127, "n": 1000, "k": 7, "bias": 0, "relu": 0},
        {"m": 7, "n": 1, "k": 1000, "bias": 1, "relu": 0},
    ],
    "batch_matmul_bf16": [
        {"b": 1, "m": 7, "n": 127, "k": 1000},
        {"b": 7, "m": 127, "n": 1, "k": 7},
        {"b": 3, "m": 5, "n": 6, "k": 1},
    ],
}
