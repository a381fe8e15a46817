"""shell/forked.py: work in forked workers, given back in the items' order, with no worker
left behind.

Each case runs in a fresh interpreter (a unittest process may run threads, where the module
rightly takes no fork); the workers tell the test their pids through a pipe the test reads,
and their ends are observed on pidfds, not waited for by the clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import unittest

from tests.runner_case import ROOT

# Run as `python -c PROGRAM CASE PID_FD`: each worker's work first writes "<pid>\n" to
# PID_FD (the test reads them); the cases below then say what the work does.
PROGRAM = textwrap.dedent(
    """
    import json, os, sys, threading
    from shell import forked

    case, pid_fd = sys.argv[1], int(sys.argv[2])
    hold_r, hold_w = os.pipe()  # read by work that waits; written by work that releases it

    def told(item):
        os.write(pid_fd, f"{os.getpid()}\\n".encode())
        return item

    def pids(item):
        return [told(item), os.getpid()]

    def reversed_ends(item):
        # Item 0 waits until item 2 has ended: the workers finish out of order.
        told(item)
        if item == 0:
            os.read(hold_r, 1)
        print(f"note {item}", file=sys.stderr)
        if item == 2:
            os.write(hold_w, b"x")
        return item

    def raises(item):
        if told(item) == 1:
            raise ValueError("item 1")
        return item

    def blocks_after_first(item):
        if item > 0:
            told(item)
            os.read(hold_r, 1)  # nobody writes: only a kill ends it
        return item

    def killed(item):
        if item == 1:
            os.kill(os.getpid(), 9)
        return item

    def interrupted(item):
        os.kill(os.getpid(), 2)  # SIGINT to this worker alone
        return item

    def blocks(item):
        told(item)
        os.read(hold_r, 1)

    if case == "pids":
        print(json.dumps({"parent": os.getpid(), "got": list(forked.in_order(pids, range(6), 3))}))
    elif case == "serial":
        jobs, thread = 4, None
        if sys.argv[3] == "thread":
            thread = threading.Thread(target=os.read, args=(hold_r, 1))
            thread.start()
        else:
            jobs = 1
        got = list(forked.in_order(pids, range(3), jobs))
        if thread:
            os.write(hold_w, b"x")
            thread.join()
        print(json.dumps({"parent": os.getpid(), "got": got}))
    elif case == "order":
        print(json.dumps(list(forked.in_order(reversed_ends, range(3), 3))))
    elif case == "raises":
        got = []
        try:
            for value in forked.in_order(raises, range(3), 3):
                got.append(value)
        except ValueError as error:
            got.append(str(error))
        print(json.dumps(got))
    elif case == "early_stop":
        results = forked.in_order(blocks_after_first, range(4), 4)
        first = next(results)
        sys.stdin.readline()  # the test has the workers' pids
        results.close()
        print(json.dumps(first), flush=True)
        sys.stdin.read()  # alive until the test has looked: a dead parent's workers die anyway
    elif case == "killed":
        got = []
        try:
            for value in forked.in_order(killed, range(3), 3):
                got.append(value)
        except forked.WorkerLost as error:
            got.append(str(error))
        print(json.dumps(got))
    elif case == "sigint_worker":
        print(json.dumps(list(forked.in_order(interrupted, range(3), 3))))
    elif case == "ctrl_c":
        try:
            list(forked.in_order(blocks, range(3), 3))
        except KeyboardInterrupt:
            print(json.dumps("interrupted"))
    elif case == "parent_dies":
        list(forked.in_order(blocks, range(3), 3))
    """
)


class InOrderTest(unittest.TestCase):
    def start(self, *case: str) -> tuple[subprocess.Popen, PidReader]:
        read_fd, write_fd = os.pipe()
        process = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, *case[:1], str(write_fd), *case[1:]],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(write_fd,),
            start_new_session=True,  # a process group of its own, for the Ctrl-C test
        )
        os.close(write_fd)
        self.addCleanup(self.stop, process)
        reader = PidReader(read_fd)
        self.addCleanup(reader.close)
        return process, reader

    @staticmethod
    def stop(process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.kill()
        process.communicate()

    def finished(self, process: subprocess.Popen) -> tuple[object, str]:
        out, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 0, err)
        return json.loads(out), err

    def test_each_item_is_worked_in_a_worker_of_its_own_and_given_back_in_order(self):
        process, _ = self.start("pids")
        result, _ = self.finished(process)
        self.assertEqual([item for item, _ in result["got"]], list(range(6)))
        pids = {pid for _, pid in result["got"]}
        self.assertEqual(len(pids), 6)
        self.assertNotIn(result["parent"], pids)

    def test_at_one_job_the_work_runs_in_this_process(self):
        process, _ = self.start("serial", "one-job")
        result, _ = self.finished(process)
        self.assertEqual(
            result["got"], [[0, result["parent"]], [1, result["parent"]], [2, result["parent"]]]
        )

    def test_a_process_that_runs_another_thread_takes_no_fork(self):
        process, _ = self.start("serial", "thread")
        result, _ = self.finished(process)
        self.assertEqual({pid for _, pid in result["got"]}, {result["parent"]})

    def test_results_and_stderr_come_in_the_items_order_when_workers_end_out_of_it(self):
        process, _ = self.start("order")
        result, err = self.finished(process)
        self.assertEqual(result, [0, 1, 2])
        self.assertEqual(err.splitlines(), ["note 0", "note 1", "note 2"])

    def test_an_exception_of_the_work_is_raised_in_its_items_place(self):
        process, _ = self.start("raises")
        result, _ = self.finished(process)
        self.assertEqual(result, [0, "item 1"])

    def test_a_worker_killed_from_outside_is_said_in_its_items_place(self):
        process, _ = self.start("killed")
        result, _ = self.finished(process)
        self.assertEqual(result, [0, "a worker ended without its result (killed by SIGKILL)"])

    def test_a_caller_that_stops_reading_leaves_no_worker_running(self):
        process, reader = self.start("early_stop")
        workers = reader.pids(3)
        process.stdin.write("go\n")
        process.stdin.flush()
        self.assertEqual(json.loads(process.stdout.readline()), 0)
        # The caller is still running: its workers ended because it closed them.
        self.assertEqual(reader.ended(workers), workers)
        self.assertIsNone(process.poll())
        process.communicate(timeout=60)  # closes its stdin: it exits
        self.assertEqual(process.returncode, 0)

    def test_ctrl_c_to_the_process_group_interrupts_the_caller_and_ends_the_workers(self):
        process, reader = self.start("ctrl_c")
        workers = reader.pids(3)
        os.killpg(process.pid, signal.SIGINT)  # as a terminal sends it
        result, _ = self.finished(process)
        self.assertEqual(result, "interrupted")
        self.assertEqual(reader.ended(workers), workers)

    def test_a_worker_goes_on_through_a_sigint_of_its_own(self):
        # Ctrl-C is its caller's to act on: a worker that took it too would lose its item.
        process, _ = self.start("sigint_worker")
        result, _ = self.finished(process)
        self.assertEqual(result, [0, 1, 2])

    def test_workers_die_with_a_killed_parent(self):
        process, reader = self.start("parent_dies")
        workers = reader.pids(3)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        self.assertEqual(reader.ended(workers), workers)


class PidReader:
    """The pids the workers wrote, and pidfds that say when each has ended."""

    def __init__(self, read_fd: int):
        self.read_fd = read_fd
        self.pidfds: dict[int, int] = {}

    def pids(self, count: int, limit_s: float = 60.0) -> set[int]:
        """The first `count` pids written (`limit_s`: a guard against a hang)."""
        written = b""
        while written.count(b"\n") < count:
            ready, _, _ = select.select([self.read_fd], [], [], limit_s)
            chunk = os.read(self.read_fd, 4096) if ready else b""
            if not chunk:
                raise AssertionError(f"{count} workers did not all start: {written!r}")
            written += chunk
        pids = {int(line) for line in written.splitlines()[:count]}
        for pid in pids:
            # Opened while the worker still runs (it blocks until killed), so the pid
            # is the worker's.
            self.pidfds[pid] = os.pidfd_open(pid)
        return pids

    def ended(self, pids: set[int], limit_s: float = 60.0) -> set[int]:
        """Those of `pids` that end within `limit_s` (a guard against a hang, not a
        measure: a live worker blocks on a pipe nobody writes)."""
        waiting = {self.pidfds[pid]: pid for pid in pids}
        ended = set()
        while waiting:
            ready, _, _ = select.select(list(waiting), [], [], limit_s)
            if not ready:
                break
            ended |= {waiting.pop(fd) for fd in ready}
        return ended

    def close(self) -> None:
        """Ends a worker a failing test left running, then lets go of the pidfds."""
        os.close(self.read_fd)
        for fd in self.pidfds.values():
            with contextlib.suppress(ProcessLookupError):  # ended and reaped, as it should
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)


if __name__ == "__main__":
    unittest.main()
