"""Pure estimators over repeated trials: no I/O, no clock, the same input gives the same output.

pass@k and pass^k use the unbiased estimators over n trials of which c resolved
(Chen et al. 2021 for pass@k; pass^k is its "every one of k draws passes" dual, as
in tau-bench): the chance that k trials drawn without replacement from the n hold
at least one success (pass@k) or only successes (pass^k).

Two sets of trials are compared with one exact test, so that a handful of trials gives a
p-value that holds without a large-sample approximation, and everything said of the
comparison comes from that test: Fisher's exact test, two-sided as twice its smaller tail;
the 95% interval of the odds ratio is that test inverted (the ratios it does not reject),
so the interval leaves out 1 exactly when p < 0.05; the trials a study needs are the
trials at which that test has 80% power.
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
#
# Given n_a and n_b trials and m successes in all, B's successes x follow Fisher's noncentral
# hypergeometric law: P(x) is proportional to C(n_b, x) C(n_a, m - x) psi^x, psi being the odds
# ratio, B's odds of resolving over A's. With no difference psi = 1.

MAX_TRIALS_SIZED = 1000  # trials a side beyond which a study is only called larger, not sized


def fisher_tails(
    a_successes: int, a_n: int, b_successes: int, b_n: int
) -> tuple[Fraction, Fraction]:
    """With no difference (psi = 1), given the trials on each side and the successes in all:
    the chances that B resolves at most, and at least, as many as it did (exact)."""
    if not (0 <= a_successes <= a_n and 0 <= b_successes <= b_n):
        raise ValueError(f"need 0 <= successes <= n, got {a_successes}/{a_n}, {b_successes}/{b_n}")
    total = a_successes + b_successes
    ways = {x: math.comb(b_n, x) * math.comb(a_n, total - x) for x in _support(a_n, b_n, total)}
    everything = math.comb(a_n + b_n, total)
    at_most = sum(count for x, count in ways.items() if x <= b_successes)
    at_least = sum(count for x, count in ways.items() if x >= b_successes)
    return Fraction(at_most, everything), Fraction(at_least, everything)


def fisher_exact_p(a_successes: int, a_n: int, b_successes: int, b_n: int) -> float:
    """Two-sided p of Fisher's exact test of two independent sets of trials: twice the smaller
    of its two tails (`fisher_tails`), at most 1. Doubling the smaller tail, rather than adding
    up the tables at most as likely as the one seen, is what lets the test be inverted into an
    interval that agrees with it (`odds_ratio_interval`)."""
    return min(map(_doubled, fisher_tails(a_successes, a_n, b_successes, b_n)))


def _doubled(tail: Fraction) -> float:
    """A tail as the p-value it gives: doubled, at most 1, in floats. The interval decides
    which side of 1 its bounds are on from these same numbers, so that p and the interval
    agree even at p = alpha exactly."""
    return float(min(Fraction(1), 2 * tail))


def odds_ratio_interval(
    a_successes: int, a_n: int, b_successes: int, b_n: int, alpha: float = ALPHA
) -> tuple[float, float]:
    """Fisher's test inverted: the odds ratios psi (B's odds over A's) at which neither tail of
    B's count is below alpha/2, so those that `fisher_exact_p`'s test would not reject. 0 (or
    inf) when B's count is the least (or the most) it could be. The interval leaves 1 out
    exactly when p < alpha: the exact tails at psi = 1 decide which side of 1 each bound is
    on (as `_doubled` gives them), and the search for the bound never leaves that side."""
    at_most, at_least = fisher_tails(a_successes, a_n, b_successes, b_n)
    total = a_successes + b_successes
    support = _support(a_n, b_n, total)
    base = [(y, _log_comb(b_n, y) + _log_comb(a_n, total - y)) for y in support]
    x = b_successes

    def tail_ok(log_psi: float, at_least: bool) -> bool:
        """P(B's successes >= x), or <= x, under odds ratio e^log_psi, is at least alpha/2."""
        weights = [(y, weight + y * log_psi) for y, weight in base]
        top = max(weight for _, weight in weights)
        every = [(y, math.exp(weight - top)) for y, weight in weights]
        tail = sum(w for y, w in every if (y >= x if at_least else y <= x))
        return tail / sum(w for _, w in every) >= alpha / 2

    low, high = 0.0, math.inf
    if x > support.start:  # the upper tail rises with psi
        low = math.exp(_first_true(lambda t: tail_ok(t, True), _doubled(at_least) >= alpha))
    if x < support.stop - 1:  # the lower tail falls with psi
        high = math.exp(-_first_true(lambda t: tail_ok(-t, False), _doubled(at_most) >= alpha))
    return (low, high)


def _support(a_n: int, b_n: int, total: int) -> range:
    """B's possible successes, given `total` in all."""
    return range(max(0, total - a_n), min(b_n, total) + 1)


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _first_true(rises, true_at_0: bool, tolerance: float = 1e-6) -> float:
    """The least t at which `rises` (false below some t, true from there on) is true, found by
    bisection to `tolerance`, and on the side of 0 that `true_at_0` (decided exactly by the
    caller) says: at or below 0 when true there, above 0 when not. The point returned is
    always one at which `rises` holds."""
    false_at, true_at = (None, 0.0) if true_at_0 else (0.0, None)
    step = -1.0 if true_at_0 else 1.0
    while false_at is None or true_at is None:  # widen from 0 until both ends are found
        if rises(step):
            true_at = step
        else:
            false_at = step
        step *= 2
    while true_at - false_at > tolerance:
        middle = (false_at + true_at) / 2
        if rises(middle):
            true_at = middle
        else:
            false_at = middle
    return true_at


def fisher_power(a_rate: float, b_rate: float, trials: int, alpha: float = ALPHA) -> float:
    """The chance that Fisher's test, as `fisher_exact_p` does it at `alpha`, calls the
    difference real when each side runs `trials` trials and A and B resolve at these rates:
    every table of outcomes weighed by its chance, those the test rejects added up."""
    a_chance = _binomial(trials, a_rate)
    b_chance = _binomial(trials, b_rate)
    log_comb = [_log_comb(trials, k) for k in range(trials + 1)]
    power = 0.0
    for total in range(2 * trials + 1):
        support = _support(trials, trials, total)
        logs = [log_comb[x] + log_comb[total - x] for x in support]
        top = max(logs)
        weights = [math.exp(weight - top) for weight in logs]
        whole = sum(weights)
        below = 0.0
        above = whole
        for x, weight in zip(support, weights, strict=True):
            below += weight
            # p < alpha: twice the smaller tail below alpha (the tails include x itself)
            if min(below, above) / whole < alpha / 2:
                power += b_chance[x] * a_chance[total - x]
            above -= weight
    return power


def _binomial(n: int, rate: float) -> list[float]:
    if rate in (0.0, 1.0):
        return [1.0 if k == round(rate * n) else 0.0 for k in range(n + 1)]
    return [
        math.exp(_log_comb(n, k) + k * math.log(rate) + (n - k) * math.log1p(-rate))
        for k in range(n + 1)
    ]


def trials_needed(
    a_successes: int, a_n: int, b_successes: int, b_n: int, power: float = POWER
) -> int | None:
    """Trials a side, in all (those already run counted), at which Fisher's test has chance
    `power` of calling the difference real if A and B resolve at the rates seen: the least such
    number from the larger side's trials up, found by bisection (power rises with the trials,
    in steps). None when the rates are equal: there is no difference to detect. More than
    MAX_TRIALS_SIZED is given as MAX_TRIALS_SIZED + 1."""
    a_rate, b_rate = a_successes / a_n, b_successes / b_n
    if a_rate == b_rate:
        return None
    enough = lambda trials: fisher_power(a_rate, b_rate, trials) >= power  # noqa: E731
    short = max(a_n, b_n)
    if enough(short):
        return short
    guess = trials_for_power(a_rate, b_rate)
    if guess > MAX_TRIALS_SIZED and not enough(MAX_TRIALS_SIZED):
        return MAX_TRIALS_SIZED + 1
    plenty = max(short + 1, min(guess, MAX_TRIALS_SIZED))
    while not enough(plenty):
        short = plenty
        if plenty == MAX_TRIALS_SIZED:
            return MAX_TRIALS_SIZED + 1
        plenty = min(2 * plenty, MAX_TRIALS_SIZED)
    while plenty - short > 1:
        middle = (short + plenty) // 2
        short, plenty = (short, middle) if enough(middle) else (middle, plenty)
    return plenty


def _z(probability: float) -> float:
    return NormalDist().inv_cdf(probability)


def trials_for_power(
    a_rate: float, b_rate: float, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """The normal approximation of `trials_needed` (Fleiss, Levin and Paik 2003, eq. 4.14,
    without continuity correction), where its search starts. None when the rates are equal."""
    if a_rate == b_rate:
        return None
    pooled = (a_rate + b_rate) / 2
    spread = _z(1 - alpha / 2) * math.sqrt(2 * pooled * (1 - pooled)) + _z(power) * math.sqrt(
        a_rate * (1 - a_rate) + b_rate * (1 - b_rate)
    )
    return math.ceil(spread**2 / (a_rate - b_rate) ** 2)
