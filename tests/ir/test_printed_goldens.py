"""Goldens for what people read: the default loop nests and the lowered matmul."""

from __future__ import annotations

from ir.lower import lower
from ir.printer import print_program
from ir.task import library_task


def test_matmul_default_nest(golden) -> None:
    golden(
        "matmul_default.txt",
        print_program(library_task("matmul", {"m": 64, "n": 48, "k": 32}).program),
    )


def test_conv2d_nhwc_default_nest(golden) -> None:
    params = {
        "n": 1,
        "h": 8,
        "w": 8,
        "ci": 4,
        "co": 8,
        "kh": 3,
        "kw": 3,
        "stride": 1,
        "pad": 1,
        "dilation": 1,
    }
    golden("conv2d_nhwc_default.txt", print_program(library_task("conv2d_nhwc", params).program))


def test_matmul_lowered(golden) -> None:
    golden(
        "matmul_lowered.txt",
        print_program(lower(library_task("matmul", {"m": 64, "n": 48, "k": 32}).program)),
    )
