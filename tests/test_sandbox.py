"""The sandbox (shell/sandbox.py) and who calls the model (shell/callers.py).

A hostile stand-in, `simulated/breakout`, tries each way out of its run and reports what it
managed: sandboxed, every attempt fails; unsandboxed, the same attempts succeed, so the
test can fail. (That behaviours chosen for what they touch get the same verdict either way
is test_runner_cheats' one-shot and test_runner_resident's: runner_case.SameVerdictsCase.)
The caller rule is tried on real processes: the product's own calls pass, a kernel's, a
cell's and a detached process's do not. The parts that need bwrap are skipped where it
cannot run.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import socket
import subprocess
import sys
import unittest
from unittest import mock

from swarm_fanout import runner
from swarm_fanout.shell import callers, sandbox
from tests import executable, temp_dir
from tests.runner_case import JSON_EVENTS, RunnerTestCase

AVAILABLE = sandbox.availability()
needs_bwrap = unittest.skipUnless(AVAILABLE.usable, f"no sandbox here: {AVAILABLE.problem}")
ATTEMPTS = (
    "read_home",
    "read_outside",
    "write_outside",
    "write_tmp",
    "tcp_loopback",
    "find_runner",
    "read_runner_env",
    "signal_runner",
    "shell_env",
    "write_stream",
    "read_product_memory",
    "open_product_memory",
    "call_model",
    "call_model_detached",
)


class BreakoutTest(RunnerTestCase):
    """simulated/breakout against a decoy outside the run (a stand-in for the user's files
    and the system /tmp), a TCP service on 127.0.0.1 and a secret in the user's shell."""

    # It looks for the runner by its command line and reads the environment it started with.
    own_interpreter = True

    def setUp(self) -> None:
        super().setUp()
        self.decoy = os.path.join(temp_dir(self), "secret.txt")
        with open(self.decoy, "w", encoding="utf-8") as handle:
            handle.write("the user's own file\n")
        self.service = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(self.service.close)
        self.env.update(
            USER_SHELL_SECRET="hunter2",
            SIMULATED_BREAKOUT_DECOY=self.decoy,
            SIMULATED_BREAKOUT_PORT=str(self.service.getsockname()[1]),
        )

    def breakout(self, *flags: str) -> tuple[dict, dict]:
        done, result = self.run_runner("simulated/breakout", None, *flags)
        self.assertEqual(done.returncode, 1, result["reasons"])
        with open(os.path.join(self.run_dir(result), "repo", "breakout-report.json")) as handle:
            report = json.load(handle)
        self.assertEqual(sorted(report), sorted(ATTEMPTS))
        # Whatever got out, the run fails: both forged calls were the cell's, not the
        # product's, and the proxy refused them.
        self.assertEqual(self.codes(result), ["foreign_model_call", "foreign_model_call"])
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        # Sandboxed or not, the run says so in its progress line, meta and result.
        enabled = result["sandbox"]["enabled"]
        self.assertIn(b"2 replies (sandboxed)" if enabled else b"(not sandboxed)", done.stderr)
        with open(os.path.join(self.run_dir(result), "run-meta.json")) as handle:
            self.assertIs(json.load(handle)["sandbox"]["enabled"], enabled)
        return result, report

    def written_on_the_machine(self, report: dict) -> list[str]:
        """What the cell's writes outside its run left on the machine itself."""
        written = glob.glob(os.path.join(os.path.dirname(self.decoy), "written-by-breakout-*"))
        path = report["write_tmp"]["detail"]
        if report["write_tmp"]["ok"] and os.path.exists(path):
            written.append(path)
            self.addCleanup(os.remove, path)
        return written

    def a_connection_came(self) -> bool:
        self.service.setblocking(False)
        try:
            self.service.accept()[0].close()
        except BlockingIOError:
            return False
        return True

    @needs_bwrap
    def test_sandboxed_breakout_breaches_nothing_under_either_drive(self):
        for drive in ("oneshot", "resident"):
            with self.subTest(drive=drive):
                result, report = self.breakout("--drive", drive)
                self.assertTrue(result["sandbox"]["enabled"])
                managed = {name for name, outcome in report.items() if outcome["ok"]}
                # The cell may write its own /tmp (in memory, gone with the sandbox) and list
                # the home only as far as the way to an interpreter bound from under it.
                self.assertLessEqual(managed, {"write_tmp", "read_home"}, report)
                self.assertEqual(self.written_on_the_machine(report), [])
                if report["read_home"]["ok"]:
                    home = os.path.expanduser("~")
                    ways = {
                        os.path.relpath(path, home).split(os.sep)[0]
                        for path in result["sandbox"]["binds"]["read_only"]
                        if path.startswith(home + os.sep)
                    }
                    self.assertLessEqual(set(json.loads(report["read_home"]["detail"])), ways)
                self.assertFalse(self.a_connection_came())
                self.assertIn("HTTP 403", report["call_model"]["detail"])
                self.assertIn("HTTP 403", report["call_model_detached"]["detail"])

    def test_unsandboxed_the_same_attempts_get_out(self):
        result, report = self.breakout("--no-sandbox")
        self.assertFalse(result["sandbox"]["enabled"])
        managed = {name for name, outcome in report.items() if outcome["ok"]}
        self.assertEqual(
            managed,
            set(ATTEMPTS) - {"write_stream", "call_model", "call_model_detached"},
            report,
        )
        self.assertEqual(report["read_outside"]["detail"], "the user's own file\n")
        self.assertEqual(len(self.written_on_the_machine(report)), 2)
        self.assertTrue(self.a_connection_came())
        self.assertIn("USER_SHELL_SECRET in it", report["read_runner_env"]["detail"])
        # What the sandbox does not need for: the stream is a socket no /proc path opens,
        # and the proxy judges its callers either way.
        self.assertIn("No such device or address", report["write_stream"]["detail"])
        self.assertIn("HTTP 403", report["call_model"]["detail"])
        self.assertIn("HTTP 403", report["call_model_detached"]["detail"])


class AvailabilityTest(RunnerTestCase):
    """No bwrap, or a kernel that refuses its namespaces: the default falls back and says
    so once; --sandbox is exit 2 with a one-line hint."""

    def refusing_bwrap(self) -> None:
        """A bwrap first on PATH that fails as bwrap does where user namespaces are off."""
        bin_dir = os.path.join(self.tmp, "bin")
        os.mkdir(bin_dir)
        refusal = "bwrap: setting up uid map: Permission denied"
        executable(os.path.join(bin_dir, "bwrap"), f"#!/bin/sh\necho '{refusal}' >&2\nexit 1\n")
        self.env["PATH"] = bin_dir + os.pathsep + self.env["PATH"]

    def test_without_bwrap_there_is_no_sandbox_and_the_reason_says_how_to_get_one(self):
        with mock.patch("shutil.which", return_value=None):
            found = sandbox.availability()
        self.assertFalse(found.usable)
        self.assertIn("apt install bubblewrap", found.problem)

    def test_a_kernel_that_refuses_the_namespaces_is_named(self):
        self.refusing_bwrap()
        with mock.patch.dict(os.environ, {"PATH": self.env["PATH"]}):
            found = sandbox.availability()
        self.assertFalse(found.usable)
        self.assertIn("refuses", found.problem)
        self.assertIn("Permission denied", found.problem)

    def test_by_default_the_run_goes_on_unsandboxed_and_says_so_once(self):
        self.refusing_bwrap()
        # An agent that does nothing: what is checked is where it ran.
        done, result = self.run_runner("simulated/nop")
        self.assertEqual(result["status"], "scored")
        self.assertFalse(result["sandbox"]["enabled"])
        self.assertIn("refuses", result["sandbox"]["why_not"])
        self.assertEqual(done.stderr.count(b"running without a sandbox"), 1)
        self.assertIn(b"(not sandboxed)", done.stderr)
        with open(os.path.join(self.run_dir(result), "run-meta.json")) as handle:
            self.assertFalse(json.load(handle)["sandbox"]["enabled"])

    def test_asking_for_the_sandbox_where_there_is_none_is_exit_2_and_no_run_dir(self):
        self.refusing_bwrap()
        done, result = self.run_runner("simulated/oracle", JSON_EVENTS, "--sandbox")
        self.assertEqual(done.returncode, 2)
        self.assertEqual(self.codes(result), ["sandbox_unavailable"])
        (line,) = done.stderr.decode().strip().splitlines()
        self.assertTrue(line.startswith("runner.py: --sandbox: "), line)
        self.assertFalse(os.path.exists(self.out) and os.listdir(self.out))

    @needs_bwrap
    def test_a_sandbox_that_does_not_start_keeps_bwraps_own_words(self):
        # A shim that is not there: bwrap refuses its mount and exits before the agent runs.
        out = io.StringIO()
        with (
            mock.patch.object(sandbox, "SHIM", os.path.join(self.tmp, "no-such-shim.py")),
            mock.patch.dict(os.environ, self.env, clear=True),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            code = runner.main(self.runner_argv("simulated/oracle", JSON_EVENTS, "--sandbox")[2:])
        result = json.loads(out.getvalue())
        self.assertEqual(code, 3)
        self.assertEqual(self.codes(result), ["sandbox_start_failed"])
        with open(os.path.join(self.run_dir(result), "stderr.txt"), encoding="utf-8") as handle:
            self.assertIn("no-such-shim.py", handle.read())


class EnvironmentTest(unittest.TestCase):
    def test_the_agent_gets_what_the_product_needs_and_nothing_else(self):
        shell = {
            "PATH": "/usr/bin",
            "HOME": "/run/home",
            "LC_ALL": "C.UTF-8",
            "ANTHROPIC_API_KEY": "sk-ant",
            "PRIME_AGENT_KERNEL_PYTHON": "/k/python",
            "PI_OFFLINE": "1",
            "SWARM_FANOUT_TRIAL": "3",
            "SIMULATED_FLAKY_P": "0.5",
            "MY_GATEWAY_KEY": "from models.json",
            "AWS_SECRET_ACCESS_KEY": "a secret of the shell",
            "SSH_AUTH_SOCK": "/run/user/1000/ssh",
            "GITHUB_TOKEN": "ghp",
        }
        kept = sandbox.agent_env(shell, ("MY_GATEWAY_KEY",))
        self.assertEqual(
            set(kept),
            set(shell) - {"AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "GITHUB_TOKEN"},
        )

    def test_a_models_json_apikey_that_names_a_variable_is_kept(self):
        config = {
            "providers": {
                "gateway": {"apiKey": "MY_GATEWAY_KEY"},
                "literal": {"apiKey": "sk-literal-123"},
                "command": {"apiKey": "!op read x"},
            }
        }
        self.assertEqual(sandbox.models_json_key_names(config), ("MY_GATEWAY_KEY",))


class BindsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = os.path.realpath(temp_dir(self))

    def make(self, *paths: str) -> None:
        for path in paths:
            full = os.path.join(self.tmp, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as handle:
                handle.write("{}\n")

    def test_an_npm_package_is_shown_with_the_node_modules_it_sits_in(self):
        self.make(
            "lib/node_modules/prime-agent/package.json", "lib/node_modules/prime-agent/dist/cli.js"
        )
        cli = os.path.join(self.tmp, "lib/node_modules/prime-agent/dist/cli.js")
        self.assertEqual(sandbox.install_root(cli, "/nonexistent"), os.path.join(self.tmp, "lib"))

    def test_a_bin_layout_is_shown_from_its_prefix(self):
        self.make("opt/node/bin/node")
        node = os.path.join(self.tmp, "opt/node/bin/node")
        self.assertEqual(
            sandbox.install_root(node, "/nonexistent"), os.path.join(self.tmp, "opt/node")
        )

    def test_a_wrapper_scripts_named_files_are_shown_with_their_installs(self):
        self.make("opt/node/bin/node", "src/agent/package.json", "src/agent/dist/cli.js")
        wrapper = os.path.join(self.tmp, "wrapper", "prime-agent")
        os.makedirs(os.path.dirname(wrapper))
        with open(wrapper, "w", encoding="utf-8") as handle:
            handle.write(
                f"#!/bin/sh\nexec {self.tmp}/opt/node/bin/node '{self.tmp}/src/agent/dist/cli.js'"
                ' "$@"\n'
            )
        shown = sandbox.install_dirs(wrapper, "/nonexistent", "/usr/bin:/bin")
        for install in ("wrapper", "opt/node", "src/agent"):
            self.assertIn(os.path.join(self.tmp, install), shown)

    def test_the_users_home_is_never_shown_whole(self):
        self.make("home/bin/agent")
        agent = os.path.join(self.tmp, "home/bin/agent")
        home = os.path.join(self.tmp, "home")
        self.assertEqual(sandbox.install_root(agent, home), os.path.join(home, "bin"))
        self.make("home/agent")
        self.assertIsNone(sandbox.install_root(os.path.join(home, "agent"), home))

    def test_other_runs_are_hidden_unless_an_install_lives_among_them(self):
        self.make("runs/run-1/x", "tools/bin/agent")
        root = os.path.join(self.tmp, "runs", "run-2")
        binds = sandbox.plan_binds(
            agent_bin=os.path.join(self.tmp, "tools/bin/agent"),
            env={"PATH": "/usr/bin"},
            run_root=root,
            writable=[os.path.join(root, "repo")],
            home="/nonexistent",
        )
        self.assertEqual(binds.hidden, os.path.join(self.tmp, "runs"))
        self.assertIn(os.path.join(self.tmp, "tools"), binds.read_only)
        # An install among the runs (an --out that holds the agent too) stays visible.
        self.make("runs/tools/bin/agent")
        inside = sandbox.plan_binds(
            agent_bin=os.path.join(self.tmp, "runs/tools/bin/agent"),
            env={"PATH": "/usr/bin"},
            run_root=root,
            writable=[],
            home="/nonexistent",
        )
        self.assertEqual(inside.hidden, root)


class SeccompTest(unittest.TestCase):
    def test_an_architecture_without_a_table_gets_no_filter(self):
        self.assertIsNone(sandbox.seccomp_filter("sparc64"))
        for machine in sandbox.SECCOMP_ARCHES:
            self.assertEqual(len(sandbox.seccomp_filter(machine)) % 8, 0)

    # Seize its own child (which ptrace always allows) and say how that went.
    PROBE = (
        "import ctypes, os, signal\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    signal.pause()\n"
        "print(libc.ptrace(0x4206, child, 0, 0), ctypes.get_errno())\n"
        "os.kill(child, signal.SIGKILL)\n"
    )

    def seize(self, program: bytes | None) -> list[bytes]:
        # The hidden dir is one of the test's own: a checkout under /tmp keeps its venv seen.
        binds = sandbox.Binds((sys.prefix, sys.base_prefix), temp_dir(self), ())
        passed = ()
        if program is not None:
            read_end, write_end = os.pipe()
            os.write(write_end, program)
            os.close(write_end)
            passed = (read_end,)
            self.addCleanup(os.close, read_end)
        argv = sandbox.bwrap_argv(AVAILABLE.bwrap, binds, "/", passed[0] if passed else None)
        done = subprocess.run(
            [*argv, "--", sys.executable, "-I", "-c", self.PROBE],
            pass_fds=passed,
            capture_output=True,
            timeout=30,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.split()

    @needs_bwrap
    def test_inside_ptrace_is_refused_and_without_the_filter_it_is_not(self):
        program = sandbox.seccomp_filter()
        if program is None:
            self.skipTest("no seccomp table for this architecture")
        self.assertEqual(self.seize(program), [b"-1", b"1"])  # EPERM
        self.assertEqual(self.seize(None), [b"0", b"0"])


class ShimTest(unittest.TestCase):
    # Inside: connect to the proxy's port on the sandbox's loopback and wait for the test to
    # close that connection.
    CLIENT = (
        "import socket, sys\n"
        "client = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
        "client.recv(1)\n"
    )

    @needs_bwrap
    def test_the_shim_hands_over_a_sock_diag_socket_of_the_sandboxs_network(self):
        hidden = temp_dir(self)
        plan = sandbox.Bubblewrap(
            AVAILABLE.bwrap, sandbox.Binds((sys.prefix, sys.base_prefix), hidden, ())
        )
        # The proxy's part: its port, and the listening socket the shim hands over to serve.
        proxy = mock.Mock(port=4711)  # the sandbox's network has nothing else on any port
        started = plan.start(
            [sys.executable, "-I", "-c", self.CLIENT, str(proxy.port)],
            cwd="/",
            env={"PATH": os.environ["PATH"]},
            agent_home=hidden,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            proxy=proxy,
        )
        self.addCleanup(started.process.wait, 30)
        self.addCleanup(started.status.close)
        (listener,) = proxy.serve.call_args.args
        self.addCleanup(listener.close)
        self.assertIsNotNone(started.diag)
        listener.settimeout(30)
        connection, (host, client_port) = listener.accept()
        self.addCleanup(connection.close)
        # The tree hangs from the sandbox's init, whose network's TCP table holds the client's
        # socket too.
        inside = started.tree()
        self.addCleanup(inside.stop)
        inode = inside._client_inode(host, client_port, proxy.port)
        self.assertIsNotNone(inode)
        self.assertEqual(inside._diag_inode(host, client_port, "127.0.0.1", proxy.port), inode)
        # The runner's own network has no such connection.
        outside = callers.RunProcesses((os.getpid(),), os.getpid())
        self.addCleanup(outside.stop)
        self.assertIsNone(outside._diag_inode(host, client_port, "127.0.0.1", proxy.port))


class CallersTest(unittest.TestCase):
    """The product rule on real processes: this test plays the runner (the top of the tree),
    a Python process it starts plays the product, `/bin/sh` a kernel (another program)."""

    HOLD = (
        "import socket, sys; s = socket.create_connection(('127.0.0.1', {port})); sys.stdin.read()"
    )

    def setUp(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(self.listener.close)
        self.listener.settimeout(30)
        self.port = self.listener.getsockname()[1]
        self.processes: list[subprocess.Popen] = []
        self.addCleanup(self.end_processes)

    def end_processes(self) -> None:
        for process in self.processes:
            with contextlib.suppress(OSError):
                process.stdin.close()
            process.kill()
            process.wait()

    def start(self, argv: list[str]) -> subprocess.Popen:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        self.processes.append(process)
        return process

    def hold(self) -> str:
        return self.HOLD.format(port=self.port)

    def product_that_starts(self, child: list[str]) -> subprocess.Popen:
        """The product: connects itself, then starts `child` (which inherits its stdin,
        so both hold their connections until the test ends)."""
        code = f"import subprocess, sys\nsubprocess.Popen({child!r})\n{self.hold()}"
        return self.start([sys.executable, "-c", code])

    def watch(self, product: subprocess.Popen) -> callers.RunProcesses:
        watch = callers.RunProcesses((os.getpid(),), product.pid)
        self.addCleanup(watch.stop)
        return watch

    def callers_of(self, product, count: int, watch=None) -> list[callers.Caller]:
        """The next `count` callers, as `watch` (by default a new one) names them, the
        product's own first."""
        watch = watch or self.watch(product)
        found = []
        for _ in range(count):
            connection, _ = self.listener.accept()
            self.addCleanup(connection.close)
            found.append(watch.identify(connection))
        return sorted(found, key=lambda caller: caller.pid != product.pid)

    def test_the_product_and_a_worker_running_the_products_program_call_as_the_product(self):
        product = self.product_that_starts([sys.executable, "-c", self.hold()])
        own, worker = self.callers_of(product, 2)
        self.assertEqual(own.pid, product.pid)
        self.assertTrue(own.product and worker.product, (own, worker))
        self.assertIsNone(worker.reason)

    def test_a_cell_below_a_kernel_of_another_program_does_not(self):
        kernel = ["/bin/sh", "-c", '"$0" -c "$1"; exit $?', sys.executable, self.hold()]
        product = self.product_that_starts(kernel)
        own, cell = self.callers_of(product, 2)
        self.assertTrue(own.product)
        self.assertFalse(cell.product)
        self.assertIn("ran", cell.reason)

    def test_a_process_that_left_the_products_tree_does_not(self):
        # A shell starts it in the background and exits: it is no longer below the product.
        kernel = ["/bin/sh", "-c", '"$0" -c "$1" &', sys.executable, self.hold()]
        product = self.product_that_starts(kernel)
        own, detached = self.callers_of(product, 2)
        self.assertTrue(own.product)
        self.assertFalse(detached.product)

    def test_a_kernel_that_execs_the_products_program_in_place_does_not(self):
        # It waits until the runner has seen it run the shell, then becomes the product's
        # program, where it sits: only the record of what it ran before tells.
        kernel = ["/bin/sh", "-c", 'read go; exec "$0" -c "$1"', sys.executable, self.hold()]
        code = (
            "import subprocess, sys\n"
            f"kernel = subprocess.Popen({kernel!r}, stdin=subprocess.PIPE)\n"
            "sys.stdin.readline()\n"
            "kernel.stdin.write(b'go\\n'); kernel.stdin.flush()\n"
            f"{self.hold()}"
        )
        product = self.start([sys.executable, "-c", code])
        watch = self.watch(product)
        shell = os.path.realpath("/bin/sh")
        for _ in range(100_000):
            # The product's own child: a shell left by an earlier test may still be exiting
            # below this process (a subreaper once a test ran runner.main in process).
            seen = watch.poll().values()
            if any(look.exe == shell and look.ppid == product.pid for look in seen):
                break
        else:
            self.fail("the kernel never showed up running the shell")
        product.stdin.write(b"\n")
        product.stdin.flush()
        _, kernel_call = self.callers_of(product, 2, watch)
        self.assertFalse(kernel_call.product)
        self.assertIn(shell, kernel_call.reason)

    def test_sock_diag_and_the_tcp_table_find_the_same_client_socket(self):
        client = socket.create_connection(("127.0.0.1", self.port))
        self.addCleanup(client.close)
        connection, (host, port) = self.listener.accept()
        self.addCleanup(connection.close)
        watch = callers.RunProcesses((os.getpid(),), os.getpid())
        self.addCleanup(watch.stop)
        inode = os.fstat(client.fileno()).st_ino
        self.assertIsNotNone(watch.diag)
        self.assertEqual(watch._diag_inode(host, port, "127.0.0.1", self.port), inode)
        self.assertEqual(watch._client_inode(host, port, self.port), inode)
        # No connection between those ports: the socket listening on the local one is no
        # client's, and neither way finds one.
        self.assertIsNone(watch._diag_inode("127.0.0.1", self.port, "127.0.0.1", 1))
        self.assertIsNone(watch._client_inode("127.0.0.1", self.port, 1))

    def test_a_process_outside_the_run_does_not(self):
        product = self.start([sys.executable, "-c", "import sys; sys.stdin.read()"])
        stranger = self.start([sys.executable, "-c", self.hold()])
        (caller,) = self.callers_of(product, 1)
        self.assertEqual(caller.pid, stranger.pid)
        self.assertFalse(caller.product)
        self.assertIn("does not descend", caller.reason)


if __name__ == "__main__":
    unittest.main()
