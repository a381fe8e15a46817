"""The agent's sandbox: bubblewrap namespaces the agent and everything it starts run in
(docs/witness.md#the-sandbox).

Everything the product runs — the CLI or the daemon, its workers, its kernels, every cell
the model writes — runs as the invoking user. `bwrap` (Debian package `bubblewrap`) gives
it, without a container daemon, a view of the machine where:

- the file system is read-only but for the run's own agent-writable dirs (`Binds`); the
  user's home, the system /tmp and the rest of the run dir are not there at all;
- it has its own PID namespace: the runner, its proxy and its observer do not exist in it;
- it has its own network namespace, holding a loopback and nothing else. The recording
  proxy still serves it: the first process in the sandbox (the shim, shell/sandbox_shim.py, the
  harness's own code) binds a TCP socket on the sandbox's 127.0.0.1 at the proxy's port and
  hands the listening socket over to the runner before it starts the agent, so the proxy,
  in the runner's process, accepts the product's calls on it directly (no relay process
  the agent could reach);
- it gets the environment the product needs (`agent_env`), not the user's whole shell;
- a seccomp filter refuses ptrace and reading or writing another process's memory, and
  /proc is read-only, so a cell cannot take over a process of the product's to make its
  calls (shell/callers.py tells the product's calls from anyone else's).

`availability` probes once whether bwrap runs here (missing, or a kernel that refuses
unprivileged user namespaces); the runner falls back to an unsandboxed run when it does
not, unless `--sandbox` was asked for.

This module is also the seam shell/launch.py runs the agent through, sandboxed or not: a
`Plan` starts it, and the `Started` it returns watches and ends its processes; one subclass
of each per kind. The shim, which runs inside, is shell/sandbox_shim.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from swarm_fanout.shell import callers, daemon, procs

PROBE_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0  # for the shim to hand the proxy's socket over
SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_shim.py")

# The system, read-only. /bin, /lib and the rest are symlinks into /usr on a merged-/usr
# system (Debian since 12) and are made the same links inside; else bound read-only too.
SYSTEM_DIRS = ("/usr", "/etc", "/opt")
USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# The environment the agent gets (`agent_env`): its provider keys by the names the product
# reads them (packages/ai/src/env-api-keys.ts `getApiKeyEnvVars`, and the project and location
# of google-vertex, the account and gateway of cloudflare), what a process needs to run, the
# product's own variables and the harness's. Nothing else of the user's shell.
PROVIDER_KEYS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "PRIME_API_KEY",
    "DEEPSEEK_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_CLOUD_API_KEY",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GROQ_API_KEY",
    "CEREBRAS_API_KEY",
    "XAI_API_KEY",
    "OPENROUTER_API_KEY",
    "AI_GATEWAY_API_KEY",
    "ZAI_API_KEY",
    "MISTRAL_API_KEY",
    "MINIMAX_API_KEY",
    "MINIMAX_CN_API_KEY",
    "MOONSHOT_API_KEY",
    "HF_TOKEN",
    "FIREWORKS_API_KEY",
    "OPENCODE_API_KEY",
    "KIMI_API_KEY",
    "CLOUDFLARE_API_KEY",
    "CLOUDFLARE_ACCOUNT_ID",
    "CLOUDFLARE_GATEWAY_ID",
    "XIAOMI_API_KEY",
    "XIAOMI_TOKEN_PLAN_CN_API_KEY",
    "XIAOMI_TOKEN_PLAN_AMS_API_KEY",
    "XIAOMI_TOKEN_PLAN_SGP_API_KEY",
)
PROCESS_ENV = ("PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "NO_COLOR")
# LC_* locale; the product's (PRIME_AGENT_*, PI_*); the harness's (SWARM_FANOUT_TRIAL) and
# the simulated stand-in's knobs (SIMULATED_*).
ENV_PREFIXES = ("LC_", "PRIME_AGENT_", "PI_", "SWARM_FANOUT_", "SIMULATED_")


# Every namespace (user, IPC, PID, network, UTS, cgroup where the kernel has them), and no
# further user namespaces inside: a cell cannot give itself capabilities in one of its own.
NAMESPACES = (
    "--unshare-user",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-cgroup-try",
)
# No capabilities either (as root bwrap would keep them). And the sandbox dies with the
# runner: bwrap asks the kernel (PR_SET_PDEATHSIG) to SIGKILL it when the thread that
# started it ends, and when the PID namespace's first process dies the kernel kills every
# process in it; so a runner killed with SIGKILL, whose own cleanup never runs, leaves no
# process of the agent behind. The runner starts it from its main thread, which lives as
# long as the run.
PROBED = ("--disable-userns", "--cap-drop", "ALL", "--die-with-parent")
# Its own /proc, read-only (no process's memory opened for writing), /dev and /tmp.
FRESH_MOUNTS = ("--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev", "--tmpfs", "/tmp")


@dataclass(frozen=True)
class Availability:
    bwrap: str | None
    problem: str | None  # why no sandbox can run here; None when one can

    @property
    def usable(self) -> bool:
        return self.problem is None


def availability() -> Availability:
    """Whether bwrap is here and the kernel lets it make the namespaces a run needs: one
    quick try of an empty sandbox with the options a run uses (about 10 ms; a bwrap older
    than 0.8 lacks --disable-userns)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Availability(None, "bwrap is not installed (Debian/Ubuntu: apt install bubblewrap)")
    try:
        done = subprocess.run(
            [bwrap, *NAMESPACES, *PROBED, "--ro-bind", "/", "/", *FRESH_MOUNTS, "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return Availability(bwrap, f"bwrap could not be run: {error}")
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1] if said else f"exit {done.returncode}"
        return Availability(
            bwrap,
            f"the kernel refuses bwrap's namespaces ({why}); unprivileged user namespaces "
            "may be off (sysctl kernel.unprivileged_userns_clone or "
            "kernel.apparmor_restrict_unprivileged_userns)",
        )
    return Availability(bwrap, None)


# --- the environment -------------------------------------------------------------------


def agent_env(env: Mapping[str, str], key_names: tuple[str, ...] = ()) -> dict[str, str]:
    """The run's environment (rundir.RunDir.agent_env) cut to what the product needs:
    PROCESS_ENV, the provider keys, the product's, the harness's and the locale's variables,
    and `key_names`: the variables the run's models.json names as a provider's apiKey."""
    wanted = set(PROCESS_ENV) | set(PROVIDER_KEYS) | set(key_names)
    return {
        key: value for key, value in env.items() if key in wanted or key.startswith(ENV_PREFIXES)
    }


def models_json_key_names(config: object) -> tuple[str, ...]:
    """The variables a models.json names as apiKey: the product reads such an apiKey from
    the environment (its docs/models.md, "value resolution"). A `!command` apiKey runs
    inside the sandbox, where what it asks (a keychain, an agent's socket) is not there."""
    providers = config.get("providers") if isinstance(config, dict) else None
    if not isinstance(providers, dict):
        return ()
    names = []
    for entry in providers.values():
        key = entry.get("apiKey") if isinstance(entry, dict) else None
        if isinstance(key, str) and key.replace("_", "").isalnum() and key.upper() == key:
            names.append(key)
    return tuple(names)


# --- what the sandbox shows ----------------------------------------------------------------


@dataclass(frozen=True)
class Binds:
    """What the agent sees of the machine, besides the system (SYSTEM_DIRS), a fresh /proc
    (read-only), /dev (bwrap's minimal one), a /tmp of its own (empty, in memory) and the
    shim (shell/sandbox_shim.py, read-only)."""

    read_only: tuple[str, ...]  # the product's install, the interpreters, the kernel venv
    # An empty dir inside, covering the run dir and, where no read-only dir is in it, the
    # dir the run dir is in (other runs, a run set's other trials): the runner's alone.
    hidden: str
    writable: tuple[str, ...]  # the run's agent-writable dirs, under `hidden` or not

    def to_json(self) -> dict:
        return {
            "read_only": list(self.read_only),
            "hidden": self.hidden,
            "writable": list(self.writable),
        }


def install_dirs(executable: str, home: str, path_env: str | None) -> list[str]:
    """The dirs an executable needs to run: the install it belongs to (`install_root`) as
    it is found and as its real path, a venv's root, and for a script the interpreter of its
    shebang (found on the PATH the agent gets, `path_env`) and the files it names by
    absolute path (a wrapper's `exec /opt/node/bin/node /opt/agent/cli.js`), with theirs."""
    found = [executable, *script_needs(executable, path_env)]
    for named in found[1:]:
        interpreter = shebang_interpreter(named, path_env)
        if interpreter is not None:
            found.append(interpreter)
    dirs = []
    for path in found:
        real = os.path.realpath(path)
        dirs.append(install_root(real, home) or real)
        venv = os.path.dirname(os.path.dirname(os.path.abspath(path)))
        if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
            dirs.append(venv)
        elif real != os.path.abspath(path):
            dirs.append(os.path.dirname(os.path.abspath(path)))
    return dirs


# An absolute path in a script's text: up to a quote, a blank or shell punctuation.
NAMED_PATH = re.compile(r"(?<![\w./-])/[^\s'\"$;|&<>()`]+")
SCRIPT_BYTES = 64 * 1024


def script_needs(path: str, path_env: str | None) -> list[str]:
    """A script's interpreter and the existing files its text names by absolute path."""
    interpreter = shebang_interpreter(path, path_env)
    if interpreter is None:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(SCRIPT_BYTES)
    except OSError:
        return [interpreter]
    named = [match for match in NAMED_PATH.findall(text) if os.path.isfile(match)]
    return list(dict.fromkeys([interpreter, *named]))


def install_root(real_path: str, home: str) -> str | None:
    """The install a file belongs to: the nearest dir above it with a package.json or
    pyproject.toml (above every node_modules it is in: a package's dependencies may sit
    beside it), else the prefix of a `<prefix>/bin/<file>` layout, else its own dir. Never
    the user's home, an ancestor of it, or /: then its own dir, or when that is one of
    them too, None (the file alone is shown)."""
    here = os.path.dirname(real_path)
    root = None
    probe = here
    while probe != os.path.dirname(probe):
        if os.path.basename(probe) == "node_modules":
            root = os.path.dirname(probe)
        elif root is None and any(
            os.path.isfile(os.path.join(probe, name)) for name in ("package.json", "pyproject.toml")
        ):
            root = probe
        probe = os.path.dirname(probe)
    if root is None:
        root = os.path.dirname(here) if os.path.basename(here) == "bin" else here
    for candidate in (root, here):
        if candidate != os.path.dirname(candidate) and not is_within(home, candidate):
            return candidate
    return None


def shebang_interpreter(path: str, path_env: str | None) -> str | None:
    """The interpreter a script names on its first line (through `/usr/bin/env NAME`: NAME
    on PATH), or None for a binary."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [word for word in words[1:] if not word.startswith("-")]
        return shutil.which(names[0], path=path_env) if names else None
    return words[0]


def is_within(path: str, directory: str) -> bool:
    path, directory = os.path.abspath(path), os.path.abspath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def plan_binds(
    *, agent_bin: str, env: Mapping[str, str], run_root: str, writable: list[str], home: str
) -> Binds:
    """The binds of one run: the agent's install and interpreter, the kernel Python the
    product is given (PRIME_AGENT_KERNEL_PYTHON or PRIME_AGENT_KERNEL_VENV), and the
    interpreter this runner runs on, which runs the shim."""
    wanted = install_dirs(agent_bin, home, env.get("PATH"))
    kernel = env.get("PRIME_AGENT_KERNEL_PYTHON")
    venv = env.get("PRIME_AGENT_KERNEL_VENV")
    if venv and not kernel:
        kernel = os.path.join(venv, "bin", "python")
    if kernel and os.path.exists(kernel):
        wanted += install_dirs(kernel, home, env.get("PATH"))
    wanted += [sys.prefix, sys.base_prefix]
    shown: list[str] = []
    for path in sorted({os.path.abspath(item) for item in wanted if os.path.exists(item)}):
        covered = any(is_within(path, done) for done in (*SYSTEM_DIRS, *USR_LINKS, *shown))
        too_wide = os.path.isdir(path) and (is_within(home, path) or path == "/")
        if not covered and not too_wide:
            shown.append(path)
    around = os.path.dirname(run_root)
    keeps_installs = any(is_within(path, around) for path in shown) or is_within(home, around)
    return Binds(tuple(shown), run_root if keeps_installs else around, tuple(writable))


def plan_run(
    available: Availability | None,
    *,
    agent_bin: str,
    env: dict[str, str],
    run_root: str,
    writable: list[str],
    key_names: tuple[str, ...],
) -> tuple[dict[str, str], Plan, dict]:
    """The agent's environment and plan for one run (sandboxed where `available` says it
    can be: None for --no-sandbox), and the result's `sandbox` record."""
    plan = Plan()
    if available is not None and available.usable:
        env = agent_env(env, key_names)
        home = os.path.expanduser("~")
        binds = plan_binds(
            agent_bin=agent_bin, env=env, run_root=run_root, writable=writable, home=home
        )
        plan = Bubblewrap(available.bwrap, binds)
    record = {"enabled": plan.sandboxed, "bwrap": available.bwrap if available else None}
    if plan.sandboxed:
        record["binds"] = plan.binds.to_json()
    else:
        record["why_not"] = available.problem if available else "--no-sandbox"
    return env, plan, record


def bwrap_argv(bwrap: str, binds: Binds, cwd: str, seccomp_fd: int | None) -> list[str]:
    """bwrap's options, up to the command. Later mounts cover earlier ones: the run root's
    empty dir covers whatever a read-only install shows of it (a run dir under the
    harness's own `runs/`), and the writable dirs are bound into it."""
    argv = [bwrap, *NAMESPACES, *PROBED]
    for path in SYSTEM_DIRS:
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in USR_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += FRESH_MOUNTS
    for path in binds.read_only:
        argv += ["--ro-bind", path, path]
    argv += ["--ro-bind", SHIM, SHIM, "--tmpfs", binds.hidden]
    for path in binds.writable:
        argv += ["--bind", path, path]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return [*argv, "--chdir", cwd]


# --- seccomp: no ptrace, no reading or writing another process's memory -------------------

# (audit arch, syscall numbers of ptrace, process_vm_readv, process_vm_writev, pidfd_getfd)
# from the kernel's syscall tables; x86_64's x32 ABI (numbers from 0x40000000) is refused whole.
SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, (101, 310, 311, 438), True),
    "aarch64": (0xC00000B7, (117, 270, 271, 438), False),
}
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """The classic-BPF program bwrap loads (`--seccomp FD`): EPERM for the syscalls above and
    for any other architecture's syscalls (a 32-bit syscall has other numbers); None on an
    architecture not listed."""
    known = SECCOMP_ARCHES.get(machine or platform.machine())
    if known is None:
        return None
    arch, blocked, x32 = known
    program: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 1, 0, arch),
        (_RET_K, 0, 0, _EPERM),
        (_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    tests = [(_JGE_K, 0x40000000)] if x32 else []
    tests += [(_JEQ_K, number) for number in blocked]
    deny = len(program) + len(tests) + 1  # after the tests and the allow
    for code, k in tests:
        program.append((code, deny - len(program) - 1, 0, k))
    program += [(_RET_K, 0, 0, _ALLOW), (_RET_K, 0, 0, _EPERM)]
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


# --- the seam: how the agent's processes are started, watched and ended ------------------


class Plan:
    """How the agent of one run is started: launch.py starts it with `start` and watches and
    ends it through the `Started` returned, whatever the kind. This one is the plain kind
    (--no-sandbox, or no bwrap here): the agent runs in the runner's namespaces."""

    sandboxed = False

    def start(self, argv: list[str], *, agent_home: str, proxy, **popen) -> Started:
        """Start `argv` in a session of its own (`popen`: its cwd, env and standard streams);
        `proxy`, the recording proxy, serves it where it runs."""
        return Started(subprocess.Popen(argv, **popen, start_new_session=True), agent_home)


@dataclass(frozen=True)
class Bubblewrap(Plan):
    """The agent sandboxed: bwrap, and what it shows of the machine."""

    bwrap: str
    binds: Binds
    sandboxed = True

    def start(self, argv: list[str], *, agent_home: str, proxy, **popen) -> Started:
        """Returns once the shim has handed over the socket the proxy serves the sandbox on;
        raises SandboxError when it does not come."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        status_read, status_write = os.pipe()
        program = seccomp_filter()
        seccomp = os.memfd_create("seccomp", 0) if program is not None else None
        if seccomp is not None:
            os.write(seccomp, program)
            os.lseek(seccomp, 0, os.SEEK_SET)
        # -I -S: the shim reads nothing of the environment's Python settings or site.
        shim = [sys.executable, "-I", "-S", SHIM, str(proxy.port), str(theirs.fileno())]
        command = [*bwrap_argv(self.bwrap, self.binds, popen["cwd"], seccomp), "--", *shim]
        command += [str(status_write), "--", *argv]
        passed = [theirs.fileno(), status_write, *([seccomp] if seccomp is not None else [])]
        try:
            process = subprocess.Popen(command, **popen, pass_fds=passed, start_new_session=True)
        finally:
            theirs.close()
            os.close(status_write)
            if seccomp is not None:
                os.close(seccomp)
        try:
            listener, diag = _receive_listener(ours, process)
        except BaseException:
            os.close(status_read)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        finally:
            ours.close()
        proxy.serve(listener)
        return Sandboxed(process, agent_home, StatusPipe(status_read), diag)


class SandboxError(OSError):
    """The sandbox did not start: bwrap refused its options, or the shim never reported."""


class StatusPipe:
    """The read end of the shim's status pipe: `started <pid>` once the agent is forked
    (its pid inside), then `exit <code>` or `signal <n>`."""

    def __init__(self, fd: int):
        self.fd = fd
        self.words: list[str] = []

    def read(self, wait: float = 0.0) -> list[str]:
        """What the shim wrote so far, waiting up to `wait` for anything new."""
        if self.fd >= 0 and select.select([self.fd], [], [], wait)[0]:
            while select.select([self.fd], [], [], 0)[0]:
                data = os.read(self.fd, 4096)
                if not data:
                    break
                self.words += data.decode("ascii", "replace").split()
        return self.words

    def said(self, kind: str) -> int | None:
        pairs = zip(self.words[::2], self.words[1::2], strict=False)
        return next((int(value) for key, value in pairs if key == kind), None)

    def agent_pid(self, wait: float) -> int | None:
        """The agent's pid inside the sandbox, once the shim has started it."""
        deadline = time.monotonic() + wait
        while self.said("started") is None and time.monotonic() < deadline:
            if not self.read(max(0.0, deadline - time.monotonic())):
                break
        return self.said("started")

    def exit_status(self) -> int | None:
        """The agent's own exit status, in Popen's convention (negative: the signal that
        ended it); None when the shim never said."""
        self.read()
        code, signum = self.said("exit"), self.said("signal")
        return code if code is not None else (-signum if signum is not None else None)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Started:
    """The agent's processes, started: what launch.py asks of every kind. This one is the
    plain kind's: `process` is the agent's own, and what detaches from it lands on the
    runner (a subreaper)."""

    def __init__(self, process: subprocess.Popen | None, agent_home: str):
        self.process = process
        # The environment entry every process of the run inherits (shell/procs.py).
        self.marker = ("PRIME_AGENT_CODING_AGENT_DIR", agent_home)
        # The runner's children among them, reaped through their Popen (procs.reap).
        self.owned = {process.pid: process} if process else {}

    def runs(self) -> bool:
        """Whether the agent's own process still runs."""
        return self.process.poll() is None

    def wait(self, seconds: float) -> None:
        """Wait up to `seconds` for the agent's own process to end."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=seconds)

    def tree(self) -> callers.RunProcesses:
        """The run's process tree as shell/callers.py judges it (not yet watched)."""
        return callers.RunProcesses((os.getpid(),), self.process.pid)

    def exit_code(self) -> int | None:
        """The agent's own exit status once it is ended (negative: the signal that ended it)."""
        return self.process.returncode

    def kill_now(self) -> None:
        """SIGKILL to every process of the run at once (a second Ctrl-C)."""
        procs.kill_now(procs.run_processes(self.process.pid, *self.marker))

    # --- what launch.end_run asks

    def members(self) -> set[int]:
        """Every live process of the run."""
        return procs.run_processes(self.process.pid, *self.marker)

    def shutdown_daemon(self, socket_path: str, answer: float) -> tuple[dict, int | None]:
        """The daemon shut down over its socket (contract §2): the record, and the daemon's
        supervisor pid as the runner sees it."""
        shutdown = daemon.shutdown_daemon(socket_path, answer)
        return shutdown, shutdown.get("supervisor_pid")

    def to_signal(self, remaining: set[int]) -> set[int]:
        """Which of the run's remaining processes this round of SIGTERM and SIGKILL ends."""
        return remaining

    def reap(self, settle: float) -> None:
        """Collect what exited under the runner, once the agent's own process is reaped."""
        if self.process.poll() is not None:
            procs.reap_children(settle)

    def record(self) -> dict:
        """What the kind adds to end_run's record."""
        return {}


class Sandboxed(Started):
    """In bubblewrap: `process` is bwrap, which lasts as long as anything the agent left (the
    shim waits for it all); the shim's `status` pipe says when and how the agent itself
    ended; `diag`, a sock_diag socket of the sandbox's network (or None). `inside` maps the
    pids here of the run's processes seen while ending it to theirs inside, which the
    daemon and the agent's logs use."""

    def __init__(self, process, agent_home: str, status: StatusPipe, diag: socket.socket | None):
        super().__init__(process, agent_home)
        self.status = status
        self.diag = diag
        self.inside: dict[int, int] = {}

    def runs(self) -> bool:
        return self.process.poll() is None and self.status.exit_status() is None

    def wait(self, seconds: float) -> None:
        self.status.read(seconds)

    def tree(self) -> callers.RunProcesses:
        """It hangs from the sandbox's init (pid 1 inside, bwrap's child, where what detaches
        lands) and the shim (pid 2), whose child is the agent."""
        agent = self.status.agent_pid(START_TIMEOUT_S)
        by_inside = {
            procs.namespace_pid(pid): pid for pid in procs.descendants_of([self.process.pid])
        }
        init, shim, initial = (by_inside.get(ns, -1) for ns in (1, 2, agent))
        return callers.RunProcesses((init, shim), initial, network_of=init, diag=self.diag)

    def exit_code(self) -> int | None:
        """The shim's word (bwrap says 128 + n for signal n); the status pipe is then closed."""
        told = self.status.exit_status()
        self.status.close()
        return self.process.returncode if told is None else told

    def members(self) -> set[int]:
        pids = super().members()
        for pid in pids:
            ns = procs.namespace_pid(pid)
            if ns is not None:
                self.inside.setdefault(pid, ns)
        return pids

    def shutdown_daemon(self, socket_path: str, answer: float) -> tuple[dict, int | None]:
        self.members()  # the supervisor's pid is its pid inside: see it before it ends
        shutdown, supervisor = super().shutdown_daemon(socket_path, answer)
        if supervisor:
            supervisor = next((pid for pid, ns in self.inside.items() if ns == supervisor), None)
            shutdown["supervisor_host_pid"] = supervisor
        return shutdown, supervisor

    def to_signal(self, remaining: set[int]) -> set[int]:
        """bwrap takes the whole sandbox down with it at once: it is ended only once nothing
        else is left, so that what runs inside gets its SIGTERM and grace first."""
        if remaining - {self.process.pid}:
            remaining.discard(self.process.pid)
        return remaining

    def record(self) -> dict:
        return {"sandbox_pids": {str(pid): ns for pid, ns in sorted(self.inside.items())}}


class Detached(Started):
    """A run none of whose processes is the caller's child (a verifiers rollout's: its ACP
    client started the agent), only ended: its processes are those carrying its marker, and
    nothing is reaped (the caller's other children are not the run's)."""

    def __init__(self, agent_home: str):
        super().__init__(None, agent_home)

    def members(self) -> set[int]:
        return procs.with_environment(*self.marker, procs.process_table())

    def reap(self, settle: float) -> None:
        pass


def _receive_listener(
    ours: socket.socket, process: subprocess.Popen
) -> tuple[socket.socket, socket.socket | None]:
    """The proxy's listening socket and the sock_diag socket the shim hands over."""
    deadline = time.monotonic() + START_TIMEOUT_S
    ours.settimeout(0.1)
    while time.monotonic() < deadline:
        try:
            _, fds, _, _ = socket.recv_fds(ours, 16, 2)
        except TimeoutError:
            if process.poll() is not None:
                break
            continue
        if fds:
            diag = socket.socket(fileno=fds[1]) if len(fds) > 1 else None
            if diag is not None:
                diag.settimeout(1.0)
            return socket.socket(fileno=fds[0]), diag
        break
    raise SandboxError(
        errno.ECHILD,
        f"the sandbox did not start (bwrap exit {process.poll()}; its stderr is in stderr.txt)",
    )
