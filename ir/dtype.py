"""Scalar data types: the names used in the IR and their numpy/LLVM meaning.

`bfloat16` (numpy: `ml_dtypes.bfloat16`; LLVM: `bfloat`) is a storage type: the
top 16 bits of a float32. Kernels load it and widen it to float32, which is
exact, and compute in float32; expressions refuse arithmetic on it
(`ir.expr`), so no CPU-dependent bf16 arithmetic or rounding happens between
two operations.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ir.errors import IRError

BFLOAT16 = "bfloat16"
FLOAT_DTYPES = ("float32", "float64", BFLOAT16)
INT_DTYPES = ("int8", "uint8", "int16", "int32", "int64")
DTYPES = (*FLOAT_DTYPES, *INT_DTYPES, "bool")

# The dtype of loop variables, iteration variables and index arithmetic.
INDEX = "int64"


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise IRError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_signed(dtype: str) -> bool:
    return dtype not in ("uint8", "bool")


def bits(dtype: str) -> int:
    return 1 if dtype == "bool" else to_numpy(dtype).itemsize * 8


def itemsize(dtype: str) -> int:
    """Bytes per element as stored in memory (bool is stored as one byte)."""
    return to_numpy(dtype).itemsize


def to_numpy(dtype: str) -> np.dtype:
    if dtype == BFLOAT16:
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np.bool_ if dtype == "bool" else dtype)


def round_bfloat16(value: float) -> float:
    """`value` rounded to the nearest bfloat16 (ties to even), as ml_dtypes rounds."""
    return float(ml_dtypes.bfloat16(value))


def bfloat16_bits(value: float) -> int:
    """The 16 bits of `value` as a bfloat16 (rounded as ml_dtypes rounds)."""
    return int(np.array(value, dtype=ml_dtypes.bfloat16).view(np.uint16))


def min_value(dtype: str) -> float | int:
    if is_float(dtype):
        return float("-inf")
    if dtype == "bool":
        return 0
    return int(np.iinfo(dtype).min)


def max_value(dtype: str) -> float | int:
    if is_float(dtype):
        return float("inf")
    if dtype == "bool":
        return 1
    return int(np.iinfo(dtype).max)
