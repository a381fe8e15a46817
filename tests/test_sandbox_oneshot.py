"""Under the one-shot drive, behaviours chosen for what the sandbox changes under them get
the same verdict sandboxed and not (tests/runner_case.py `SameVerdictsCase`; the resident
drive's are tests/test_sandbox_resident.py).
"""

from __future__ import annotations

import unittest

from tests.runner_case import SameVerdictsCase, documented_codes, logged_host_pids, process_gone


class OneShotSameVerdictsTest(SameVerdictsCase):
    drive = "oneshot"

    def test_answers_left_in_the_runs_tmpdir_get_the_same_verdict_sandboxed_and_not(self):
        # Files: the parent leaves its answers in the run's TMPDIR, a /tmp of the sandbox's own.
        for result in self.sandboxed_and_not("cache-fallback"):
            self.assertEqual(set(self.codes(result)), documented_codes("cache-fallback"))

    def test_process_that_escapes_by_setsid_and_an_empty_environment_is_ended_either_way(self):
        # Processes: a setsid, double-forked process with an empty environment outlives the CLI.
        for result in self.sandboxed_and_not("escape"):
            self.assertEqual((result["exit_code"], self.codes(result)), (0, []))
            (escaped,) = logged_host_pids(result, "escaped")
            self.assertTrue(process_gone(escaped))
            self.assertIn(escaped, result["cleanup"]["killed"])

    def test_model_calls_that_never_reach_the_endpoint_get_the_same_verdict_either_way(self):
        # Network: the children's model calls never reach the endpoint the proxy serves.
        for result in self.sandboxed_and_not("forge-consistent"):
            self.assertEqual(set(self.codes(result)), {"unserved_response_id"})


if __name__ == "__main__":
    unittest.main()
