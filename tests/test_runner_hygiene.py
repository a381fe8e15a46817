"""End to end through runner.py: timeouts, Ctrl-C and SIGTERM, processes that try to escape,
asserted gone by pid; socket paths that fit at every run dir length.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from swarm_fanout.shell import procs, rundir, sandbox
from tests.runner_case import (
    DAEMON_LOGGED_AS,
    GRACE,
    HANG_TIMEOUT,
    RunnerTestCase,
    StderrLines,
    logged_host_pids,
    parent_pid,
    past_the_same_interrupt,
    process_gone,
    two_shard_fixture,
)


def tmpdir_of(pid: int) -> str | None:
    """The TMPDIR in a process's environment, if it can still be read."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as handle:
        for entry in handle.read().split(b"\0"):
            if entry.startswith(b"TMPDIR="):
                return os.fsdecode(entry[len(b"TMPDIR=") :])
    return None


class HygieneTest(RunnerTestCase):
    def test_hanging_agent_is_ended_at_the_timeout_and_still_scored(self):
        done, result = self.run_runner("simulated/hang", two_shard_fixture(), *HANG_TIMEOUT, *GRACE)
        self.assertEqual(done.returncode, 1)
        self.assertTrue(result["agent"]["timed_out"])
        # The CLI's own exit status: ended by the runner's SIGTERM (it obeys it).
        self.assertEqual(result["agent"]["exit_code"], -signal.SIGTERM)
        self.assertIsNone(result["agent"]["first_error"])
        self.assertEqual(self.codes(result)[0], "timeout")
        # The root cause first on the verdict line, before the receipts it cost.
        self.assertIn(b"; reasons: timeout, ", done.stderr)
        self.assertRegex(done.stderr, rb"runner\.py: timed out after \d+s of 5s: 2 spawns")
        self.assertEqual(result["verdict"]["details"]["depth1_spawns"], 2)
        grandchildren = logged_host_pids(result, "grandchild")
        self.assertEqual(len(grandchildren), 1)
        # The grandchild ignores SIGTERM: only SIGKILL ended it.
        self.assertIn(grandchildren[0], result["cleanup"]["killed"])
        for pid in grandchildren + logged_host_pids(result, "supervisor"):
            self.assertTrue(process_gone(pid), pid)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_a_runner_killed_with_sigkill_takes_its_sandboxed_agent_with_it(self):
        """The runner's own cleanup never runs after SIGKILL (an OOM kill, a CI job's
        timeout): the sandbox must end with it, grandchild that ignores SIGTERM and all."""
        if not sandbox.availability().usable:
            self.skipTest(sandbox.availability().problem)
        # Its temp files are left too: in this test's own temp dir, removed with it, and
        # the short dir under /tmp its sockets moved to (rundir.fit_sockets), named by the
        # TMPDIR its processes were given.
        env = {**self.env, "TMPDIR": self.tmp}
        runner, grandchild = self.started_hanging_run("--sandbox", env=env)
        tree = procs.descendants(runner.pid, procs.process_table())
        self.assertIn(grandchild, tree)
        for short in {tmpdir_of(pid) for pid in tree} - {None, self.tmp}:
            self.addCleanup(shutil.rmtree, short, ignore_errors=True)
        ends = {}
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):  # one that has already ended
                ends[os.pidfd_open(pid)] = pid
        self.addCleanup(self.kill_and_close, ends)
        runner.kill()
        runner.communicate(timeout=60)
        waiting = dict(ends)
        while waiting:
            # A guard against a hang, not a measure: a process left would never end.
            ready, _, _ = select.select(list(waiting), [], [], 60)
            if not ready:
                break
            for fd in ready:
                del waiting[fd]
        self.assertEqual(sorted(waiting.values()), [], "processes of the run left running")

    @staticmethod
    def kill_and_close(ends: dict[int, int]) -> None:
        for fd in ends:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)

    def interrupt_hanging_run(
        self, signum: int, drive: str, twice: bool
    ) -> tuple[subprocess.Popen, dict, int, str]:
        """Signal the runner once simulated/hang has spawned its children and its
        SIGTERM-ignoring grandchild (`twice`: again at once, as `uv run` without a terminal
        passes a Ctrl-C on); returns the runner, its printed result, the pid of the
        grandchild's parent, read before the signal (the CLI one-shot, the daemon resident:
        simulated/hang runs the root in the CLI, or in a thread of the daemon), and what it
        said on stderr after the first signal's line."""
        # Twice, a grace long enough that the second signal comes within it.
        grace = ("--grace", "0.5") if twice else GRACE
        runner, grandchild = self.started_hanging_run("--drive", drive, grace=grace)
        parent = parent_pid(grandchild)
        runner.send_signal(signum)
        if twice:
            # uv's copy comes once the first has been handled (two signals still pending at
            # once would be one to the kernel): seen on stderr, then sent at once.
            StderrLines(runner).first_with(b"a second Ctrl-C ends it now")
            runner.send_signal(signum)
        out, err = runner.communicate(timeout=60)
        return runner, json.loads(out), parent, err.decode()

    def assert_interrupted(self, signum: int, drive: str, exit_code: int, twice=False) -> str:
        """What interrupt_hanging_run returns, checked; returns what the runner said."""
        runner, result, parent, said = self.interrupt_hanging_run(signum, drive, twice)
        self.assertEqual(runner.returncode, exit_code)
        self.assertEqual(result["exit_code"], exit_code)
        self.assertEqual(result["drive"], drive)
        self.assertEqual(self.codes(result)[0], "interrupted")
        self.assertFalse(result["resolved"])
        # Both drives spawn every child (one per shard of two) before the grandchild is logged.
        self.assertEqual(result["verdict"]["details"]["depth1_spawns"], 2)
        run = self.run_dir(result)
        with open(os.path.join(run, "result.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), result)
        cleanup = result["cleanup"]
        (grandchild,) = logged_host_pids(result, "grandchild")
        (supervisor,) = logged_host_pids(result, DAEMON_LOGGED_AS[drive])
        for pid in (grandchild, supervisor, parent):
            self.assertTrue(process_gone(pid), pid)
        self.assertEqual(cleanup["leaked_processes"], 0)
        # The daemon was shut down over its own socket and had exited before anything
        # was signalled: the final sweep would end it too, so no signal may have reached it.
        shutdown = cleanup["daemon_shutdown"]
        self.assertIs(shutdown.get("success"), True, shutdown)
        self.assertIs(shutdown.get("exited"), True, shutdown)
        self.assertEqual(
            shutdown.get("supervisor_host_pid", shutdown.get("supervisor_pid")),
            supervisor,
            shutdown,
        )
        self.assertNotIn(supervisor, cleanup["terminated"])
        self.assertNotIn(supervisor, cleanup["killed"])
        # TERM first, then KILL after the grace: the grandchild ignores SIGTERM, so it got
        # both; the one-shot CLI obeys SIGTERM, so it got no SIGKILL. Resident, the
        # grandchild's parent is the daemon itself, which no signal reached (above).
        self.assertIn(grandchild, cleanup["terminated"])
        self.assertIn(grandchild, cleanup["killed"])
        self.assertEqual(parent == supervisor, drive == "resident")
        if drive == "oneshot":
            self.assertIn(parent, cleanup["terminated"])
            self.assertNotIn(parent, cleanup["killed"])
            # The CLI's exit status is the runner's SIGTERM, not a crash to quote.
            self.assertEqual(result["agent"]["exit_code"], -signal.SIGTERM)
        return said

    def test_a_first_ctrl_c_says_what_it_ends_and_a_second_ends_it_now(self):
        """With a grace no run waits out (an hour), the first Ctrl-C names what it ends and
        leaves the SIGTERM-ignoring grandchild its grace; the second kills it, and the run
        is still scored with nothing left running."""
        runner, grandchild = self.started_hanging_run(grace=("--grace", "3600"))
        runner.send_signal(signal.SIGINT)
        first = StderrLines(runner).first_with(b"a second Ctrl-C ends it now")
        self.assertEqual(
            first,
            "runner.py: SIGINT: ending the agent's processes (the daemon shut down, then "
            "SIGTERM, and SIGKILL to what is left after 3600s); what exists is still scored; "
            "a second Ctrl-C ends it now",
        )
        past_the_same_interrupt(time.monotonic())
        runner.send_signal(signal.SIGINT)
        out, err = runner.communicate(timeout=120)  # a guard against a hang, not a measure
        # What the second one does: no grace, so no "after 3600s".
        (again,) = [line for line in err.decode().splitlines() if "SIGINT again" in line]
        self.assertEqual(
            again,
            "runner.py: SIGINT again: ending the agent's processes now, by SIGKILL; what exists "
            "is still scored",
        )
        result = json.loads(out)
        self.assertEqual((runner.returncode, result["exit_code"]), (130, 130))
        self.assertEqual(self.codes(result)[0], "interrupted")
        self.assertTrue(process_gone(grandchild))
        # Not the sweep's SIGKILL after the grace: the second Ctrl-C's.
        self.assertNotIn(grandchild, result["cleanup"]["killed"])
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_grandchild_holding_the_output_files_open_is_ended(self):
        done, result = self.run_runner("simulated/hold-files", two_shard_fixture(), *GRACE)
        self.assertEqual(done.returncode, 0, result["reasons"])
        (holder,) = logged_host_pids(result, "holding")
        self.assertIn(holder, result["cleanup"]["killed"])
        self.assertTrue(process_gone(holder))
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        with open(os.path.join(self.run_dir(result), "result.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), result)

    def test_one_ctrl_c_delivered_twice_at_once_ends_the_tree_scores_and_exits_130(self):
        """Under `uv run` without a terminal a Ctrl-C reaches the runner twice, from the
        process group and passed on by uv: one interrupt, the grace kept, the grandchild
        that ignores SIGTERM killed by the sweep after it (assert_interrupted), not by a
        second Ctrl-C."""
        said = self.assert_interrupted(signal.SIGINT, "oneshot", 130, twice=True)
        self.assertNotIn("a second Ctrl-C ends it now", said)
        self.assertNotIn("SIGINT again", said)

    def test_sigterm_of_a_resident_run_shuts_its_daemon_down_scores_and_exits_143(self):
        # The signal's exit code and the drive's daemon are each checked once: Ctrl-C
        # one-shot above, SIGTERM resident here.
        self.assert_interrupted(signal.SIGTERM, "resident", 143)


class SocketPathTest(RunnerTestCase):
    """The product binds a socket per session worker under $TMPDIR (at most 107 bytes)."""

    def test_every_run_dir_length_gives_sockets_that_fit(self):
        branches = set()
        for length in range(1, 140):
            run = rundir.RunDir("/" + "r" * length)
            run.fit_sockets()
            self.addCleanup(run.cleanup_tmp)
            self.assertTrue(rundir.fits_a_socket(rundir.worker_socket_path(run.tmp)), length)
            self.assertTrue(rundir.fits_a_socket(run.socket), length)
            own_tmp = run.tmp == os.path.join(run.root, "tmp")
            # The run dir's own tmp is kept whenever the product's sockets fit there.
            fits_there = rundir.fits_a_socket(rundir.worker_socket_path(run.root + "/tmp"))
            self.assertEqual(own_tmp, fits_there, length)
            branches.add(own_tmp)
        self.assertEqual(branches, {True, False})

    def test_a_run_whose_own_tmp_is_60_bytes_still_resolves_in_a_run_dir_of_its_own(self):
        # v0.8.0 failed such a run (a run set's trial): its 60-byte TMPDIR passed the old
        # bound, but the worker socket under it was over 107 bytes long.
        base = tempfile.mkdtemp(prefix="", dir="/tmp")
        self.addCleanup(shutil.rmtree, base, True)
        run_name = len("json-events-20261202T220414Z-509525/tmp") + 1
        self.out = os.path.join(base, "p" * (60 - run_name - len(base) - 1))
        run_dirs = set()
        for drive in ("oneshot", "resident"):
            done, result = self.run_runner(
                "simulated/oracle", two_shard_fixture(), "--drive", drive
            )
            self.assertEqual(len(os.path.join(self.run_dir(result), "tmp")), 60)
            self.assertEqual(done.returncode, 0, result["reasons"])
            self.assertTrue(result["resolved"])
            run_dirs.add(self.run_dir(result))
        # Every run gets a new run dir, in the same --out.
        self.assertEqual(len(run_dirs), 2)
        self.assertEqual(len(os.listdir(self.out)), 2)


if __name__ == "__main__":
    unittest.main()
