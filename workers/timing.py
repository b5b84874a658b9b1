"""The timing protocol: warm up, size a repeat, then time several repeats.

One protocol serves every measurement in loomtune, so a kernel and its numpy
baseline are timed the same way. A repeat is `number` back-to-back calls; its
per-call mean is one sample. Several samples give a median that is robust to
the occasional interruption (a context switch, a page fault).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Calibration grows `number` by at least this factor per step, so it needs few
# steps even when a call is far faster than the timer's noise floor.
_MIN_GROWTH = 2.0
# ...and by at most this factor, so one noisy short run cannot make a repeat
# last minutes.
_MAX_GROWTH = 100.0
# Aim a little above the target so the next repeat clears it despite jitter.
_OVERSHOOT = 1.2
# Upper bound on calls per repeat: a no-op callable must not loop forever.
_MAX_NUMBER = 1 << 30


@dataclass(frozen=True, kw_only=True)
class MeasureConfig:
    """How a callable is timed.

    Attributes:
        warmup: calls made before anything is timed (caches, page faults,
            lazy initialisation); not counted.
        number: calls per repeat. 0 sizes it automatically: the smallest
            number found by doubling-style growth from 1 such that one repeat
            lasts at least `min_repeat_ms`.
        repeat: timed repeats; each yields one per-call time sample.
        min_repeat_ms: minimum duration of one repeat in milliseconds, used
            only when `number` is 0. Long enough that timer resolution and
            call overhead are negligible.
        flush_cache: before each repeat, write a buffer twice the size of
            the last-level cache, so the repeat's first call starts cold (the
            kernel's data is no longer cached). Off by default: a tuned kernel
            usually runs back to back with its neighbours in cache.
    """

    warmup: int = 1
    number: int = 0
    repeat: int = 5
    min_repeat_ms: float = 20.0
    flush_cache: bool = False

    def __post_init__(self) -> None:
        # Reject bad values here so a typo fails at configuration time, not
        # after minutes of tuning.
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if self.number < 0:
            raise ValueError(f"number must be >= 0 (0 = automatic), got {self.number}")
        if self.repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {self.repeat}")
        if not self.min_repeat_ms >= 0:  # also rejects NaN
            raise ValueError(f"min_repeat_ms must be >= 0, got {self.min_repeat_ms}")


@dataclass(frozen=True)
class Timing:
    """The result of timing one callable.

    Attributes:
        times_ms: per-call mean time of each repeat, in milliseconds, in the
            order the repeats ran.
        number: calls per repeat that produced each sample.
    """

    times_ms: tuple[float, ...]
    number: int

    @property
    def median_ms(self) -> float:
        """Median per-call time in ms: the figure loomtune reports and ranks by."""
        return statistics.median(self.times_ms)

    @property
    def min_ms(self) -> float:
        """Fastest per-call time in ms: the least disturbed repeat."""
        return min(self.times_ms)

    @property
    def mean_ms(self) -> float:
        """Mean per-call time in ms."""
        return statistics.fmean(self.times_ms)


def _run_ns(fn: Callable[[], object], number: int) -> int:
    """Call `fn` `number` times back to back; return the elapsed nanoseconds."""
    start = time.perf_counter_ns()
    for _ in range(number):
        fn()
    return time.perf_counter_ns() - start


def _warm_up(fn: Callable[[], object], config: MeasureConfig) -> None:
    for _ in range(config.warmup):
        fn()


def _calibrate(fn: Callable[[], object], config: MeasureConfig) -> int:
    """Choose calls per repeat so that one repeat lasts >= min_repeat_ms.

    Starts at 1 and grows by the ratio the last run says is needed, bounded to
    [x2, x100] per step, until a measured run reaches the target. A fixed
    `config.number` is returned as is.
    """
    if config.number > 0:
        return config.number
    target_ns = config.min_repeat_ms * 1e6
    number = 1
    while True:
        elapsed_ns = _run_ns(fn, number)
        if elapsed_ns >= target_ns or number >= _MAX_NUMBER:
            return number
        if elapsed_ns > 0:
            growth = target_ns * _OVERSHOOT / elapsed_ns
        else:
            growth = _MAX_GROWTH
        growth = min(max(growth, _MIN_GROWTH), _MAX_GROWTH)
        number = min(math.ceil(number * growth), _MAX_NUMBER)


def last_level_cache_bytes() -> int:
    """The largest CPU cache of cpu0 per sysfs, 32 MiB when it cannot be read."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        try:
            value = int(text.rstrip("KMG"))
        except ValueError:
            continue
        sizes.append(value * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1))
    return max(sizes, default=32 << 20)


_flush_buffer: list[np.ndarray] = []
MAX_FLUSH_BYTES = 128 << 20
"""Virtual machines may report the whole socket's L3 (hundreds of MiB); one core's
share is far smaller, and a flush must not cost more than the timing itself."""


def flush_caches() -> None:
    """Evict the caches by writing a buffer twice the last-level cache's size (capped)."""
    if not _flush_buffer:
        size = min(2 * last_level_cache_bytes(), MAX_FLUSH_BYTES)
        _flush_buffer.append(np.empty(size // 8, dtype=np.float64))
    _flush_buffer[0].fill(1.0)


def _sample_ms(fn: Callable[[], object], number: int, flush: bool = False) -> float:
    """One repeat: per-call mean time in ms."""
    if flush:
        flush_caches()
    return _run_ns(fn, number) / number / 1e6


def _samples(fn: Callable[[], object], number: int, repeat: int, flush: bool) -> tuple[float, ...]:
    return tuple(_sample_ms(fn, number, flush) for _ in range(repeat))


def time_callable(fn: Callable[[], object], config: MeasureConfig) -> Timing:
    """Time `fn` with the loomtune protocol: warm-up, calibrate, repeats.

    Total calls: warmup + calibration calls (none if `number` is fixed) +
    number * repeat.
    """
    _warm_up(fn, config)
    number = _calibrate(fn, config)
    return Timing(times_ms=_samples(fn, number, config.repeat, config.flush_cache), number=number)


def time_more(
    fn: Callable[[], object], timing: Timing, repeat: int, config: MeasureConfig
) -> Timing:
    """`timing` with `repeat` more repeats of the same `number` calls appended.

    For a second look at a candidate whose few repeats put it among the best:
    the minimum over many noisy medians favours lucky draws (the winner's
    curse), and more repeats make the median of the ones that matter honest.
    """
    more = _samples(fn, timing.number, repeat, config.flush_cache)
    return Timing(times_ms=timing.times_ms + more, number=timing.number)


def time_interleaved(
    fns: Sequence[Callable[[], object]],
    config: MeasureConfig,
    *,
    pause_s: float = 0.0,
    rounds: int = 1,
    round_pause_s: float = 0.0,
    one_number: bool = False,
    fixed_order: bool = False,
) -> list[Timing]:
    """Time several callables with their repeats interleaved.

    Each callable is warmed up and calibrated on its own (each gets its own
    `number`); then repeats alternate fn0, fn1, ..., fn0, fn1, ... so that a
    slow phase of the machine (frequency scaling, a noisy neighbour) lands on
    all of them alike. This is how a kernel is compared with numpy in one run.
    With three or more callables each repeat visits them in the next of
    `balanced_orders`, so none always follows the same other one; `fixed_order`
    keeps fn0, fn1, ... (callables whose order is part of what is measured).

    `pause_s` (untimed) goes before every repeat: OpenBLAS's worker threads
    spin for a while after a call and would steal the cores of a
    multi-threaded kernel timed right after numpy.

    `rounds` > 1 spreads the repeats over that many rounds `round_pause_s`
    apart, each warmed up again, and pools their samples: a shared VM has slow
    phases of seconds (a whole call 1.4x slower, unevenly for its callables),
    and one phase should cost a minority of the samples, not the median.

    `one_number`: calibrate on the first callable only and give every one its
    `number` (one kernel on arrays at several addresses: their times differ by
    a few percent, and calibration costs as much as a repeat).
    """
    numbers: list[int] = []
    for fn in fns:
        _warm_up(fn, config)
        numbers.append(numbers[0] if numbers and one_number else _calibrate(fn, config))
    samples: list[list[float]] = [[] for _ in fns]
    orders = [list(range(len(fns)))] if fixed_order else balanced_orders(len(fns))
    rounds = max(1, min(rounds, config.repeat))
    done, last = 0, -1
    for r in range(rounds):
        if r > 0:
            time.sleep(round_pause_s)
            for fn in fns:
                _warm_up(fn, config)
        for _ in range(config.repeat * (r + 1) // rounds - config.repeat * r // rounds):
            order = orders[done % len(orders)]
            if len(order) > 1 and order[0] == last:  # not right after itself: still in cache
                order = [order[1], order[0], *order[2:]]
            for i in order:
                if pause_s > 0:
                    time.sleep(pause_s)
                samples[i].append(_sample_ms(fns[i], numbers[i], config.flush_cache))
            done, last = done + 1, order[-1] if order else -1
    return [Timing(times_ms=tuple(s), number=n) for s, n in zip(samples, numbers)]


def balanced_orders(n: int) -> list[list[int]]:
    """The orders in which successive repeats of `time_interleaved` visit n callables: a
    Williams design (for odd n, the one of n + 1 without its last symbol), so each callable
    holds each position and follows each other callable about equally often. With one fixed
    order each callable always followed the same one: one that read the same arrays left
    them in cache, one that read others did not, a bias of about 2 % (docs/decisions.md)."""
    if n <= 2:
        return [list(range(n))]
    m = n + n % 2
    first, low, high = [0], 1, m - 1
    while len(first) < m:
        if len(first) % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    return [[(x + r) % m for x in first if (x + r) % m < n] for r in range(m)]
