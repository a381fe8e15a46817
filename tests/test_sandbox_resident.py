"""Under the resident drive, behaviours chosen for what the sandbox changes under them get
the same verdict sandboxed and not (tests/runner_case.py `SameVerdictsCase`; the one-shot
drive's are tests/test_sandbox_oneshot.py).
"""

from __future__ import annotations

import unittest

from tests.runner_case import SameVerdictsCase, documented_codes, logged_host_pids, process_gone


class ResidentSameVerdictsTest(SameVerdictsCase):
    drive = "resident"

    def test_a_ledger_forged_into_the_products_own_dirs_fails_either_way(self):
        # Files: a cell writes a ledger, child dirs and replies into the product's own dirs;
        # the daemon's stream and child transcripts are held against them.
        for result in self.sandboxed_and_not("forge-ledger"):
            self.assertFalse(result["verdict"]["delegation_evidence"])
            self.assertEqual(set(self.codes(result)), documented_codes("forge-ledger"))

    def test_grandchild_holding_the_daemons_output_files_is_ended_either_way(self):
        # Processes: a grandchild holds the daemon's output files open past the run.
        for result in self.sandboxed_and_not("hold-files"):
            self.assertEqual((result["exit_code"], self.codes(result)), (0, []))
            (holder,) = logged_host_pids(result, "holding")
            self.assertIn(holder, result["cleanup"]["killed"])
            self.assertTrue(process_gone(holder))

    def test_hanging_resident_session_is_ended_at_the_timeout_either_way(self):
        # Processes: a session that never ends, and a grandchild that ignores SIGTERM.
        for result in self.sandboxed_and_not("hang"):
            self.assertEqual(result["exit_code"], 1)
            self.assertEqual(self.codes(result)[0], "timeout")
            self.assertTrue(result["resident"]["admitted"])
            pids = logged_host_pids(result, "grandchild") + logged_host_pids(result, "daemon")
            self.assertEqual(len(pids), 2)
            for pid in pids:
                self.assertTrue(process_gone(pid), pid)


if __name__ == "__main__":
    unittest.main()
