"""Whether two run sets differ: the pairing rule, errored trials left out, the test chosen,
and the sentence a reader acts on."""

from __future__ import annotations

import unittest

from reporting.difference import (
    FISHER,
    MCNEMAR,
    NotTested,
    RateDifference,
    compare_rates,
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


def compare(a: str, b: str, a_trials: int | None = None, b_trials: int | None = None):
    return compare_rates(
        config(a_trials or len(a)), summary(*a), config(b_trials or len(b)), summary(*b)
    )


class PairingTest(unittest.TestCase):
    def test_same_digest_and_planned_trials_pair_trial_n_with_trial_n(self):
        found = compare("yyyyyynnnn", "yyyyyyyyyn")
        self.assertEqual(found.test, MCNEMAR)
        self.assertEqual((found.pairs, found.a_only, found.b_only), (10, 0, 3))
        self.assertEqual(found.p_value, 0.25)  # 2 / 2^3

    def test_pairing_finds_what_the_unpaired_test_cannot(self):
        # The same rates, 6/10 against 9/10: matched by seed, B never lost a trial A won.
        paired = compare("yyyyyynnnn", "yyyyyyyyyn")
        unpaired = compare("yyyyyynnnn", "yyyyyyyyyn", b_trials=11)
        self.assertEqual(unpaired.test, FISHER)
        self.assertLess(paired.p_value, unpaired.p_value)

    def test_different_planned_trials_are_compared_as_independent_sets(self):
        found = compare("yyyyyynnnn", "yyyyyyyyyn" + "yy")
        self.assertEqual(found.test, FISHER)
        self.assertIsNone(found.pairs)
        self.assertEqual((found.a_resolved, found.a_trials, found.b_resolved, found.b_trials),
                         (6, 10, 11, 12))  # fmt: skip

    def test_an_errored_trial_leaves_its_pair_out(self):
        found = compare("yyney", "ynyyy")
        # Index 4 (A errored) is dropped; 1, 2, 3, 5 pair: A alone resolved 2, B alone 3.
        self.assertEqual((found.pairs, found.a_only, found.b_only, found.one_sided), (4, 1, 1, 1))
        self.assertEqual((found.a_resolved, found.b_resolved), (3, 3))

    def test_interrupted_and_unrun_trials_are_left_out_as_errored_ones(self):
        found = compare("yi-nn", "yyyyn")
        self.assertEqual((found.pairs, found.one_sided), (3, 2))
        unpaired = compare("yeinn", "yyyyyy")
        self.assertEqual((unpaired.a_resolved, unpaired.a_trials), (1, 3))

    def test_different_fixture_contents_are_not_tested(self):
        found = compare_rates(config(3, "d1"), summary("yyy"), config(3, "d2"), summary("nnn"))
        self.assertIsInstance(found, NotTested)
        self.assertIn("fixture digests differ", verdict_sentence(found))

    def test_a_side_with_no_scored_trial_is_not_tested(self):
        found = compare("eee", "yyy")
        self.assertEqual(verdict_sentence(found), "Not tested: A has no scored trial.")

    def test_no_index_scored_on_both_sides_is_not_tested(self):
        found = compare("yye-", "--yy")
        self.assertEqual(
            verdict_sentence(found), "Not tested: no trial index is scored on both sides."
        )


class VerdictSentenceTest(unittest.TestCase):
    def test_six_of_ten_against_nine_of_ten_cannot_be_told_apart(self):
        found = compare("yyyyyynnnn", "nyyyyyyyyy", b_trials=11)
        self.assertEqual(
            verdict_sentence(found),
            "The data can't tell A and B apart (p = 0.30; Fisher's exact test, 10 and 10 "
            "trials): about 32 trials a side would detect a difference of this size with 80% "
            "power (normal approximation).",
        )

    def test_none_of_ten_against_all_of_ten_is_real(self):
        found = compare("n" * 10, "y" * 10, b_trials=11)
        self.assertTrue(found.real)
        self.assertEqual(
            verdict_sentence(found),
            "B resolves more often than A (p < 0.001; Fisher's exact test, 10 and 10 trials).",
        )

    def test_a_real_difference_the_other_way_names_a(self):
        found = compare("y" * 10, "n" * 10)
        self.assertLess(found.difference, 0)
        self.assertEqual(
            verdict_sentence(found),
            "A resolves more often than B (p = 0.0020; McNemar's exact test, 10 trials paired "
            "by index: A alone resolved 10, B alone 0).",
        )

    def test_equal_rates_have_no_study_to_size(self):
        found = compare("yyn", "yyn")
        self.assertFalse(found.real)
        self.assertIsNone(found.needed)
        self.assertIn("resolved equally often", verdict_sentence(found))

    def test_paired_sentences_count_pairs_and_name_what_was_left_out(self):
        # Connor: psi = 3/5, delta = 3/5; (1.95996 sqrt(0.6) + 0.84162 sqrt(0.6 - 0.36))^2
        # / 0.36 = 3.7268 / 0.36 = 10.35, so 11.
        found = compare("yyyyne", "ynnnny")
        self.assertEqual(
            verdict_sentence(found),
            "The data can't tell A and B apart (p = 0.25; McNemar's exact test, 5 trials "
            "paired by index: A alone resolved 3, B alone 0; 1 scored on one side only left "
            "out): about 11 paired trials would detect a difference of this size with 80% "
            "power (normal approximation).",
        )

    def test_the_interval_is_of_b_minus_a(self):
        found = compare("yyyyyynnnn", "nyyyyyyyyy", b_trials=11)
        self.assertIsInstance(found, RateDifference)
        self.assertAlmostEqual(found.difference, 0.3)
        low, high = found.ci95
        self.assertLess(low, 0)  # the interval holds 0: not decisive
        self.assertGreater(high, found.difference)

    def test_p_is_given_to_two_significant_digits(self):
        self.assertEqual(p_text(0.3034), "p = 0.30")
        self.assertEqual(p_text(0.03125), "p = 0.031")
        self.assertEqual(p_text(2 / 1024), "p = 0.0020")
        self.assertEqual(p_text(0.0004), "p < 0.001")
        self.assertEqual(p_text(1.0), "p = 1")


if __name__ == "__main__":
    unittest.main()
