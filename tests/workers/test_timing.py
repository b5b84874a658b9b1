"""Tests for the timing protocol and the machine description."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import time
from collections.abc import Callable

import numpy as np
import pytest
import threadpoolctl

from workers.machine import MachineInfo, limit_numpy_threads, machine_info
from workers.timing import (
    MeasureConfig,
    Timing,
    balanced_orders,
    time_callable,
    time_interleaved,
    time_more,
)


class Counter:
    """A callable that counts its calls and optionally sleeps."""

    def __init__(self, sleep_s: float = 0.0) -> None:
        self.calls = 0
        self.sleep_s = sleep_s

    def __call__(self) -> None:
        self.calls += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)


# --- MeasureConfig ---------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("warmup", -1),
        ("number", -1),
        ("repeat", 0),
        ("min_repeat_ms", -0.5),
        ("min_repeat_ms", float("nan")),
    ],
)
def test_config_rejects_bad_value_naming_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        MeasureConfig(**{field: value})


def test_config_defaults_and_keyword_only() -> None:
    config = MeasureConfig()
    assert (config.warmup, config.number, config.repeat) == (1, 0, 5)
    assert config.min_repeat_ms == 20.0
    assert config.flush_cache is False
    with pytest.raises(TypeError):
        MeasureConfig(1, 2, 3)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.repeat = 3  # type: ignore[misc]


# --- Timing ------------------------------------------------------------------


def test_timing_statistics() -> None:
    timing = Timing(times_ms=(3.0, 1.0, 2.0, 10.0), number=4)
    assert timing.median_ms == 2.5
    assert timing.min_ms == 1.0
    assert timing.mean_ms == 4.0


# --- time_callable -----------------------------------------------------------


def test_auto_number_makes_a_repeat_last_min_repeat_ms() -> None:
    fn = Counter(sleep_s=0.001)
    config = MeasureConfig(warmup=1, number=0, repeat=3, min_repeat_ms=5.0)
    timing = time_callable(fn, config)
    assert timing.number >= 2
    # Every repeat of `number` calls lasted at least the target.
    assert all(t * timing.number >= config.min_repeat_ms for t in timing.times_ms)
    assert 0.8 <= timing.median_ms <= 20.0


def test_auto_number_for_a_fast_callable_grows_large() -> None:
    fn = Counter()
    timing = time_callable(fn, MeasureConfig(warmup=0, repeat=2, min_repeat_ms=1.0))
    # A counter increment costs well under 10 µs, so >= 100 calls fill 1 ms.
    assert timing.number >= 100
    # number is sized on a calibration run; later repeats may run a little faster.
    assert timing.median_ms * timing.number >= 0.5


def test_slow_callable_keeps_number_one() -> None:
    fn = Counter(sleep_s=0.003)
    timing = time_callable(fn, MeasureConfig(warmup=0, repeat=2, min_repeat_ms=1.0))
    assert timing.number == 1
    assert fn.calls == 1 + 2  # one calibration call, then the repeats


@pytest.mark.parametrize("repeat", [1, 4, 7])
def test_repeat_count_matches_config(repeat: int) -> None:
    timing = time_callable(Counter(), MeasureConfig(number=3, repeat=repeat))
    assert len(timing.times_ms) == repeat
    assert timing.number == 3
    assert all(t >= 0 for t in timing.times_ms)


def test_fixed_number_calls_warmup_plus_repeats_exactly() -> None:
    fn = Counter()
    time_callable(fn, MeasureConfig(warmup=3, number=4, repeat=5))
    assert fn.calls == 3 + 4 * 5


def test_more_repeats_keep_the_first_samples_and_the_number() -> None:
    fn = Counter()
    config = MeasureConfig(warmup=1, number=4, repeat=2)
    first = time_callable(fn, config)
    more = time_more(fn, first, 3, config)
    assert more.times_ms[:2] == first.times_ms and len(more.times_ms) == 5 and more.number == 4
    assert fn.calls == 1 + 4 * 2 + 4 * 3  # no second warm-up or calibration


def test_warmup_happens_with_auto_number() -> None:
    fn = Counter()
    config = MeasureConfig(warmup=7, number=0, repeat=3, min_repeat_ms=0.5)
    timing = time_callable(fn, config)
    # warm-up + at least one calibration run of >= 1 call + the timed calls.
    assert fn.calls >= config.warmup + 1 + timing.number * config.repeat


def test_warmup_precedes_timing() -> None:
    """The first calls are the untimed warm-up: a slow first call does not show."""
    state = {"calls": 0}

    def cold_then_fast() -> None:
        state["calls"] += 1
        if state["calls"] == 1:
            time.sleep(0.05)

    timing = time_callable(cold_then_fast, MeasureConfig(warmup=1, number=1, repeat=3))
    assert timing.min_ms < 25.0 and max(timing.times_ms) < 25.0


# --- time_interleaved --------------------------------------------------------


def _tagger(log: list[str], tag: str, sleep_s: float = 0.0) -> Callable[[], None]:
    def fn() -> None:
        log.append(tag)
        if sleep_s:
            time.sleep(sleep_s)

    return fn


def test_interleaved_alternates_repeats_fixed_number() -> None:
    log: list[str] = []
    config = MeasureConfig(warmup=1, number=2, repeat=3)
    timings = time_interleaved([_tagger(log, "a"), _tagger(log, "b")], config)
    assert log == ["a", "b"] + ["a", "a", "b", "b"] * 3
    assert [len(t.times_ms) for t in timings] == [3, 3]
    assert [t.number for t in timings] == [2, 2]


def test_interleaved_calibrates_each_callable_separately() -> None:
    log: list[str] = []
    fast = _tagger(log, "f")
    slow = _tagger(log, "s", sleep_s=0.001)
    config = MeasureConfig(warmup=1, number=0, repeat=3, min_repeat_ms=2.0)
    t_fast, t_slow = time_interleaved([fast, slow], config)
    # Each got a number suited to its own speed.
    assert t_fast.number > t_slow.number >= 1
    # The timed phase is the tail of the log: blocks alternate f, s, f, s, ...
    block = ["f"] * t_fast.number + ["s"] * t_slow.number
    timed = block * config.repeat
    assert log[-len(timed) :] == timed
    # Warm-up and calibration of each ran before any timed call.
    assert log[0] == "f" and log.count("f") > t_fast.number * config.repeat
    assert t_slow.median_ms > t_fast.median_ms


def test_interleaved_with_one_number_calibrates_on_the_first_only() -> None:
    log: list[str] = []
    fast = _tagger(log, "f")
    slow = _tagger(log, "s", sleep_s=0.001)
    config = MeasureConfig(warmup=1, number=0, repeat=2, min_repeat_ms=2.0)
    t_slow, t_fast = time_interleaved([slow, fast], config, one_number=True)
    assert t_fast.number == t_slow.number >= 1
    # the second was warmed up once, then only timed: no calibration runs of its own
    assert log.count("f") == 1 + t_fast.number * config.repeat


def test_interleaved_rounds_split_the_repeats_and_warm_up_again() -> None:
    """7 repeats in 3 rounds: 2, 2 and 3 repeats, each round after its pause and a
    warm-up of every callable; the samples are pooled."""
    log: list[str] = []
    config = MeasureConfig(warmup=1, number=1, repeat=7)
    start = time.perf_counter()
    timings = time_interleaved(
        [_tagger(log, "a"), _tagger(log, "b")], config, rounds=3, round_pause_s=0.02
    )
    assert time.perf_counter() - start >= 0.04
    assert (
        log
        == ["a", "b"] + ["a", "b"] * 2 + ["a", "b"] + ["a", "b"] * 2 + ["a", "b"] + ["a", "b"] * 3
    )
    assert [len(t.times_ms) for t in timings] == [7, 7]
    # more rounds than repeats: one repeat per round
    log.clear()
    assert [
        len(t.times_ms)
        for t in time_interleaved(
            [_tagger(log, "a")], MeasureConfig(warmup=0, number=1, repeat=2), rounds=5
        )
    ] == [2]
    assert log == ["a", "a"]


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7])
def test_balanced_orders_are_a_williams_design(n: int) -> None:
    """Each order visits every callable once; over the orders each callable holds each
    position and follows each other one equally often (for odd n, within one of each)."""
    orders = balanced_orders(n)
    assert all(sorted(o) == list(range(n)) for o in orders)
    positions = collections.Counter((k, x) for o in orders for k, x in enumerate(o))
    follows = collections.Counter(pair for o in orders for pair in itertools.pairwise(o))
    assert set(follows) == {(a, b) for a in range(n) for b in range(n) if a != b}
    if n % 2 == 0:
        assert len(orders) == n and set(positions.values()) == {1} and set(follows.values()) == {1}
    else:
        assert max(positions.values()) - min(positions.values()) <= 1
        assert max(follows.values()) - min(follows.values()) <= 1


def test_interleaved_balances_the_order_of_three_or_more() -> None:
    """With 4 callables the timed calls follow the balanced orders: no callable right after
    itself, each one first in as many repeats; `fixed_order` keeps a, b, c, d."""
    log: list[str] = []
    config = MeasureConfig(warmup=0, number=1, repeat=8)
    tags = "abcd"
    time_interleaved([_tagger(log, t) for t in tags], config)
    repeats = [log[k : k + 4] for k in range(0, len(log), 4)]
    assert [sorted(r) for r in repeats] == [list(tags)] * 8
    assert all(x != y for x, y in itertools.pairwise(log))
    assert collections.Counter(r[0] for r in repeats) == dict.fromkeys(tags, 2)
    assert repeats[:4] == [[tags[i] for i in o] for o in balanced_orders(4)]
    log.clear()
    time_interleaved([_tagger(log, t) for t in tags], config, fixed_order=True)
    assert log == list(tags) * 8


def test_interleaved_of_nothing_is_empty() -> None:
    assert time_interleaved([], MeasureConfig()) == []


# --- machine -----------------------------------------------------------------


def test_machine_info_fields() -> None:
    info = machine_info()
    assert isinstance(info, MachineInfo)
    assert info.cpu_model and info.python and info.numpy and info.llvm and info.llvmlite
    assert info.logical_cores >= 1
    assert 1 <= info.usable_cores <= info.logical_cores
    assert info.numpy == np.__version__
    for lib in info.blas:
        assert "internal_api" in lib and "num_threads" in lib
    assert machine_info() is info  # cached
    d = info.to_dict()
    assert d["logical_cores"] == info.logical_cores
    d["blas"].append({})  # the dict is a copy
    assert {} not in machine_info().blas


def _blas_threads() -> list[int]:
    return [
        lib["num_threads"]
        for lib in threadpoolctl.threadpool_info()
        if lib.get("user_api") == "blas"
    ]


def test_limit_numpy_threads_limits_and_restores() -> None:
    np.ones(1) @ np.ones(1)  # make sure numpy's BLAS is loaded
    before = _blas_threads()
    if not before:
        pytest.skip("numpy has no BLAS thread pool visible to threadpoolctl")
    with limit_numpy_threads(1):
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before


def test_limit_numpy_threads_rejects_zero() -> None:
    with pytest.raises(ValueError, match="n"), limit_numpy_threads(0):
        pass
