"""procs.end_processes: SIGTERM first, a grace period, then SIGKILL for what is left.

The runner's end-to-end tests prove that nothing outlives a run; these prove the
order, which they cannot see: a process that obeys SIGTERM is never SIGKILLed, so
an agent gets the chance to flush and close its files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import unittest
from unittest import mock

from swarm_fanout.shell import launch, procs, sandbox
from tests import temp_dir

# Each says when SIGTERM reaches it; the obedient one then exits, the stubborn one
# carries on until SIGKILL.
WATCHER = (
    "import signal, sys, time\n"
    "def on_term(signum, frame):\n"
    "    print('term', flush=True)\n"
    "    if sys.argv[1] == 'obedient':\n"
    "        sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, on_term)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.1)\n"
)


class EndProcessesTest(unittest.TestCase):
    def start(self, *argv: str, env: dict | None = None) -> subprocess.Popen:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        self.addCleanup(self.stop, process)
        return process

    @staticmethod
    def stop(process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()

    def test_term_ends_the_obedient_and_kill_ends_only_the_stubborn(self):
        obedient = self.start(sys.executable, "-c", WATCHER, "obedient")
        stubborn = self.start(sys.executable, "-c", WATCHER, "stubborn")
        # Both handlers are in place before SIGTERM is sent.
        self.assertEqual(obedient.stdout.readline(), "ready\n")
        self.assertEqual(stubborn.stdout.readline(), "ready\n")
        done = procs.end_processes([stubborn.pid, obedient.pid], grace=0.5)
        self.assertEqual(done["terminated"], sorted([obedient.pid, stubborn.pid]))
        self.assertEqual(done["killed"], [stubborn.pid])
        self.assertEqual(done["survivors"], [])
        # Both were sent SIGTERM first; only the stubborn one needed more.
        self.assertEqual(obedient.stdout.read(), "term\n")
        self.assertEqual(stubborn.stdout.read(), "term\n")
        self.assertFalse(procs.alive(obedient.pid) or procs.alive(stubborn.pid))

    def test_a_popen_child_named_as_owned_keeps_its_exit_status(self):
        plain = self.start(
            sys.executable, "-c", "print('ready', flush=True)\nimport time\ntime.sleep(60)"
        )
        stubborn = self.start(sys.executable, "-c", WATCHER, "stubborn")
        self.assertEqual(plain.stdout.readline() + stubborn.stdout.readline(), "ready\n" * 2)
        owned = {plain.pid: plain, stubborn.pid: stubborn}
        procs.end_processes([plain.pid, stubborn.pid], grace=0.5, owned=owned)
        # Reaped through Popen, which saw how each ended; a bare waitpid would have
        # taken the status, and Popen would then say 0.
        self.assertEqual(plain.returncode, -signal.SIGTERM)
        self.assertEqual(stubborn.returncode, -signal.SIGKILL)

    def test_processes_already_gone_are_neither_signalled_again_nor_survivors(self):
        quick = self.start(sys.executable, "-c", "pass")
        quick.wait(timeout=10)
        done = procs.end_processes([quick.pid], grace=0.2)
        self.assertEqual(done, {"terminated": [quick.pid], "killed": [], "survivors": []})

    def test_a_zombie_is_not_alive(self):
        process = self.start(sys.executable, "-c", "pass")
        self.become_zombie(process)
        self.assertFalse(procs.alive(process.pid))

    @staticmethod
    def become_zombie(process: subprocess.Popen) -> None:
        """Exited but not yet reaped: a zombie, as an orphan of a subreaper can be."""
        deadline = time.monotonic() + 10
        while procs._stat(process.pid).state != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procs._stat(process.pid).state == "Z"

    def test_a_detached_run_is_ended_by_its_marker_and_the_callers_children_are_left(self):
        # A verifiers rollout's processes are not the caller's to reap: the caller's other
        # children (another rollout's agent) keep running, and keep their exit status.
        home = temp_dir(self)
        env = {**os.environ, "PRIME_AGENT_CODING_AGENT_DIR": home}
        marked = self.start(sys.executable, "-c", WATCHER, "stubborn", env=env)
        running = self.start(sys.executable, "-c", WATCHER, "obedient")
        exited = self.start(sys.executable, "-c", "import sys; sys.exit(3)")
        self.assertEqual(marked.stdout.readline() + running.stdout.readline(), "ready\n" * 2)
        self.become_zombie(exited)
        ended = launch.end_run(sandbox.Detached(home), os.path.join(home, "daemon.sock"), grace=0.5)
        self.assertEqual((ended["terminated"], ended["killed"]), ([marked.pid], [marked.pid]))
        self.assertEqual(ended["leaked_pids"], [])
        self.assertIsNone(running.poll())
        self.assertEqual(exited.wait(timeout=10), 3)


# A process that starts a child from its main thread and one from another thread, which
# stays alive (a child is listed under the thread that started it) and which starts a
# grandchild; it prints their pids and waits for its stdin to close.
TREE = (
    "import queue, subprocess, sys, threading\n"
    "sleeper = [sys.executable, '-c', 'import sys; sys.stdin.read()']\n"
    "holder = [sys.executable, '-c', 'import subprocess, sys; "
    "print(subprocess.Popen(sys.argv[1:]).pid, flush=True); sys.stdin.read()', *sleeper]\n"
    "main = subprocess.Popen(sleeper)\n"
    "started = queue.Queue()\n"
    "def spawn():\n"
    "    started.put(subprocess.Popen(holder, stdout=subprocess.PIPE, text=True))\n"
    "    threading.Event().wait()\n"
    "threading.Thread(target=spawn, daemon=True).start()\n"
    "held = started.get()\n"
    "print(main.pid, held.pid, held.stdout.readline().strip(), flush=True)\n"
    "sys.stdin.read()\n"
)


class DescendantsTest(unittest.TestCase):
    def test_read_down_from_the_roots_they_are_those_of_the_whole_table(self):
        # stdin is a pipe the whole tree shares: closing it ends every process.
        tree = subprocess.Popen(
            [sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.addCleanup(tree.wait)
        self.addCleanup(tree.stdin.close)
        self.addCleanup(tree.stdout.close)
        below = {int(pid) for pid in tree.stdout.readline().split()}
        self.assertEqual(len(below), 3)
        self.assertEqual(procs.descendants_of((tree.pid,)), below)
        self.assertEqual(procs.descendants(tree.pid, procs.process_table()), below)
        # A root that is no process has none; each root's are there.
        self.assertEqual(procs.descendants_of((tree.pid, 2**22 + 1)), below)
        self.assertEqual(procs.descendants_of(()), set())
        # A kernel without the children files: the whole table, and the same answer.
        with mock.patch.object(procs, "_children_files", return_value=False):
            self.assertEqual(procs.descendants_of((tree.pid,)), below)


if __name__ == "__main__":
    unittest.main()
