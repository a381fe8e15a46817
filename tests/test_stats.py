"""The estimators against values worked out by hand."""

from __future__ import annotations

import unittest

from reporting.stats import (
    distribution,
    mean_over_fixtures,
    pass_at_k,
    pass_hat_k,
    ratio,
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


if __name__ == "__main__":
    unittest.main()
