"""PyTorch beside loomtune: the same computation at the kernel's thread count, for the final
comparison; for int8 and bf16 kernels, PyTorch's low-precision paths (`lowp_paths`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ir.library.matmul import int32_dot
from ir.library.quantized import quantized_ranges
from ir.task import Task
from workers.verify import mismatch


def torch_version() -> str | None:
    try:
        import torch
    except Exception:  # not installed, or a broken install: no torch column
        return None
    return str(torch.__version__)


def torch_call(
    task: Task, inputs: Sequence[np.ndarray], threads: int = 1
) -> tuple[Callable[[], object], Callable[[], list[np.ndarray]]] | None:
    """(a call computing `task` with PyTorch at `threads` threads, a getter of its outputs),
    or None.

    The inputs are shared with numpy (``torch.from_numpy``: PyTorch reads the
    very arrays, at their addresses); the call writes into preallocated outputs
    where PyTorch allows it (``out=``). The thread count is process-wide: calls at
    different counts must not be interleaved.
    """
    try:
        import torch
    except Exception:
        return None
    torch.set_num_threads(threads)
    p = task.params
    t = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]
    if task.op in ("matmul", "batch_matmul"):
        out = torch.empty(tuple(task.output_specs()[0][0]), dtype=torch.float32)
        fn = torch.matmul if task.op == "matmul" else torch.bmm
        A, B = t

        def call() -> object:
            return fn(A, B, out=out)

        return call, lambda: [out.numpy()]
    if task.op == "dense":
        X, W = t[0], t[1]
        bias = t[2] if p["bias"] else torch.zeros(W.shape[1])
        out = torch.empty((X.shape[0], W.shape[1]), dtype=torch.float32)

        def call() -> object:
            torch.addmm(bias, X, W, out=out)
            if p["relu"]:
                torch.relu_(out)
            return out

        return call, lambda: [out.numpy()]
    if task.op == "conv2d_nhwc":
        # NHWC data is NCHW in channels_last memory format: no copy; the
        # weight (HWIO -> OIHW) is rearranged once, outside the timed call.
        X = t[0].permute(0, 3, 1, 2)
        W = t[1].permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        result: list[Any] = [None]

        def call() -> object:
            result[0] = torch.nn.functional.conv2d(
                X, W, stride=p["stride"], padding=p["pad"], dilation=p["dilation"]
            )
            return result[0]

        return call, lambda: [result[0].permute(0, 2, 3, 1).contiguous().numpy()]
    if task.op == "softmax":
        X = t[0]
        out = torch.empty_like(X)

        def call() -> object:
            return torch.softmax(X, dim=-1, out=out)

        return call, lambda: [out.numpy()]
    return None


@dataclass(frozen=True)
class TorchPath:
    """One PyTorch path beside a low-precision kernel: `call` times it; `check` compares its
    result with what it should compute (None: matches) and `note` says how it differs from
    the kernel's computation, when it does."""

    name: str
    call: Callable[[], object]
    check: Callable[[], str | None]
    note: str | None = None


QUANTIZED_ENGINES = ("onednn", "x86")
"""The quantized Linear's engines timed: oneDNN's (VNNI / AMX kernels) and the x86 default
(FBGEMM or oneDNN by shape)."""


def lowp_paths(task: Task, inputs: Sequence[np.ndarray], threads: int = 1) -> list[TorchPath]:
    """PyTorch's int8 and bf16 paths for `task` (matmul_int8, dense_int8, matmul_bf16) at
    `threads` threads, on `inputs` (shared, not copied, where PyTorch reads the dtype); []
    without PyTorch or for another operator. Weights are packed here, outside the timed call
    (a quantized Linear packs once, at load)."""
    try:
        import torch
    except Exception:
        return []
    torch.set_num_threads(threads)
    p = task.params
    if task.op == "matmul_int8":
        A, B = inputs
        scale = quantized_ranges(p["k"])["scale"][0]
        return [
            _int_mm(torch, A, B),
            *(
                _quantized_linear(
                    torch, A, B, None, 0, scale, 128, engine, _linear_ref(A, B, scale)
                )
                for engine in _engines(torch)
            ),
        ]
    if task.op == "dense_int8":
        X, W, bias, scale = inputs
        ref = task.reference(inputs)[0]
        return [
            _quantized_linear(
                torch,
                X,
                W,
                bias,
                p["x_zero_point"],
                float(scale[0]),
                p["y_zero_point"],
                engine,
                ref,
            )
            for engine in _engines(torch)
        ]
    if task.op == "matmul_bf16":
        return [_bf16_matmul(torch, *inputs, task.reference(inputs)[0])]
    return []


def _engines(torch: Any) -> list[str]:
    return [e for e in QUANTIZED_ENGINES if e in torch.backends.quantized.supported_engines]


def _int_mm(torch: Any, A: np.ndarray, B: np.ndarray) -> TorchPath:
    """`torch._int_mm`: int8 × int8 → int32 only, so A's uint8 bytes are read as int8 (the same
    work on other values) and checked against numpy's product of those values."""
    a = torch.from_numpy(A.view(np.int8))
    b = torch.from_numpy(np.ascontiguousarray(B))
    out = torch.empty((A.shape[0], B.shape[1]), dtype=torch.int32)

    def call() -> object:
        return torch._int_mm(a, b, out=out)

    def check() -> str | None:
        call()
        return mismatch(out.numpy(), int32_dot(A.view(np.int8), B, ([1], [0])), 1, "C")

    return TorchPath("torch._int_mm", call, check, "s8 × s8 (A's bytes read as int8), not u8 × s8")


def _linear_ref(A: np.ndarray, B: np.ndarray, scale: float) -> np.ndarray:
    """What a quantized Linear computes from matmul_int8's operands: the product requantized to
    uint8 (zero points 0 and 128, bias 0)."""
    acc = int32_dot(A, B, ([1], [0]))
    v = acc.astype(np.float32) * np.float32(scale)
    return np.clip(np.rint(v) + np.float32(128), 0, 255).astype(np.uint8)


def _quantized_linear(
    torch: Any,
    X: np.ndarray,
    W: np.ndarray,
    bias: np.ndarray | None,
    x_zero_point: int,
    scale: float,
    y_zero_point: int,
    engine: str,
    ref: np.ndarray,
) -> TorchPath:
    """`torch.ao.nn.quantized.Linear` on `engine`: X u8 (zero point `x_zero_point`), W s8,
    both scale 1, so the output scale 1/`scale` makes its requantization QNN's (the bias, an
    integer below 2**24, is exact in float32). Checked against `ref` exactly; a rounding
    that breaks ties otherwise than to even shows as outputs off by one."""
    from torch.ao.nn import quantized as nnq

    torch.backends.quantized.engine = engine
    with warnings.catch_warnings():  # quantized tensors are deprecated, not gone (2.13)
        warnings.filterwarnings("ignore", ".*deprecated.*", UserWarning)
        x = torch._make_per_tensor_quantized_tensor(torch.from_numpy(X), 1.0, x_zero_point)
        w = torch._make_per_tensor_quantized_tensor(
            torch.from_numpy(np.ascontiguousarray(W.T)), 1.0, 0
        )
        linear = nnq.Linear(W.shape[0], W.shape[1])
        bias_f = None if bias is None else torch.from_numpy(bias.astype(np.float32))
        linear.set_weight_bias(w, bias_f)
    linear.scale, linear.zero_point = 1.0 / scale, y_zero_point
    result: list[Any] = [None]

    def call() -> object:
        torch.backends.quantized.engine = engine
        result[0] = linear(x)
        return result[0]

    def check() -> str | None:
        call()
        out = result[0].int_repr().numpy()
        return mismatch(out, ref, 1, "Y")

    note = None if bias is not None else "requantizes its int32 product to uint8, as dense_int8"
    return TorchPath(f"quantized Linear ({engine})", call, check, note)


def _bf16_matmul(torch: Any, A: np.ndarray, B: np.ndarray, ref: np.ndarray) -> TorchPath:
    """`torch.matmul` on bfloat16 tensors (the very bf16 values): its output is bfloat16, not
    float32 (the CPU has no bf16 → float32 ``mm``), so the check allows bf16's rounding."""
    a = torch.from_numpy(A.view(np.int16)).view(torch.bfloat16)
    b = torch.from_numpy(B.view(np.int16)).view(torch.bfloat16)
    out = torch.empty((A.shape[0], B.shape[1]), dtype=torch.bfloat16)

    def call() -> object:
        return torch.matmul(a, b, out=out)

    def check() -> str | None:
        call()
        got = out.float().numpy()
        tol = 2.0**-8 * np.abs(ref) + 1e-4 * float(np.abs(ref).max())
        bad = np.abs(got - ref) > tol
        return f"C: {int(bad.sum())} element(s) beyond bf16's rounding" if bad.any() else None

    return TorchPath("torch.matmul bf16", call, check, "rounds its output to bfloat16")
