"""Arrays a kernel is run on: at fixed offsets from a 64-byte boundary.

Where a tile's rows start within a cache line decides whether an AVX-512 load
spans two lines, so a kernel's time depends on its arrays' addresses modulo
64: up to 28% on the znver5 VM (batch_matmul candidates), 11-35% on Intel
(issue 36). numpy's arrays start wherever malloc puts them: a large one
(mmap'ed) 16 bytes past a page (`USER_OFFSET`), a small one on any 16-byte
boundary; models' arenas, PyTorch and TVM start theirs on a 64-byte boundary
(`aligned_empty`). Candidates are timed at both (`TIMED_OFFSETS`) and count
at the slower, so the search picks kernels whose speed holds on the arrays
users pass, and a time does not depend on where the measuring process's
allocator put its buffers (docs/decisions.md, "Candidates are timed at two
offsets").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ALIGNMENT = 64
USER_OFFSET = 16
"""Bytes past a 64-byte boundary where numpy's large arrays start (glibc's mmap'ed chunk
header)."""
TIMED_OFFSETS = (USER_OFFSET, 0)
"""The offsets a candidate is timed at (its time is the slower): numpy's, and the 64-byte
boundary models' arenas, PyTorch and TVM use. Any other element-aligned offset behaved as 16
does on the kernels measured (docs/decisions.md)."""


def aligned_empty(
    shape: Sequence[int], dtype: np.dtype | type, alignment: int = ALIGNMENT, offset: int = 0
) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts `offset` bytes past an
    `alignment`-byte boundary (0: on it)."""
    dtype = np.dtype(dtype)
    if not 0 <= offset < alignment or offset % dtype.itemsize:
        raise ValueError(
            f"offset {offset} must be a multiple of {dtype.itemsize} (the element size) "
            f"in [0, {alignment})"
        )
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 2 * alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment + offset
    return raw[start : start + nbytes].view(dtype).reshape(tuple(shape))


def copy_at_offset(a: np.ndarray, offset: int, alignment: int = ALIGNMENT) -> np.ndarray:
    """A C-contiguous copy of `a` whose data starts `offset` bytes past an `alignment`-byte
    boundary (rounded down to a multiple of the element size): an array as a user's
    allocator might hand it over."""
    offset -= offset % a.dtype.itemsize
    out = aligned_empty(a.shape, a.dtype, alignment, offset)
    out[...] = a
    return out


def offset_of(a: np.ndarray, alignment: int = ALIGNMENT) -> int:
    """Bytes past the last `alignment`-byte boundary where `a`'s data starts."""
    return int(a.ctypes.data % alignment)


def aligned_copy(a: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
    """`a` as a C-contiguous array on an `alignment`-byte boundary (`a` itself when it is one)."""
    if a.flags.c_contiguous and a.ctypes.data % alignment == 0:
        return a
    out = aligned_empty(a.shape, a.dtype, alignment)
    out[...] = a
    return out
