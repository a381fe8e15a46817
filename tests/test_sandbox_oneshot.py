"""Under the one-shot drive, behaviours chosen for what the sandbox changes under them get
the same verdict sandboxed and not (tests/runner_case.py `SameVerdictsCase`; the resident
drive's are tests/test_sandbox_resident.py).
"""

from __future__ import annotations

import unittest

from tests.runner_case import SameVerdictsCase


class OneShotSameVerdictsTest(SameVerdictsCase):
    drive = "oneshot"
    behaviours = (
        # files: the parent leaves its answers in the run's TMPDIR, a /tmp of the sandbox's own
        "cache-fallback",
        # processes: a setsid, double-forked process with an empty environment outlives the CLI
        "escape",
        # network: the children's model calls never reach the endpoint the proxy serves
        "forge-consistent",
    )

    def test_files_processes_and_model_calls_get_the_same_verdict_sandboxed_and_not(self):
        self.assert_the_same_verdict_sandboxed_and_not()


if __name__ == "__main__":
    unittest.main()
