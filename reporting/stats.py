"""Pure estimators over repeated trials: no I/O, no clock, the same input gives the same output.

pass@k and pass^k use the unbiased estimators over n trials of which c resolved
(Chen et al. 2021 for pass@k; pass^k is its "every one of k draws passes" dual, as
in tau-bench): the chance that k trials drawn without replacement from the n hold
at least one success (pass@k) or only successes (pass^k).

Two sets of trials are compared with exact tests, so that a handful of trials gives a
p-value that holds without a large-sample approximation: Fisher's exact test for two
independent sets, McNemar's exact test for paired trials, and Newcombe's hybrid score
interval (Newcombe 1998, method 10) for the difference of two rates. Only the number of
trials a study would need is a normal approximation, and says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist

Z_95 = 1.959963984540054  # the 97.5th percentile of the standard normal
ALPHA = 0.05  # two-sided: a difference with p below it is called real
POWER = 0.8  # the chance a study of the suggested size detects a difference of the size seen


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


# --- comparing two sets of trials -------------------------------------------------------------


def rate_difference_interval(
    a_successes: int, a_n: int, b_successes: int, b_n: int, z: float = Z_95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval for b/b_n - a/a_n, from the two Wilson intervals:
    each side of the difference widens by the distances of the two rates to their own
    Wilson bounds on that side, added in quadrature."""
    if a_n == 0 or b_n == 0:
        raise ValueError(f"need trials on both sides, got {a_n} and {b_n}")
    a_rate, b_rate = a_successes / a_n, b_successes / b_n
    a_low, a_high = wilson_interval(a_successes, a_n, z)
    b_low, b_high = wilson_interval(b_successes, b_n, z)
    delta = b_rate - a_rate
    low = delta - math.hypot(b_rate - b_low, a_high - a_rate)
    high = delta + math.hypot(b_high - b_rate, a_rate - a_low)
    # Rounding may leave a bound 1e-16 past the difference's range of -1 to 1.
    return (max(low, -1.0), min(high, 1.0))


def fisher_exact_p(a_successes: int, a_n: int, b_successes: int, b_n: int) -> float:
    """Two-sided p of Fisher's exact test of two independent sets of trials: given how many
    trials there are on each side and how many resolved in all, the chance of a split at
    most as likely as the one seen (hypergeometric; the likelihoods compared as exact
    integers, so ties are counted in without a tolerance)."""
    if not (0 <= a_successes <= a_n and 0 <= b_successes <= b_n):
        raise ValueError(f"need 0 <= successes <= n, got {a_successes}/{a_n}, {b_successes}/{b_n}")
    total = a_successes + b_successes
    # The number of ways to seat x of the `total` successes on side A: C(a_n, x) C(b_n, total - x).
    ways = {
        x: math.comb(a_n, x) * math.comb(b_n, total - x)
        for x in range(max(0, total - b_n), min(a_n, total) + 1)
    }
    seen = ways[a_successes]
    as_likely = sum(count for count in ways.values() if count <= seen)
    return float(Fraction(as_likely, math.comb(a_n + b_n, total)))


def mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """Two-sided p of McNemar's exact test on paired trials: of the discordant pairs (one side
    resolved, the other not), `a_only` went A's way and `b_only` B's. With no difference each
    goes either way with chance 1/2: twice the binomial tail of the smaller count, at most 1."""
    if a_only < 0 or b_only < 0:
        raise ValueError(f"need counts >= 0, got {a_only} and {b_only}")
    discordant = a_only + b_only
    tail = sum(math.comb(discordant, i) for i in range(min(a_only, b_only) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**discordant)))


def _z(probability: float) -> float:
    return NormalDist().inv_cdf(probability)


def trials_for_power(
    a_rate: float, b_rate: float, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """Trials a side for a two-sided test at `alpha` to detect the difference between these
    two rates with chance `power`: the normal approximation for two independent proportions
    (Fleiss, Levin and Paik 2003, eq. 4.14, without continuity correction). None when the
    rates are equal: there is no difference to detect."""
    if a_rate == b_rate:
        return None
    pooled = (a_rate + b_rate) / 2
    spread = _z(1 - alpha / 2) * math.sqrt(2 * pooled * (1 - pooled)) + _z(power) * math.sqrt(
        a_rate * (1 - a_rate) + b_rate * (1 - b_rate)
    )
    return math.ceil(spread**2 / (a_rate - b_rate) ** 2)


def pairs_for_power(
    a_only: int, b_only: int, pairs: int, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """Paired trials for McNemar's test at `alpha` to detect, with chance `power`, a
    difference with the discordance seen (a_only and b_only of `pairs`): the normal
    approximation of Connor (1987). None when the discordant pairs split evenly."""
    if pairs <= 0:
        raise ValueError(f"need pairs > 0, got {pairs}")
    if a_only == b_only:
        return None
    discordant = (a_only + b_only) / pairs
    difference = (b_only - a_only) / pairs
    spread = _z(1 - alpha / 2) * math.sqrt(discordant) + _z(power) * math.sqrt(
        discordant - difference**2
    )
    return math.ceil(spread**2 / difference**2)
