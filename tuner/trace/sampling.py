"""Sampling decisions and their deterministic repair (pure functions, rng passed in)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def sample_perfect_tile(
    rng: random.Random, extent: int, n: int, max_innermost_factor: int
) -> list[int]:
    """n factors whose product is `extent`, the innermost at most `max_innermost_factor`.

    Each factor is a uniformly chosen divisor of what remains, innermost first,
    so every perfect tiling has a chance.
    """
    factors = [1] * n
    remaining = extent
    for pos in range(n - 1, 0, -1):
        choices = divisors(remaining)
        if pos == n - 1:
            choices = [d for d in choices if d <= max_innermost_factor] or [1]
        d = rng.choice(choices)
        factors[pos] = d
        remaining //= d
    factors[0] = remaining
    return factors


def perfect_tile_fits(
    decision: Sequence[int], extent: int, n: int, max_innermost_factor: int
) -> str | None:
    """None when `decision` is a valid perfect tiling, else why not."""
    if len(decision) != n or not all(
        isinstance(f, int) and not isinstance(f, bool) and f > 0 for f in decision
    ):
        return f"expected {n} positive integer factors, got {list(decision)}"
    if math.prod(decision) != extent:
        return (
            f"factors {list(decision)} multiply to {math.prod(decision)}, not the extent {extent}"
        )
    if decision[-1] > max_innermost_factor:
        return (
            f"innermost factor {decision[-1]} exceeds max_innermost_factor {max_innermost_factor}"
        )
    return None


def _twos(n: int) -> int:
    """How many times 2 divides n (n > 0)."""
    return (n & -n).bit_length() - 1


def _nearest_factor(choices: Sequence[int], target: int, aligned: bool = True) -> int:
    """The choice nearest `target` by ratio, keeping its alignment where it had one.

    A factor that was a multiple of 4 or more (a vector width, a panel) prefers
    the choices sharing the most of its power of two (up to 16): 32 on an extent
    of 1000 becomes 40 (five 8-lane vectors), not 25. Ties go to the smaller.
    Without `aligned` (a reduction loop's tile: nothing is vectorized along it) the
    nearest by ratio wins.
    """
    want = min(_twos(target), 4) if aligned and _twos(target) >= 2 else 0
    best_align = max(min(_twos(c), want) for c in choices)
    keeping = [c for c in choices if min(_twos(c), want) == best_align]
    return min(keeping, key=lambda c: (abs(math.log(c / target)), c))


def repair_perfect_tile(
    decision: Sequence[int], extent: int, n: int, max_innermost_factor: int, *, aligned: bool = True
) -> list[int]:
    """The valid tiling nearest to `decision`: each inner factor becomes the divisor of
    what remains nearest the old one (`_nearest_factor`, keeping vector alignment unless
    not `aligned`); the outermost takes the rest.

    A reduction loop's tiles are not aligned, because the block nearest by ratio runs
    faster than an aligned one: matmul 1024³'s K block of 256 becomes 250 on 1000, not 200
    (which would keep 8 | K block).
    """
    old = list(decision) + [1] * max(0, n - len(decision))
    old = old[-n:] if len(old) > n else old
    factors = [1] * n
    remaining = extent
    for pos in range(n - 1, 0, -1):
        choices = divisors(remaining)
        if pos == n - 1:
            choices = [d for d in choices if d <= max_innermost_factor] or [1]
        target = (
            old[pos]
            if isinstance(old[pos], int) and not isinstance(old[pos], bool) and old[pos] > 0
            else 1
        )
        d = _nearest_factor(choices, target, aligned)
        factors[pos] = d
        remaining //= d
    factors[0] = remaining
    return factors


def cover_innermost_choices(extent: int, max_innermost_factor: int) -> list[int]:
    """Innermost factors of a covering tile: the divisors of `extent`, the powers of two and
    three times the powers of two, up to `max_innermost_factor` and the extent.

    The threes are register-tile rows: 12 x 32 fills 24 of AVX-512's 32 registers with
    accumulators (6 x 16 fills 12 of AVX2's 16), and on matmul 1024³ such a tile over
    1032 rows (a guarded tail of 4) ran 1.03x numpy where the best 8-row tile ran 0.98x.
    """
    top = min(max_innermost_factor, extent)
    twos = {1 << b for b in range(top.bit_length()) if 1 << b <= top}
    threes = {3 * t for t in twos if 3 * t <= top}
    return sorted({d for d in divisors(extent) if d <= top} | twos | threes) or [1]


def sample_cover_tile(
    rng: random.Random, extent: int, n: int, max_innermost_factor: int
) -> list[int]:
    """n factors that cover `extent`, perhaps with some to spare (an imperfect tiling).

    The innermost is a divisor of the extent or a power of two (1000 columns
    take 32-wide tiles: 31 whole ones and a guarded tail of 8, which loop
    partitioning turns into a guard-free main loop and an 8-wide remainder); the
    outer levels are a perfect tiling of the tiles needed, so less than one
    innermost tile is spare. Where the innermost divides the extent this is a
    perfect tiling, drawn as `sample_perfect_tile` draws it.
    """
    inner = rng.choice(cover_innermost_choices(extent, max_innermost_factor))
    if n == 1:
        return [extent]
    tiles = -(-extent // inner)
    return [*sample_perfect_tile(rng, tiles, n - 1, tiles), inner]


def cover_tile_fits(
    decision: Sequence[int], extent: int, n: int, max_innermost_factor: int
) -> str | None:
    """None when `decision` covers `extent` without a level whose last iteration is dead
    everywhere (every perfect tiling qualifies), else why not."""
    if len(decision) != n or not all(
        isinstance(f, int) and not isinstance(f, bool) and f > 0 for f in decision
    ):
        return f"expected {n} positive integer factors, got {list(decision)}"
    if math.prod(decision) < extent:
        return f"factors {list(decision)} multiply to {math.prod(decision)}, less than the extent {extent}"
    if decision[-1] > max_innermost_factor:
        return (
            f"innermost factor {decision[-1]} exceeds max_innermost_factor {max_innermost_factor}"
        )
    for k in range(n):
        inner = math.prod(decision[k + 1 :])
        if (decision[k] - 1) * inner >= extent:
            return f"factors {list(decision)} cover the extent {extent} with level {k} to spare"
    return None


def repair_cover_tile(
    decision: Sequence[int], extent: int, n: int, max_innermost_factor: int
) -> list[int]:
    """The covering tile nearest to `decision`: its inner factors kept where they fit (1024's
    [1, 2, 16, 32] covers 1000 as it is), each level at most what the extent needs, the
    outermost what is left to cover."""
    old = list(decision) + [1] * max(0, n - len(decision))
    old = old[-n:] if len(old) > n else old
    factors = [f if isinstance(f, int) and not isinstance(f, bool) and f > 0 else 1 for f in old]
    if n == 1:
        return [extent]
    choices = cover_innermost_choices(extent, max_innermost_factor)
    if factors[-1] > min(max_innermost_factor, extent):
        factors[-1] = _nearest_factor(choices, factors[-1])
    for k in range(n - 2, 0, -1):
        inner = math.prod(factors[k + 1 :])
        factors[k] = min(factors[k], -(-extent // inner))
    factors[0] = -(-extent // math.prod(factors[1:]))
    return factors


def sample_categorical(rng: random.Random, probabilities: Sequence[float]) -> int:
    return rng.choices(range(len(probabilities)), weights=probabilities, k=1)[0]
