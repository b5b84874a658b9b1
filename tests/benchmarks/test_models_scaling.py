"""The models benchmark's arithmetic without PyTorch: thread counts and own scaling."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.__main__ import _thread_counts
from benchmarks.models.run import own_scaling


def test_rows_above_one_thread_get_their_gain_over_the_models_one_thread_row() -> None:
    rows = [
        {"model": "a", "threads": 1, "loomtune_ms": 10.0},
        {"model": "a", "threads": 2, "loomtune_ms": 6.0},
        {"model": "b", "threads": 2, "loomtune_ms": 3.0},  # no 1-thread row: nothing to say
        {"model": "c", "threads": 1, "loomtune_ms": None},  # wrong, not timed
        {"model": "c", "threads": 2, "loomtune_ms": 4.0},
    ]
    own_scaling(rows)
    assert rows[1]["x_own_1thread"] == pytest.approx(10 / 6)
    assert "x_own_1thread" not in rows[0] and "x_own_1thread" not in rows[2]
    assert "x_own_1thread" not in rows[4]


def test_thread_counts_parse_lists_and_refuse_nonsense() -> None:
    assert _thread_counts("1,2") == [1, 2] and _thread_counts("4") == [4]
    for bad in ("0", "1,x", "", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            _thread_counts(bad)
