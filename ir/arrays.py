"""Arrays a kernel is run on: 64-byte aligned, as TVM's NDArray and PyTorch allocate.

numpy aligns a large array to 16 bytes only, so where a row of a tile starts
within a cache line differs from one process to the next: an AVX-512 load of
a 64-byte row then spans two lines, and a candidate's time would depend on
which worker process measured it. Aligned buffers make the measurement a
property of the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ALIGNMENT = 64


def aligned_empty(
    shape: Sequence[int], dtype: np.dtype | type, alignment: int = ALIGNMENT
) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `alignment`-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + nbytes].view(dtype).reshape(tuple(shape))


def aligned_copy(a: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
    """`a` as a C-contiguous array on an `alignment`-byte boundary (`a` itself when it is one)."""
    if a.flags.c_contiguous and a.ctypes.data % alignment == 0:
        return a
    out = aligned_empty(a.shape, a.dtype, alignment)
    out[...] = a
    return out
