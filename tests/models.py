"""Small ONNX models built in code (no downloads), shared by the importer's and the compiled
model's tests: `mlp()`, `encoder_layer()` and `conv_net()`, each an `onnx.ModelProto` with
seeded random weights, written the way exporters write them (PyTorch's patterns)."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Model:
    """Collects nodes and initializers; `name()` hands out unique value names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, array: np.ndarray, hint: str = "c") -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, *shape: int, scale: float | None = None, hint: str = "w") -> str:
        scale = (
            scale
            if scale is not None
            else 1 / math.sqrt(shape[0] if len(shape) == 2 else math.prod(shape[1:]))
        )
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), hint)

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(
            helper.make_node(op_type, inputs, outs, name=f"/{outs[0]}/{op_type}", **attrs)
        )
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs, outputs, opset: int) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8  # readable by every onnxruntime the tests may meet
        onnx.checker.check_model(model)
        return model


def _info(name: str, shape, dtype=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def mlp(
    *,
    batch: int = 4,
    features: int = 64,
    hidden: int = 128,
    classes: int = 10,
    seed: int = 0,
    opset: int = 17,
) -> onnx.ModelProto:
    """Gemm(transB) → Relu → MatMul+Add → Tanh → Gemm(alpha, beta) → Softmax."""
    m = _Model(seed)
    h = m.op(
        "Gemm",
        ["x", m.weight(hidden, features, scale=features**-0.5), m.weight(hidden, scale=0.1)],
        transB=1,
    )
    h = m.op("Relu", [h])
    h = m.op("Add", [m.op("MatMul", [h, m.weight(hidden, hidden)]), m.weight(hidden, scale=0.1)])
    h = m.op("Tanh", [h])
    bias = m.weight(1, classes, scale=0.1)
    h = m.op("Gemm", [h, m.weight(hidden, classes), bias], alpha=0.5, beta=2.0)
    m.nodes.append(
        helper.make_node("Softmax", [h], ["y"], name="/softmax", axis=-1 if opset >= 13 else 1)
    )
    return m.model("mlp", [_info("x", [batch, features])], [_info("y", [batch, classes])], opset)


def _heads_shape(m: _Model, x: str, tail: list[int]) -> str:
    """The Reshape target exporters compute: Shape → Gather → Unsqueeze → Concat."""
    shape = m.op("Shape", [x])
    dims = []
    for i in (0, 1):
        d = m.op("Gather", [shape, m.const(np.array(i, np.int64), "idx")], axis=0)
        dims.append(m.op("Unsqueeze", [d, m.const(np.array([0], np.int64), "axes")]))
    return m.op("Concat", [*dims, m.const(np.array(tail, np.int64), "tail")], axis=0)


def _linear(m: _Model, x: str, n_in: int, n_out: int) -> str:
    return m.op(
        "Add", [m.op("MatMul", [x, m.weight(n_in, n_out)]), m.weight(n_out, scale=0.1, hint="b")]
    )


def _layer_norm(m: _Model, x: str, hidden: int, opset: int, decomposed: bool) -> str:
    gamma = m.const((1 + 0.1 * m.rng.standard_normal(hidden)).astype(np.float32), "gamma")
    beta = m.weight(hidden, scale=0.1, hint="beta")
    if not decomposed:
        return m.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    def mean(v: str) -> str:
        if opset >= 18:
            return m.op("ReduceMean", [v, m.const(np.array([-1], np.int64), "axes")])
        return m.op("ReduceMean", [v], axes=[-1])

    centred = m.op("Sub", [x, mean(x)])
    var = mean(m.op("Pow", [centred, m.const(np.array(2.0, np.float32), "two")]))
    std = m.op("Sqrt", [m.op("Add", [var, m.const(np.array(1e-5, np.float32), "eps")])])
    return m.op("Add", [m.op("Mul", [m.op("Div", [centred, std]), gamma]), beta])


def _attention(m: _Model, x: str, hidden: int, heads: int, seq: int) -> str:
    d = hidden // heads
    split = _heads_shape(m, x, [heads, d])
    q, k, v = (m.op("Reshape", [_linear(m, x, hidden, hidden), split]) for _ in range(3))
    q = m.op("Transpose", [q], perm=[0, 2, 1, 3])
    k = m.op("Transpose", [k], perm=[0, 2, 3, 1])
    v = m.op("Transpose", [v], perm=[0, 2, 1, 3])
    scores = m.op(
        "Div", [m.op("MatMul", [q, k]), m.const(np.array(math.sqrt(d), np.float32), "scale")]
    )
    # an all-visible padding mask, as exporters compute it: ConstantOfShape → Equal → Where
    ones = m.op(
        "ConstantOfShape",
        [m.const(np.array([1, 1, 1, seq], np.int64), "mshape")],
        value=helper.make_tensor("one", TensorProto.INT64, [1], [1]),
    )
    masked = m.op("Equal", [ones, m.const(np.array(0, np.int64), "zero")])
    bias = m.op(
        "Where",
        [
            masked,
            m.const(np.array(-1e4, np.float32), "neg"),
            m.const(np.array(0.0, np.float32), "z"),
        ],
    )
    probs = m.op("Softmax", [m.op("Add", [scores, bias])], axis=-1)
    ctx = m.op("Transpose", [m.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = m.op("Reshape", [ctx, _heads_shape(m, x, [hidden])])
    return _linear(m, ctx, hidden, hidden)


def _gelu_erf(m: _Model, x: str) -> str:
    """x·0.5·(1 + erf(x/√2)), the form exporters write."""
    e = m.op("Erf", [m.op("Div", [x, m.const(np.array(math.sqrt(2), np.float32), "sqrt2")])])
    e = m.op("Add", [e, m.const(np.array(1.0, np.float32), "one")])
    return m.op("Mul", [m.op("Mul", [x, e]), m.const(np.array(0.5, np.float32), "half")])


def encoder_layer(
    *,
    batch: int = 1,
    seq: int = 16,
    hidden: int = 64,
    heads: int = 4,
    ffn: int | None = None,
    layers: int = 1,
    seed: int = 0,
    opset: int = 17,
) -> onnx.ModelProto:
    """BERT-style post-LN encoder layers: multi-head attention, residual, LayerNormalization
    (the op, or decomposed before opset 17), GELU (erf form) FFN, residual, decomposed LN."""
    m = _Model(seed)
    ffn = ffn or 4 * hidden
    x = "x"
    for _ in range(layers):
        h = m.op("Add", [x, _attention(m, x, hidden, heads, seq)])
        h = _layer_norm(m, h, hidden, opset, decomposed=opset < 17)
        f = _linear(m, _gelu_erf(m, _linear(m, h, hidden, ffn)), ffn, hidden)
        x = _layer_norm(m, m.op("Add", [h, f]), hidden, opset, decomposed=True)
    m.nodes.append(helper.make_node("Identity", [x], ["y"], name="/output/Identity"))
    shape = [batch, seq, hidden]
    return m.model("encoder", [_info("x", shape)], [_info("y", shape)], opset)


def _bn(m: _Model, x: str, c: int) -> str:
    stats = [
        (1 + 0.1 * m.rng.standard_normal(c)).astype(np.float32),  # scale
        (0.1 * m.rng.standard_normal(c)).astype(np.float32),  # bias
        (0.1 * m.rng.standard_normal(c)).astype(np.float32),  # mean
        (0.5 + m.rng.random(c)).astype(np.float32),  # variance
    ]
    return m.op("BatchNormalization", [x, *(m.const(s, "bn") for s in stats)], epsilon=1e-5)


def conv_net(
    *, batch: int = 1, size: int = 32, classes: int = 10, seed: int = 0, opset: int = 17
) -> onnx.ModelProto:
    """Conv+BN+Clip(0,6), depthwise Conv (group=C, SAME padding)+BN+Relu, 1x1 Conv with bias,
    MaxPool, AveragePool (ceil mode), a BatchNormalization with no Conv before it,
    GlobalAveragePool, Flatten and a Gemm classifier."""
    m = _Model(seed)
    six = [m.const(np.array(0.0, np.float32), "lo"), m.const(np.array(6.0, np.float32), "hi")]
    h = m.op(
        "Conv", ["x", m.weight(16, 3, 3, 3)], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    )
    h = m.op("Clip", [_bn(m, h, 16), *six])
    h = m.op(
        "Conv", [h, m.weight(16, 1, 3, 3)], group=16, kernel_shape=[3, 3], auto_pad="SAME_UPPER"
    )
    h = m.op("Relu", [_bn(m, h, 16)])
    h = m.op(
        "Conv", [h, m.weight(32, 16, 1, 1), m.weight(32, scale=0.1, hint="b")], dilations=[1, 1]
    )
    h = m.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    h = m.op("AveragePool", [h], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    h = _bn(m, m.op("Relu", [h]), 32)
    h = m.op("Flatten", [m.op("GlobalAveragePool", [h])], axis=1)
    m.nodes.append(
        helper.make_node(
            "Gemm",
            [h, m.weight(classes, 32), m.weight(classes, scale=0.1)],
            ["y"],
            name="/fc/Gemm",
            transB=1,
        )
    )
    return m.model(
        "conv_net", [_info("x", [batch, 3, size, size])], [_info("y", [batch, classes])], opset
    )


def res_block(
    *, size: int = 16, channels: int = 8, seed: int = 0, opset: int = 17
) -> onnx.ModelProto:
    """A ResNet basic block after a stride-2 stem: Conv(s2)+BN+Relu, then Conv 3×3+BN+Relu,
    Conv 3×3+BN, the residual Add and Relu (torchvision's resnet18, at a small size)."""
    m = _Model(seed)
    c = channels
    three = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    stem = m.op("Conv", ["x", m.weight(c, 3, 3, 3)], strides=[2, 2], **three)
    stem = m.op("Relu", [_bn(m, stem, c)])
    h = m.op("Relu", [_bn(m, m.op("Conv", [stem, m.weight(c, c, 3, 3)], **three), c)])
    h = _bn(m, m.op("Conv", [h, m.weight(c, c, 3, 3)], **three), c)
    m.nodes.append(helper.make_node("Add", [h, stem], ["sum"], name="/add/Add"))
    m.nodes.append(helper.make_node("Relu", ["sum"], ["y"], name="/relu/Relu"))
    return m.model(
        "res_block",
        [_info("x", [1, 3, 2 * size, 2 * size])],
        [_info("y", [1, c, size, size])],
        opset,
    )
