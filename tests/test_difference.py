"""Whether two run sets differ: never paired by index, errored trials left out, one test
behind the p-value, the interval and the trials needed, and the sentence a reader acts on."""

from __future__ import annotations

import unittest

from swarm_fanout.reporting.difference import (
    FISHER,
    NotTested,
    RateDifference,
    compare_rates,
    needed_text,
    odds_ratio_text,
    p_text,
    verdict_sentence,
)


def config(trials: int, digest: str = "d1") -> dict:
    return {"fixture_digest": digest, "trials": trials}


def summary(*outcomes: str) -> dict:
    """Trial rows by index from 1: `y` resolved, `n` scored and not resolved, `e` errored,
    `i` interrupted, `-` not run."""
    rows = []
    for index, outcome in enumerate(outcomes, start=1):
        status = {"e": "agent_error", "-": "not_run"}.get(outcome, "scored")
        scored = outcome in "yn"
        rows.append(
            {"index": index, "status": status, "scored": scored, "resolved": outcome == "y"}
        )
    return {"trials": rows}


def compare(a: str, b: str):
    return compare_rates(config(len(a)), summary(*a), config(len(b)), summary(*b))


class TheIssuesExamplesTest(unittest.TestCase):
    def test_four_of_four_against_none_of_four_is_real_and_its_interval_agrees(self):
        found = compare("yyyy", "nnnn")
        self.assertTrue(found.real)
        self.assertLess(found.odds_ratio_ci95[1], 1)
        self.assertEqual(
            verdict_sentence(found),
            "A resolves more often than B (p = 0.029; Fisher's exact test, 4 and 4 trials).",
        )

    def test_none_of_four_against_five_of_six_is_real_by_the_same_test(self):
        found = compare("nnnn", "yyyyyn")
        self.assertTrue(found.real)
        self.assertGreater(found.odds_ratio_ci95[0], 1)
        self.assertEqual(
            verdict_sentence(found),
            "B resolves more often than A (p = 0.048; Fisher's exact test, 4 and 6 trials).",
        )


class NotPairedTest(unittest.TestCase):
    def test_equal_trial_counts_are_not_paired_by_index(self):
        # Pairing by index would see only B's three extra wins; the sets are independent.
        same_counts = compare("yyyyyynnnn", "yyyyyyyyyn")
        shuffled = compare("nnnnyyyyyy", "yyyyyyyyyn")
        self.assertEqual(same_counts, shuffled)
        self.assertEqual(same_counts.test, FISHER)
        self.assertAlmostEqual(same_counts.p_value, 4704 / 15504)

    def test_an_errored_interrupted_or_unrun_trial_is_left_out(self):
        found = compare("yeinn-", "yyyyyy")
        self.assertEqual((found.a_resolved, found.a_trials, found.b_resolved, found.b_trials),
                         (1, 3, 6, 6))  # fmt: skip

    def test_different_fixture_contents_are_not_tested(self):
        found = compare_rates(config(3, "d1"), summary("yyy"), config(3, "d2"), summary("nnn"))
        self.assertIsInstance(found, NotTested)
        self.assertIn("fixture digests differ", verdict_sentence(found))

    def test_a_side_with_no_scored_trial_is_not_tested(self):
        found = compare("eee", "yyy")
        self.assertEqual(verdict_sentence(found), "Not tested: A has no scored trial.")


class VerdictSentenceTest(unittest.TestCase):
    def test_six_of_ten_against_nine_of_ten_cannot_be_told_apart(self):
        found = compare("yyyyyynnnn", "nyyyyyyyyy")
        self.assertEqual(
            verdict_sentence(found),
            "The data can't tell A and B apart (p = 0.30; Fisher's exact test, 10 and 10 "
            "trials): about 36 trials a side in all, the 10 and 10 run counted, would detect "
            "a difference of this size with 80% power.",
        )
        self.assertEqual(needed_text(found), "36 (10 and 10 run)")

    def test_two_of_two_against_none_of_two_needs_more_than_were_run(self):
        found = compare("yy", "nn")
        self.assertFalse(found.real)
        self.assertEqual(found.needed, 4)
        low, high = found.odds_ratio_ci95
        self.assertLessEqual(low, 1)
        self.assertLessEqual(1, high)

    def test_equal_rates_have_no_study_to_size(self):
        found = compare("yyn", "yyn")
        self.assertFalse(found.real)
        self.assertIsNone(found.needed)
        self.assertIn("resolved equally often", verdict_sentence(found))

    def test_p_is_given_to_two_significant_digits(self):
        self.assertEqual(p_text(0.3034), "p = 0.30")
        self.assertEqual(p_text(0.03125), "p = 0.031")
        self.assertEqual(p_text(2 / 1024), "p = 0.0020")
        self.assertEqual(p_text(0.0004), "p < 0.001")
        self.assertEqual(p_text(1.0), "p = 1")


class OddsRatioTextTest(unittest.TestCase):
    def test_bounds_are_rounded_outwards_to_two_significant_digits(self):
        self.assertEqual(odds_ratio_text((0.40757, 327.56)), "0.40 to 330")
        self.assertEqual(odds_ratio_text((0.0, 0.7468)), "0 to 0.75")
        self.assertEqual(odds_ratio_text((12.3, float("inf"))), "12 to ∞")

    def test_a_bound_next_to_1_keeps_the_digits_that_show_its_side(self):
        # 1.0248 would read 1.0, as if the interval held 1.
        self.assertEqual(odds_ratio_text((1.0248, float("inf"))), "1.02 to ∞")
        self.assertEqual(odds_ratio_text((0.0, 0.99971)), "0 to 0.9998")

    def test_the_interval_agrees_with_p_on_every_page_it_is_shown(self):
        for a, b in (("yyyy", "nnnn"), ("nnnn", "yyyyyn"), ("yyyyyynnnn", "nyyyyyyyyy")):
            found = compare(a, b)
            self.assertIsInstance(found, RateDifference)
            shown = odds_ratio_text(found.odds_ratio_ci95).replace("∞", "inf").replace(",", "")
            low, high = (float(bound) for bound in shown.split(" to "))
            self.assertEqual(found.real, not low <= 1 <= high, (a, b))


if __name__ == "__main__":
    unittest.main()
