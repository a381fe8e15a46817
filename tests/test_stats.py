"""The estimators and tests against values worked out by hand, published ones, and
brute-force enumerations written apart from the code they check.

The odds-ratio interval is Fisher's test inverted, as R's fisher.test computes it; its bound
for R's own TeaTasting example is checked below to the digits R's root search reaches.
"""

from __future__ import annotations

import itertools
import math
import unittest
from fractions import Fraction

from swarm_fanout.reporting.stats import (
    MAX_TRIALS_SIZED,
    distribution,
    fisher_exact_p,
    fisher_power,
    mean_over_fixtures,
    odds_ratio_interval,
    pass_at_k,
    pass_hat_k,
    ratio,
    trials_for_power,
    trials_needed,
    wilson_interval,
)


class PassAtKTest(unittest.TestCase):
    def test_pass_at_k_and_pass_hat_k_give_the_values_worked_out_by_hand(self):
        for estimator, n, c, k, expected in (
            (pass_at_k, 5, 2, 1, 2 / 5),  # the resolve rate
            (pass_at_k, 5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
            (pass_at_k, 5, 2, 4, 1.0),  # k = 4 > n - c = 3: every draw of 4 holds a success
            (pass_at_k, 4, 1, 4, 1.0),  # pass@n: 1 with one success,
            (pass_at_k, 4, 0, 4, 0.0),  # 0 with none
            (pass_hat_k, 5, 3, 1, 3 / 5),  # the resolve rate
            (pass_hat_k, 5, 3, 2, 0.3),  # C(3,2)/C(5,2) = 3/10
            (pass_hat_k, 5, 3, 4, 0.0),  # k exceeds the successes
            (pass_hat_k, 4, 4, 4, 1.0),  # pass^n: 1 only when every trial resolved
            (pass_hat_k, 4, 3, 4, 0.0),
        ):
            with self.subTest(estimator=estimator.__name__, n=n, c=c, k=k):
                self.assertAlmostEqual(estimator(n, c, k), expected, places=12)

    def test_k_outside_1_to_n_is_refused(self):
        for n, c, k in ((3, 1, 0), (3, 1, 4), (3, 4, 1)):
            with self.subTest(n=n, c=c, k=k), self.assertRaises(ValueError):
                pass_hat_k(n, c, k)

    def test_per_fixture_then_averaged(self):
        # fixture A: 2 of 2 -> pass^2 = 1; fixture B: 1 of 2 -> 0; mean 0.5
        self.assertEqual(mean_over_fixtures([(2, 2), (2, 1)], 2, pass_hat_k), 0.5)
        # pass@1: (1 + 0.5) / 2
        self.assertEqual(mean_over_fixtures([(2, 2), (2, 1)], 1, pass_at_k), 0.75)


class WilsonIntervalTest(unittest.TestCase):
    def test_published_intervals(self):
        # Newcombe 1998, table I (81/263: 0.2553 to 0.3662), and the usual textbook examples:
        # none of ten keeps a nonzero upper bound, all of ten a lower bound below 1.
        for successes, trials, low, high in (
            (5, 10, 0.2366, 0.7634),
            (0, 10, 0.0, 0.2775),
            (10, 10, 0.7225, 1.0),
            (81, 263, 0.2553, 0.3662),
        ):
            with self.subTest(f"{successes}/{trials}"):
                interval = wilson_interval(successes, trials)
                self.assertEqual([round(bound, 4) for bound in interval], [low, high])
        self.assertEqual((wilson_interval(0, 10)[0], wilson_interval(10, 10)[1]), (0.0, 1.0))

    def test_no_trials_is_the_whole_unit_interval(self):
        self.assertEqual(wilson_interval(0, 0), (0.0, 1.0))


class DistributionTest(unittest.TestCase):
    def test_median_min_max_leave_unknown_values_out(self):
        self.assertEqual(
            distribution([3, None, 1, 10, 4]).to_json(),
            {"n": 4, "median": 3.5, "min": 1, "max": 10},
        )

    def test_nothing_known(self):
        self.assertEqual(
            distribution([None]).to_json(), {"n": 0, "median": None, "min": None, "max": None}
        )

    def test_ratio_of_unknown_or_zero_is_none(self):
        self.assertEqual(ratio(6, 3), 2.0)
        self.assertIsNone(ratio(None, 3))
        self.assertIsNone(ratio(6, 0))


def fisher_by_enumeration(a_successes: int, a_n: int, b_successes: int, b_n: int) -> float:
    """Fisher's two-sided p counted out: every way to pick which of the trials resolved (the
    successes fixed, as the test conditions on them) is equally likely with no difference;
    count how often side B (the last b_n trials) gets at most and at least as many as seen,
    and double the rarer of the two, at most 1."""
    trials = a_n + b_n
    successes = a_successes + b_successes
    at_most = at_least = every = 0
    for chosen in itertools.combinations(range(trials), successes):
        on_b = sum(1 for trial in chosen if trial >= a_n)
        at_most += on_b <= b_successes
        at_least += on_b >= b_successes
        every += 1
    return min(1.0, 2 * min(at_most, at_least) / every)


class FisherExactTest(unittest.TestCase):
    def test_six_of_ten_against_nine_of_ten_is_not_decisive(self):
        # Tables with 15 successes of 20 and 10 a side, by B's count x = 5..10:
        # C(10,x) C(10,15-x) = 252, 2100, 5400, 5400, 2100, 252 of C(20,15) = 15504.
        # Seen: x = 9; at least as many: 2100 + 252; twice that.
        self.assertAlmostEqual(fisher_exact_p(6, 10, 9, 10), 4704 / 15504, places=12)

    def test_none_of_ten_against_all_of_ten_is(self):
        # Only the extreme table, 1 / C(20,10), doubled.
        self.assertAlmostEqual(fisher_exact_p(0, 10, 10, 10), 2 / 184756, places=15)

    def test_the_sides_swap_without_changing_p(self):
        self.assertEqual(fisher_exact_p(7, 8, 6, 10), fisher_exact_p(6, 10, 7, 8))
        # B's count 6 of 13 with 8 and 10 trials: at most 6 is 23/102 of the tables.
        self.assertAlmostEqual(fisher_exact_p(7, 8, 6, 10), 46 / 102, places=12)

    def test_equal_rates_give_1(self):
        self.assertEqual(fisher_exact_p(3, 6, 3, 6), 1.0)
        self.assertEqual(fisher_exact_p(5, 5, 7, 7), 1.0)

    def test_every_small_table_agrees_with_counting_out(self):
        # The issue's two examples among them: 4/4 against 0/4 and 0/4 against 5/6.
        for a_n, b_n in ((1, 1), (2, 3), (4, 4), (3, 6), (4, 6), (6, 5)):
            for a, b in itertools.product(range(a_n + 1), range(b_n + 1)):
                with self.subTest(table=f"{a}/{a_n} {b}/{b_n}"):
                    self.assertAlmostEqual(
                        fisher_exact_p(a, a_n, b, b_n),
                        fisher_by_enumeration(a, a_n, b, b_n),
                        places=12,
                    )

    def test_counts_outside_the_trials_are_refused(self):
        with self.assertRaises(ValueError):
            fisher_exact_p(4, 3, 1, 3)


def noncentral_tail(a_n: int, b_n: int, total: int, x: int, psi: float, at_least: bool) -> float:
    """B's chance of at least (or at most) x of `total` successes at odds ratio psi, each
    table weighed C(b_n, y) C(a_n, total - y) psi^y (exact up to the float psi)."""
    support = range(max(0, total - a_n), min(b_n, total) + 1)
    weight = {
        y: Fraction(psi) ** y * math.comb(b_n, y) * math.comb(a_n, total - y) for y in support
    }
    tail = sum(w for y, w in weight.items() if (y >= x if at_least else y <= x))
    return float(tail / sum(weight.values()))


class OddsRatioIntervalTest(unittest.TestCase):
    def test_the_interval_leaves_out_1_exactly_when_p_is_below_005_for_every_small_table(self):
        for a_n, b_n in itertools.product(range(1, 13), repeat=2):
            for a, b in itertools.product(range(a_n + 1), range(b_n + 1)):
                low, high = odds_ratio_interval(a, a_n, b, b_n)
                real = fisher_exact_p(a, a_n, b, b_n) < 0.05
                if real == (low <= 1 <= high):
                    self.fail(f"{a}/{a_n} against {b}/{b_n}: p and ({low}, {high}) disagree")

    def test_a_p_of_exactly_005_is_not_real_and_its_interval_holds_1(self):
        # 0/2 against 13/14: of C(16, 13) = 560 tables, B holds 13 successes in C(14, 13) = 14,
        # its most; a tail of 14/560 = 1/40, so p = 1/20 exactly: not real, and no bound of
        # the interval may cross 1 (held against a float 0.025, the exact 1/40 would).
        for table in ((0, 2, 13, 14), (2, 3, 0, 13)):
            with self.subTest(table=table):
                self.assertEqual(fisher_exact_p(*table), 0.05)
                low, high = odds_ratio_interval(*table)
                self.assertTrue(low <= 1 <= high, (low, high))

    def test_each_bound_is_where_its_tail_is_2_5_percent(self):
        for a, a_n, b, b_n in ((6, 10, 9, 10), (4, 4, 0, 4), (0, 4, 5, 6), (3, 12, 7, 9)):
            total = a + b
            low, high = odds_ratio_interval(a, a_n, b, b_n)
            with self.subTest(table=f"{a}/{a_n} {b}/{b_n}"):
                if low > 0:
                    self.assertAlmostEqual(noncentral_tail(a_n, b_n, total, b, low, True), 0.025, 5)
                if high < math.inf:
                    self.assertAlmostEqual(
                        noncentral_tail(a_n, b_n, total, b, high, False), 0.025, 5
                    )

    def test_the_issues_two_examples(self):
        # 4/4 against 0/4: B's least count, so from 0, and below 1 (p = 0.029).
        low, high = odds_ratio_interval(4, 4, 0, 4)
        self.assertEqual(low, 0.0)
        self.assertLess(high, 1)
        # 0/4 against 5/6: B's most count, so up to inf, and above 1 (p = 0.048).
        low, high = odds_ratio_interval(0, 4, 5, 6)
        self.assertGreater(low, 1)
        self.assertEqual(high, math.inf)

    def test_r_tea_tasting_lower_bound(self):
        # R: fisher.test(matrix(c(3, 1, 1, 3), 2)) gives 0.2117329 to 621.9337505; R's
        # upper bound comes from a root search on 1/psi with a tolerance of about 1e-4, so
        # only the lower bound is held to its digits, the upper one to the mirror image.
        low, high = odds_ratio_interval(1, 4, 3, 4)
        self.assertAlmostEqual(low, 0.2117329, places=5)
        mirrored = odds_ratio_interval(3, 4, 1, 4)
        self.assertAlmostEqual(high, 1 / mirrored[0], delta=high * 1e-5)

    def test_no_successes_or_no_failures_at_all_say_nothing(self):
        self.assertEqual(odds_ratio_interval(0, 5, 0, 7), (0.0, math.inf))
        self.assertEqual(odds_ratio_interval(5, 5, 7, 7), (0.0, math.inf))


def power_by_enumeration(a_rate: float, b_rate: float, trials: int) -> float:
    """Fisher's power counted out: every pair of outcome counts, its binomial chance, kept when
    the counted-out p is below 0.05."""
    power = 0.0
    for a, b in itertools.product(range(trials + 1), repeat=2):
        chance = (
            math.comb(trials, a) * a_rate**a * (1 - a_rate) ** (trials - a)
            * math.comb(trials, b) * b_rate**b * (1 - b_rate) ** (trials - b)
        )  # fmt: skip
        if fisher_by_enumeration(a, trials, b, trials) < 0.05:
            power += chance
    return power


class PowerTest(unittest.TestCase):
    def test_fishers_power_agrees_with_counting_out(self):
        for a_rate, b_rate, trials in ((0.6, 0.9, 5), (0.1, 0.8, 6), (0.5, 0.5, 4), (1.0, 0.0, 3)):
            with self.subTest(rates=(a_rate, b_rate), trials=trials):
                self.assertAlmostEqual(
                    fisher_power(a_rate, b_rate, trials),
                    power_by_enumeration(a_rate, b_rate, trials),
                    places=10,
                )

    def test_all_against_none_needs_four_trials_a_side(self):
        # 3/3 against 0/3 is p = 0.10; 4/4 against 0/4 p = 0.029, every time at rates 1 and 0.
        self.assertEqual(trials_needed(2, 2, 0, 2), 4)
        self.assertEqual(fisher_power(1.0, 0.0, 3), 0.0)
        self.assertEqual(fisher_power(1.0, 0.0, 4), 1.0)

    def test_trials_needed_is_the_least_with_80_percent_power(self):
        needed = trials_needed(6, 10, 9, 10)
        self.assertGreaterEqual(fisher_power(0.6, 0.9, needed), 0.8)
        self.assertLess(fisher_power(0.6, 0.9, needed - 1), 0.8)

    def test_trials_needed_counts_the_trials_run(self):
        # Every table of up to 8 trials a side, equal counts, that the test cannot call: a
        # study of the size given is larger than the one that ran.
        for trials in range(1, 9):
            for a, b in itertools.combinations(range(trials + 1), 2):
                if abs(a - b) * 2 < trials or fisher_exact_p(a, trials, b, trials) < 0.05:
                    continue  # near-equal rates need studies too large for a quick test
                with self.subTest(table=f"{a}/{trials} {b}/{trials}"):
                    self.assertGreater(trials_needed(a, trials, b, trials), trials)

    def test_equal_rates_have_no_difference_to_detect(self):
        self.assertIsNone(trials_needed(3, 6, 2, 4))
        self.assertIsNone(trials_for_power(0.5, 0.5))

    def test_a_tiny_difference_is_only_called_larger_than_the_cap(self):
        self.assertEqual(trials_needed(50, 100, 52, 100), MAX_TRIALS_SIZED + 1)

    def test_the_normal_approximation_the_search_starts_from(self):
        # z = 1.95996, 0.84162; pooled 0.75: (1.95996 sqrt(2 x 0.75 x 0.25)
        # + 0.84162 sqrt(0.24 + 0.09))^2 / 0.3^2 = 2.83486 / 0.09 = 31.5, so 32.
        self.assertEqual(trials_for_power(0.6, 0.9), 32)
        self.assertEqual(trials_for_power(0.9, 0.6), 32)


if __name__ == "__main__":
    unittest.main()
