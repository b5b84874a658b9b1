"""PyTorch beside loomtune: the same computation at the kernel's thread count, for the final
comparison."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ir.task import Task


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
