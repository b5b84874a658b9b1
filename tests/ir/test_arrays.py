from __future__ import annotations

import numpy as np
import pytest

from ir.arrays import aligned_copy, aligned_empty
from ir.task import library_task
from workers.verify import empty_outputs


@pytest.mark.parametrize("shape", [(), (1,), (3, 5), (128, 768), (2, 3, 7)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
def test_aligned_empty_starts_on_a_64_byte_boundary(shape: tuple[int, ...], dtype: type) -> None:
    a = aligned_empty(shape, dtype)
    assert a.shape == shape and a.dtype == np.dtype(dtype)
    assert a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % 64 == 0


def test_aligned_copy_keeps_the_values_and_copies_only_when_needed() -> None:
    base = aligned_empty((65,), np.float32)
    base[...] = np.arange(65)
    shifted = base[1:]  # 4 bytes past the boundary
    assert shifted.ctypes.data % 64 == 4
    copy = aligned_copy(shifted)
    assert copy.ctypes.data % 64 == 0
    np.testing.assert_array_equal(copy, np.arange(1, 65, dtype=np.float32))
    assert aligned_copy(base) is base
    strided = np.arange(20, dtype=np.float32)[::2]
    np.testing.assert_array_equal(aligned_copy(strided), strided)
    assert aligned_copy(strided).flags.c_contiguous


def test_kernel_inputs_and_outputs_are_aligned_and_reproducible() -> None:
    task = library_task("dense", {"m": 5, "k": 7, "n": 9, "bias": 1, "relu": 1})
    first, again = task.make_inputs(3), task.make_inputs(3)
    for a, b in zip(first, again):
        assert a.ctypes.data % 64 == 0
        np.testing.assert_array_equal(a, b)
    for out in empty_outputs(task.output_specs()):
        assert out.ctypes.data % 64 == 0 and np.isnan(out).all()
