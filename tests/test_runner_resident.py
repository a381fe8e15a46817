"""End to end through runner.py under the resident drive: verdicts, cheats and forgeries, a
daemon that never answers or is too old; and behaviours chosen for what the sandbox changes
under them, which get the same verdict sandboxed and not (tests/runner_case.py
`SameVerdictsCase`; the one-shot drive's are tests/test_runner_cheats.py's): a forged
ledger, a grandchild holding files, a hanging session.
"""

from __future__ import annotations

import json
import os
import sys
import unittest

from tests import executable
from tests.runner_case import (
    GRACE,
    JSON_EVENTS,
    SIMULATED,
    RunnerTestCase,
    SameVerdictsCase,
    documented_codes,
    logged_host_pids,
    process_gone,
    two_shard_fixture,
)


class ResidentDriveTest(RunnerTestCase):
    def test_oracle_resolves_under_the_resident_drive(self):
        # On csv-metrics: its format's one oracle run end to end.
        fixture = two_shard_fixture("csv-metrics")
        done, result = self.run_runner("simulated/oracle", fixture, "--drive", "resident")
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertTrue(result["resolved"])
        self.assertEqual(result["drive"], "resident")
        self.assertEqual(
            [step["command"] for step in result["resident"]["commands"]],
            ["create", "attach", "prompt", "wait_for_headless_completion", "get_state"],
        )
        self.assertFalse(result["resident"]["final_state"]["hasRunningRlmChildren"])
        run = self.run_dir(result)
        with open(os.path.join(run, "stdout.jsonl"), encoding="utf-8") as handle:
            header = json.loads(handle.readline())
        self.assertEqual(header["id"], result["resident"]["session"]["sessionId"])
        self.assertTrue(os.path.getsize(os.path.join(run, "daemon-wire.jsonl")) > 0)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        self.assertTrue(result["cleanup"]["daemon_shutdown"]["exited"])

    def test_parent_that_ends_its_turn_early_fails_one_shot(self):
        done, result = self.run_runner("simulated/end-turn-early", JSON_EVENTS)
        self.assertEqual(done.returncode, 1)
        self.assertEqual(sorted(set(self.codes(result))), ["artifact_missing", "missing_receipt"])
        self.assertEqual(result["verdict"]["details"]["terminal_notices"], 3)

    def test_parent_that_ends_its_turn_early_resolves_resident(self):
        done, result = self.run_runner(
            "simulated/end-turn-early", two_shard_fixture(), "--drive", "resident"
        )
        self.assertEqual(done.returncode, 0, result["reasons"])
        self.assertTrue(result["resolved"])
        self.assertEqual(result["verdict"]["details"]["child_replies"], 2)

    def test_cheats_fail_under_the_resident_drive_too(self):
        fixture = two_shard_fixture("csv-metrics")
        done, result = self.run_runner("simulated/fabricate", fixture, "--drive", "resident")
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.codes(result), ["wrong_answer", "unsourced_answer"])

    def test_children_that_never_work_fail_integrity_under_the_resident_drive_too(self):
        # The daemon's child transcripts end at the task (junk-replies reads only reply
        # texts, as one-shot: test_runner_cheats; forge-ledger's is ResidentSameVerdictsTest's).
        done, result = self.run_runner(
            "simulated/zero-work-children", two_shard_fixture(), "--drive", "resident"
        )
        self.assertEqual(done.returncode, 1, done.stderr.decode())
        self.assertFalse(result["verdict"]["delegation_evidence"])
        self.assertEqual(set(self.codes(result)), documented_codes("zero-work-children"))
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_daemon_that_never_answers_is_timed_out_and_ended(self):
        agent = executable(os.path.join(self.tmp, "silent-daemon"), SILENT_DAEMON)
        argv = self.runner_argv(
            "simulated/oracle", None, "--drive", "resident", "--timeout", "1", *GRACE
        )
        argv[argv.index(SIMULATED)] = agent
        done = self.run_argv(argv, self.env)
        result = json.loads(done.stdout)
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.codes(result)[0], "timeout")
        self.assertFalse(result["resident"]["admitted"])
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        (pid,) = logged_host_pids(result, "silent")
        self.assertTrue(process_gone(pid))

    def test_daemon_too_old_for_the_barrier_is_refused_with_exit_3(self):
        agent = executable(
            os.path.join(self.tmp, "old-daemon"),
            SILENT_DAEMON.replace('"version": 7', '"version": 6'),
        )
        argv = self.runner_argv("simulated/oracle", None, "--drive", "resident", *GRACE)
        argv[argv.index(SIMULATED)] = agent
        done = self.run_argv(argv, self.env)
        result = json.loads(done.stdout)
        self.assertEqual(done.returncode, 3)
        self.assertEqual(self.codes(result), ["daemon_incompatible"])
        self.assertIn("version", result["reasons"][0]["message"])
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)


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


# A daemon that says hello on its socket and then never answers a command.
SILENT_DAEMON = f"""#!{sys.executable}
import json, os, socket, sys, time
if "--version" in sys.argv:
    sys.exit(0)
path = sys.argv[sys.argv.index("--daemon-socket") + 1]
print(f"silent pid={{os.getpid()}}", file=sys.stderr, flush=True)
listener = socket.socket(socket.AF_UNIX)
listener.bind(path)
listener.listen()
hello = {{"type": "daemon_hello", "protocol": {{"name": "prime-agent.daemon", "version": 7}},
         "schemaRevision": 22, "supervisorPid": os.getpid(),
         "serverCapabilities": ["rlm_quiescence_barrier"]}}
held = []
while True:
    connection, _ = listener.accept()
    connection.sendall((json.dumps(hello) + "\\n").encode())
    held.append(connection)
"""


if __name__ == "__main__":
    unittest.main()
