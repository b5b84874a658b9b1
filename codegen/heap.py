"""Keeping kernels' scratch memory in the C heap, so a call reuses the last call's pages.

A kernel allocates its intermediates (a padded input, a packed panel, Winograd's
transformed tiles) with `aligned_alloc` on every call and frees them on return
(`codegen.emit`). glibc serves a block above its mmap threshold with a fresh mapping
that `free` unmaps, and trims the top of its heap once more than its trim threshold is
free; either way the next call faults its scratch in again, page by page. Both
thresholds move with what the process allocated before, so a kernel's speed depended on
its process's history: ResNet-18's 56² Winograd conv (12 MB of scratch) ran 1.25 ms in
a fresh process and took 1,800 page faults and 4.7 ms per call with the scratch mapped
(docs/decisions.md, Models). Fixing both thresholds keeps freed blocks in the heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit: blocks up to 32 MB come from the heap
TRIM_THRESHOLD = 512 << 20  # free memory at the heap's top kept for the next call
DISABLE_ENV = "LOOMTUNE_KEEP_SCRATCH"  # "0": leave the C library's defaults

_done: bool | None = None


def keep_scratch_in_heap() -> bool:
    """Fix glibc's mmap and trim thresholds once per process (whether they were set: False
    without glibc, or with LOOMTUNE_KEEP_SCRATCH=0)."""
    global _done
    if _done is None:
        _done = os.environ.get(DISABLE_ENV, "1") != "0" and _set_thresholds()
    return _done


def _set_thresholds() -> bool:
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        return False
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
