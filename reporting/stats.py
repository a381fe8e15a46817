"""Pure estimators over repeated trials: no I/O, no clock, the same input gives the same output.

pass@k and pass^k use the unbiased estimators over n trials of which c resolved
(Chen et al. 2021 for pass@k; pass^k is its "every one of k draws passes" dual, as
in tau-bench): the chance that k trials drawn without replacement from the n hold
at least one success (pass@k) or only successes (pass^k).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Z_95 = 1.959963984540054  # the 97.5th percentile of the standard normal


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): at least one of k trials drawn from n resolves."""
    _check(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k): all k trials drawn from n resolve (0 when k > c)."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")


def mean_over_fixtures(per_fixture: Sequence[tuple[int, int]], k: int, estimator) -> float:
    """The estimator per fixture (its (n, c)), then averaged: every fixture weighs the same."""
    return statistics.fmean(estimator(n, c, k) for n, c in per_fixture)


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion; (0, 1) when n is 0."""
    if n == 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # At 0 and n the bound is exactly 0 or 1; float rounding would leave 1e-16 either side.
    low = 0.0 if successes == 0 else centre - half
    high = 1.0 if successes == n else centre + half
    return (low, high)


@dataclass(frozen=True)
class Distribution:
    n: int
    median: float | None
    min: float | None
    max: float | None

    def to_json(self) -> dict:
        return {"n": self.n, "median": self.median, "min": self.min, "max": self.max}


def distribution(values: Iterable[float | None]) -> Distribution:
    """Median, min and max of the values that are known (None is left out)."""
    known = sorted(value for value in values if value is not None)
    if not known:
        return Distribution(0, None, None, None)
    # Rounded so that the mean of two middle values reads 0.3455, not 0.34550000000000003.
    return Distribution(len(known), round(statistics.median(known), 6), known[0], known[-1])


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator
