"""The estimators and tests against values worked out by hand, published ones, and
brute-force enumerations written apart from the code they check.

Cross-checked once, outside the project, with scipy 1.17.1 and statsmodels 0.15.0 (never a
dependency): scipy.stats.fisher_exact and scipy.stats.binomtest(k, n, 0.5) give the Fisher
and McNemar p-values below to every printed digit, statsmodels'
confint_proportions_2indep(method="newcomb") the Newcombe intervals.
"""

from __future__ import annotations

import itertools
import unittest

from reporting.stats import (
    distribution,
    fisher_exact_p,
    mcnemar_exact_p,
    mean_over_fixtures,
    pairs_for_power,
    pass_at_k,
    pass_hat_k,
    rate_difference_interval,
    ratio,
    trials_for_power,
    wilson_interval,
)


class PassAtKTest(unittest.TestCase):
    def test_pass_at_1_is_the_resolve_rate(self):
        self.assertAlmostEqual(pass_at_k(5, 2, 1), 2 / 5)

    def test_pass_at_2_of_5_with_2_resolved(self):
        # 1 - C(3,2)/C(5,2) = 1 - 3/10
        self.assertAlmostEqual(pass_at_k(5, 2, 2), 0.7)

    def test_pass_at_k_is_1_once_k_exceeds_the_failures(self):
        # k = 4 > n - c = 3: every draw of 4 holds a success.
        self.assertEqual(pass_at_k(5, 2, 4), 1.0)

    def test_pass_at_n_is_1_with_one_success_and_0_with_none(self):
        self.assertEqual(pass_at_k(4, 1, 4), 1.0)
        self.assertEqual(pass_at_k(4, 0, 4), 0.0)


class PassHatKTest(unittest.TestCase):
    def test_pass_hat_1_is_the_resolve_rate(self):
        self.assertAlmostEqual(pass_hat_k(5, 3, 1), 3 / 5)

    def test_pass_hat_2_of_5_with_3_resolved(self):
        # C(3,2)/C(5,2) = 3/10
        self.assertAlmostEqual(pass_hat_k(5, 3, 2), 0.3)

    def test_pass_hat_k_is_0_when_k_exceeds_the_successes(self):
        self.assertEqual(pass_hat_k(5, 3, 4), 0.0)

    def test_pass_hat_n_is_1_only_when_every_trial_resolved(self):
        self.assertEqual(pass_hat_k(4, 4, 4), 1.0)
        self.assertEqual(pass_hat_k(4, 3, 4), 0.0)

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
    # Published values (Newcombe 1998, table I; and the usual textbook examples).
    def test_half_of_ten(self):
        low, high = wilson_interval(5, 10)
        self.assertAlmostEqual(low, 0.2366, places=4)
        self.assertAlmostEqual(high, 0.7634, places=4)

    def test_none_of_ten_keeps_a_nonzero_upper_bound(self):
        low, high = wilson_interval(0, 10)
        self.assertEqual(low, 0.0)
        self.assertAlmostEqual(high, 0.2775, places=4)

    def test_all_of_ten_keeps_a_lower_bound_below_1(self):
        low, high = wilson_interval(10, 10)
        self.assertAlmostEqual(low, 0.7225, places=4)
        self.assertEqual(high, 1.0)

    def test_81_of_263(self):
        # Newcombe's example 81/263: 0.2553 to 0.3662.
        low, high = wilson_interval(81, 263)
        self.assertAlmostEqual(low, 0.2553, places=4)
        self.assertAlmostEqual(high, 0.3662, places=4)

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


class RateDifferenceIntervalTest(unittest.TestCase):
    # Newcombe (1998), "Interval estimation for the difference between independent
    # proportions: comparison of eleven methods", Stat Med 17:873, table II, method 10 (the
    # hybrid score interval), its eight examples as (x1, n1, x2, n2, low, high) of p1 - p2.
    # Example (a) by hand: Wilson 56/70 = 0.6918 to 0.8770, 48/80 = 0.4905 to 0.7004, so
    # 0.2 - hypot(0.8 - 0.6918, 0.7004 - 0.6) = 0.0524 and 0.2 + hypot(0.8770 - 0.8,
    # 0.6 - 0.4905) = 0.3339.
    PUBLISHED = (
        (56, 70, 48, 80, 0.0524, 0.3339),
        (9, 10, 3, 10, 0.1705, 0.8090),
        (6, 7, 2, 7, 0.0582, 0.8062),
        (5, 56, 0, 29, -0.0381, 0.1926),
        (0, 10, 0, 20, -0.1611, 0.2775),
        (0, 10, 0, 10, -0.2775, 0.2775),
        (10, 10, 0, 20, 0.6791, 1.0),
        (10, 10, 0, 10, 0.6075, 1.0),
    )

    def test_newcombes_published_examples(self):
        for x1, n1, x2, n2, low, high in self.PUBLISHED:
            with self.subTest(example=f"{x1}/{n1} - {x2}/{n2}"):
                # The difference is B - A, so p1 is side B.
                found = rate_difference_interval(x2, n2, x1, n1)
                self.assertAlmostEqual(found[0], low, places=4)
                self.assertAlmostEqual(found[1], high, places=4)

    def test_swapping_the_sides_mirrors_the_interval(self):
        low, high = rate_difference_interval(48, 80, 56, 70)
        mirrored = rate_difference_interval(56, 70, 48, 80)
        self.assertAlmostEqual(mirrored[0], -high)
        self.assertAlmostEqual(mirrored[1], -low)

    def test_a_side_with_no_trials_is_refused(self):
        with self.assertRaises(ValueError):
            rate_difference_interval(0, 0, 3, 5)


def fisher_by_enumeration(a_successes: int, a_n: int, b_successes: int, b_n: int) -> float:
    """Fisher's two-sided p counted out: every way to pick which of the trials resolved (the
    successes fixed, as the test conditions on them) is equally likely with no difference;
    count how often side A (the first a_n trials) gets each number, and add up the numbers
    that come up at most as often as the one seen."""
    trials = a_n + b_n
    successes = a_successes + b_successes
    times: dict[int, int] = {}
    for chosen in itertools.combinations(range(trials), successes):
        on_a = sum(1 for trial in chosen if trial < a_n)
        times[on_a] = times.get(on_a, 0) + 1
    seen = times[a_successes]
    return sum(count for count in times.values() if count <= seen) / sum(times.values())


class FisherExactTest(unittest.TestCase):
    def test_six_of_ten_against_nine_of_ten_is_not_decisive(self):
        # Tables with 15 successes of 20 and 10 a side, by A's count x = 5..10:
        # C(10,x) C(10,15-x) = 252, 2100, 5400, 5400, 2100, 252 of C(20,15) = 15504.
        # Seen: x = 6 (2100); at most as likely: x = 5, 6, 9, 10.
        self.assertAlmostEqual(fisher_exact_p(6, 10, 9, 10), 4704 / 15504, places=12)
        self.assertAlmostEqual(fisher_exact_p(6, 10, 9, 10), 0.3034055727554179, places=12)

    def test_none_of_ten_against_all_of_ten_is(self):
        # Only the two extreme tables, each 1 / C(20,10).
        self.assertAlmostEqual(fisher_exact_p(0, 10, 10, 10), 2 / 184756, places=15)

    def test_the_sides_swap_without_changing_p(self):
        self.assertEqual(fisher_exact_p(7, 8, 6, 10), fisher_exact_p(6, 10, 7, 8))
        self.assertAlmostEqual(fisher_exact_p(7, 8, 6, 10), 0.3137254901960784, places=12)

    def test_equal_rates_give_1(self):
        self.assertEqual(fisher_exact_p(3, 6, 3, 6), 1.0)
        self.assertEqual(fisher_exact_p(5, 5, 7, 7), 1.0)

    def test_every_small_table_agrees_with_counting_out(self):
        for a_n, b_n in ((1, 1), (2, 3), (4, 4), (3, 6), (6, 5)):
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


def mcnemar_by_enumeration(a_only: int, b_only: int) -> float:
    """McNemar's exact p counted out: every way the discordant pairs could have gone (each
    A's or B's way, equally likely with no difference); add up the splits that come up at
    most as often as the one seen."""
    discordant = a_only + b_only
    times: dict[int, int] = {}
    for ways in itertools.product((0, 1), repeat=discordant):
        times[sum(ways)] = times.get(sum(ways), 0) + 1
    seen = times[a_only]
    return sum(count for count in times.values() if count <= seen) / 2**discordant


class McNemarExactTest(unittest.TestCase):
    def test_one_against_four(self):
        # 2 (C(5,0) + C(5,1)) / 2^5 = 12/32
        self.assertEqual(mcnemar_exact_p(1, 4), 0.375)

    def test_ten_pairs_all_one_way(self):
        self.assertEqual(mcnemar_exact_p(0, 10), 2 / 1024)
        self.assertEqual(mcnemar_exact_p(10, 0), 2 / 1024)

    def test_no_discordant_pair_or_an_even_split_gives_1(self):
        self.assertEqual(mcnemar_exact_p(0, 0), 1.0)
        self.assertEqual(mcnemar_exact_p(3, 3), 1.0)

    def test_every_small_split_agrees_with_counting_out(self):
        for a_only, b_only in itertools.product(range(9), repeat=2):
            with self.subTest(a_only=a_only, b_only=b_only):
                self.assertAlmostEqual(
                    mcnemar_exact_p(a_only, b_only),
                    mcnemar_by_enumeration(a_only, b_only),
                    places=12,
                )


class PowerTest(unittest.TestCase):
    def test_trials_a_side_for_six_against_nine_tenths(self):
        # z = 1.95996, 0.84162; pooled 0.75: (1.95996 sqrt(2 x 0.75 x 0.25)
        # + 0.84162 sqrt(0.24 + 0.09))^2 / 0.3^2 = 2.83486 / 0.09 = 31.5, so 32.
        self.assertEqual(trials_for_power(0.6, 0.9), 32)
        self.assertEqual(trials_for_power(0.9, 0.6), 32)

    def test_a_larger_difference_needs_fewer_trials(self):
        self.assertLess(trials_for_power(0.1, 0.9), trials_for_power(0.5, 0.9))

    def test_equal_rates_have_no_difference_to_detect(self):
        self.assertIsNone(trials_for_power(0.5, 0.5))

    def test_pairs_for_three_of_ten_discordant_all_one_way(self):
        # psi = 0.3, delta = 0.3: (1.95996 sqrt(0.3) + 0.84162 sqrt(0.3 - 0.09))^2 / 0.09
        # = 2.12924 / 0.09 = 23.7, so 24.
        self.assertEqual(pairs_for_power(0, 3, 10), 24)
        self.assertEqual(pairs_for_power(3, 0, 10), 24)
        self.assertIsNone(pairs_for_power(2, 2, 10))

    def test_trials_a_side_for_seven_eighths_against_six_tenths(self):
        # pooled 0.7375: (1.95996 sqrt(2 x 0.7375 x 0.2625) + 0.84162 sqrt(0.109375 + 0.24))^2
        # / 0.275^2 = 2.94819 / 0.075625 = 38.98, so 39.
        self.assertEqual(trials_for_power(0.875, 0.6), 39)


if __name__ == "__main__":
    unittest.main()
