"""Scalar data types: the names used in the IR and their numpy/LLVM meaning."""

from __future__ import annotations

import numpy as np

from ir.errors import IRError

FLOAT_DTYPES = ("float32", "float64")
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
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize * 8


def itemsize(dtype: str) -> int:
    """Bytes per element as stored in memory (bool is stored as one byte)."""
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(np.bool_ if dtype == "bool" else dtype)


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
