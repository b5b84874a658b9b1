from __future__ import annotations

import numpy as np
import pytest

from ir.arrays import USER_OFFSET, aligned_copy, aligned_empty, copy_at_offset, offset_of
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


@pytest.mark.parametrize("offset", [0, 4, 16, 32, 60])
def test_aligned_empty_starts_at_the_asked_offset_past_a_64_byte_boundary(offset: int) -> None:
    a = aligned_empty((3, 100), np.float32, offset=offset)
    assert offset_of(a) == offset and a.shape == (3, 100) and a.flags.c_contiguous
    b = copy_at_offset(np.arange(300, dtype=np.float32).reshape(3, 100), offset)
    assert offset_of(b) == offset
    np.testing.assert_array_equal(b, np.arange(300, dtype=np.float32).reshape(3, 100))


def test_an_offset_that_splits_an_element_is_refused_or_rounded_down() -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        aligned_empty((4,), np.float64, offset=4)
    with pytest.raises(ValueError, match=r"in \[0, 64\)"):
        aligned_empty((4,), np.float32, offset=64)
    assert offset_of(copy_at_offset(np.zeros(4, np.float64), 20)) == 16
    assert offset_of(copy_at_offset(np.zeros(4, np.int8), USER_OFFSET)) == USER_OFFSET
