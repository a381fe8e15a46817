"""Under the resident drive, behaviours chosen for what the sandbox changes under them get
the same verdict sandboxed and not (tests/runner_case.py `SameVerdictsCase`; the one-shot
drive's are tests/test_sandbox_oneshot.py).
"""

from __future__ import annotations

import unittest

from tests.runner_case import SameVerdictsCase


class ResidentSameVerdictsTest(SameVerdictsCase):
    drive = "resident"
    behaviours = (
        # files: a cell writes a ledger, child dirs and replies into the product's own dirs
        "forge-ledger",
        # processes: a grandchild holds the daemon's output files open past the run
        "hold-files",
        # processes: a session that never ends, and a grandchild that ignores SIGTERM
        "hang",
    )

    def test_files_and_processes_get_the_same_verdict_sandboxed_and_not(self):
        self.assert_the_same_verdict_sandboxed_and_not()


if __name__ == "__main__":
    unittest.main()
