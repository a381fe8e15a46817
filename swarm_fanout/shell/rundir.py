"""One run's dir: the captured real runs' layout (contract §3), the fresh git repo
the agent works in, the isolated agent home, and the agent's argv and environment.

A run dir is never reused or overwritten: `RunDir.create` makes a new one every
time, and the files the runner writes into it are written atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from datetime import datetime, timezone

from swarm_fanout.evidence.fixture import MANIFEST, TASK
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.shell import kernel_record
from swarm_fanout.shell.cli import print_note

# A Unix socket path holds at most 107 bytes (108 with its NUL; §2 says "about 107").
# Besides the daemon socket the runner names, the product binds one socket per session
# worker at $TMPDIR/prime-agent-<uid>/worker-<12 hex>-<12 hex>.sock (source
# `modes/daemon/daemon-supervisor.ts`). A longer path is cut short when bound and the
# worker never answers: the CLI fails after 30 s with no transcript (seen with v0.8.0,
# in a run set whose trials' TMPDIR was 56 bytes long).
MAX_SOCKET_PATH = 107
WORKER_SOCKET = "worker-" + "0" * 12 + "-" + "0" * 12 + ".sock"


def worker_socket_path(tmpdir: str) -> str:
    """The path of the product's worker sockets under this TMPDIR (their longest form)."""
    return os.path.join(tmpdir, f"prime-agent-{os.getuid()}", WORKER_SOCKET)


def fits_a_socket(path: str) -> bool:
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH


STRIPPED_ENV_PREFIXES = ("PRIME_AGENT_INTERNAL_", "RLM_", "GIT_")
STRIPPED_ENV = (
    "PRIME_AGENT_CODING_AGENT_DIR",
    "PRIME_AGENT_SESSION_DIR",
    "PRIME_AGENT_CODING_AGENT_SESSION_DIR",
    "PI_CODING_AGENT_DIR",
)


def users_kernel_python(environ: dict[str, str]) -> str | None:
    """The kernel Python the user's own prime-agent set up, when nothing names one.

    Without PRIME_AGENT_KERNEL_PYTHON (or PRIME_AGENT_KERNEL_VENV) the product looks for
    its kernel venv under HOME, `~/.prime/agent/kernel-venv`, else
    `$XDG_DATA_HOME/prime/agent/kernel-venv`, and builds one with uv when there is none
    (source `core/kernel/bootstrap.ts`). A run's HOME is its own and empty, so every run
    would download Python and its packages (minutes, and impossible offline); the user's
    venv is used instead, as the user's own prime-agent would use it.
    """
    if environ.get("PRIME_AGENT_KERNEL_PYTHON") or environ.get("PRIME_AGENT_KERNEL_VENV"):
        return None
    home = environ.get("HOME") or os.path.expanduser("~")
    data = environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    for venv in (
        os.path.join(home, ".prime", "agent", "kernel-venv"),
        os.path.join(data, "prime", "agent", "kernel-venv"),
    ):
        python = os.path.join(venv, "bin", "python")
        if os.path.isfile(python) and os.access(python, os.X_OK):
            return python
    return None


# The bundled stand-in, named to a user whose prime-agent is not on PATH.
STAND_IN = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "simulated", "agent.py"
)


def find_agent(agent_bin: str) -> tuple[str | None, tuple[str, str] | None]:
    """The agent's absolute path, or (None, (reason code, sentence)) saying why there is none."""
    found = shutil.which(agent_bin)
    if found is not None:
        # The agent starts in the run's repo, so a relative path must not stay relative.
        return os.path.abspath(found), None
    if os.sep not in agent_bin:
        stand_in = os.path.relpath(STAND_IN)
        stand_in = STAND_IN if stand_in.startswith("..") else os.path.join(".", stand_in)
        return None, (
            "agent_not_found",
            f"{agent_bin!r} is not on PATH; to try the harness without it, use --agent-bin "
            f"{stand_in} --model simulated/oracle (the bundled stand-in)",
        )
    if not os.path.exists(agent_bin):
        return None, ("agent_not_found", f"{agent_bin!r} does not exist")
    if os.path.isdir(agent_bin):
        return None, ("agent_not_executable", f"{agent_bin!r} is a directory, not an executable")
    return None, ("agent_not_executable", f"{agent_bin!r} is not executable (chmod +x it)")


# What of a fixture dir stays out of a run's repo, at any depth: the answers, the prompt
# (it reaches the agent as its task) and any git dir.
NOT_IN_REPO = (MANIFEST, TASK, ".git")
# The repo's commit: its author, and no config of this host's.
REPO_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "swarm-fanout",
    "GIT_AUTHOR_EMAIL": "swarm-fanout@invalid",
    "GIT_COMMITTER_NAME": "swarm-fanout",
    "GIT_COMMITTER_EMAIL": "swarm-fanout@invalid",
}


def repo_commands(fixture_name: str) -> list[list[str]]:
    """The git commands, run in the repo with REPO_GIT_ENV, that make it a fresh repo with
    the fixture's files as its one commit (a verifiers task runs them in its runtime)."""
    return [
        ["git", "-c", "init.defaultBranch=main", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "commit.gpgsign=false", "commit", "-q", "-m", f"fixture {fixture_name}"],
    ]


def repo_files(fixture_root: str) -> list[str]:
    """The fixture's files a run's repo gets, relative and sorted: all but NOT_IN_REPO."""
    found = []
    for dirpath, dirnames, filenames in os.walk(fixture_root):
        dirnames[:] = sorted(name for name in dirnames if name not in NOT_IN_REPO)
        for filename in sorted(filenames):
            if filename not in NOT_IN_REPO:
                found.append(os.path.relpath(os.path.join(dirpath, filename), fixture_root))
    return found


class RunDir:
    """One run's dir, laid out by `RunPaths` (`run.paths.repo`), and what the runner does to
    it before the agent starts; TMPDIR and the daemon socket are its own, which
    `fit_sockets` may move."""

    def __init__(self, root: str):
        self.paths = RunPaths.of(root)
        self.root = self.paths.root
        # TMPDIR and the daemon socket: the layout's, unless `fit_sockets` moves them.
        self.tmp = self.paths.tmp
        self.socket = self.paths.socket
        self.short_tmp: str | None = None

    @classmethod
    def at(cls, root: str) -> RunDir:
        """The given dir, which must not exist yet: a trial of a run set."""
        os.mkdir(root)
        return cls(os.path.realpath(root))

    @classmethod
    def create(cls, out: str, fixture_name: str) -> RunDir:
        """A new dir every time: a run dir is never reused or overwritten."""
        os.makedirs(out, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        while True:
            root = os.path.join(
                os.path.realpath(out), f"{fixture_name}-{stamp}-{secrets.token_hex(3)}"
            )
            try:
                os.mkdir(root)
                return cls(root)
            except FileExistsError:
                continue

    def prepare(self, fixture, agent_config: str) -> None:
        shutil.copytree(fixture.root, self.paths.repo, ignore=shutil.ignore_patterns(*NOT_IN_REPO))
        for path in (self.paths.sessions, self.paths.agent_home, self.paths.home, self.paths.tmp):
            os.makedirs(path, exist_ok=True)
        self._commit_repo(fixture.name)
        self._copy_agent_config(agent_config)
        self.install_record()
        self.fit_sockets()

    def install_record(self) -> None:
        """Every IPython kernel the agent starts records what it does (shell/kernel_record.py):
        the hook in the run's HOME, and a startup file IPython runs in each kernel, in the
        profile under HOME that the product's kernels use (contract §11 "The kernel's
        session"), that runs it in a namespace of its own."""
        ipython = os.path.join(self.paths.home, ".ipython")
        hook = os.path.join(ipython, "kernel_record.py")
        startup = os.path.join(ipython, "profile_default", "startup")
        os.makedirs(startup, exist_ok=True)
        os.makedirs(self.paths.kernel_record, exist_ok=True)
        shutil.copyfile(kernel_record.__file__, hook)
        with open(os.path.join(startup, kernel_record.STARTUP), "w", encoding="utf-8") as handle:
            handle.write(kernel_record.startup_file(hook, self.paths.kernel_record))

    def fit_sockets(self) -> None:
        """Move TMPDIR or the daemon socket to a short dir under /tmp when the product's
        sockets would not fit under the run dir (removed again by `cleanup_tmp`)."""
        tmp_fits = fits_a_socket(worker_socket_path(self.tmp))
        if not tmp_fits or not fits_a_socket(self.socket):
            self.short_tmp = tempfile.mkdtemp(prefix="sf-", dir="/tmp")
        if not tmp_fits:
            self.tmp = self.short_tmp
        if not fits_a_socket(self.socket):
            self.socket = os.path.join(self.short_tmp, os.path.basename(self.paths.socket))

    def sandbox_writable(self) -> list[str]:
        """Ready the run for a sandbox (shell/sandbox.py), where only the returned dirs are
        writable: the repo, the sessions and the product's session-artifacts beside them
        (made now: the run dir itself is not writable inside, §3), the agent home, HOME and
        TMPDIR. The daemon socket moves into TMPDIR, the one of them the product binds
        sockets in anyway (§2)."""
        os.makedirs(self.paths.session_artifacts, exist_ok=True)
        self.socket = os.path.join(self.tmp, os.path.basename(self.paths.socket))
        return [
            self.paths.repo,
            self.paths.sessions,
            self.paths.session_artifacts,
            self.paths.agent_home,
            self.paths.home,
            self.tmp,
        ]

    def _commit_repo(self, fixture_name: str) -> None:
        env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
        env.update(HOME=self.paths.home, **REPO_GIT_ENV)
        for command in repo_commands(fixture_name):
            subprocess.run(
                command,
                cwd=self.paths.repo,
                env=env,
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=60,
            )

    def _copy_agent_config(self, source: str) -> None:
        """The user's credentials and model catalog, nothing else of their agent dir."""
        for name in ("auth.json", "models.json"):
            path = os.path.join(source, name)
            if os.path.isfile(path):
                shutil.copyfile(path, os.path.join(self.paths.agent_home, name))
        auth = os.path.join(self.paths.agent_home, "auth.json")
        if not os.path.exists(auth):
            with open(auth, "w", encoding="utf-8") as handle:
                handle.write("{}\n")
        os.chmod(auth, 0o600)

    def agent_env(self) -> dict[str, str]:
        """The user's environment minus anything that would steer the product elsewhere.

        `PRIME_AGENT_SESSION_DIR` keys the ledger on this run's own sessions dir
        (§1 fact 1); own HOME and TMPDIR keep the daemon registry, kernels and
        sockets of other runs apart (§1 fact 7).
        """
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(STRIPPED_ENV_PREFIXES) and key not in STRIPPED_ENV
        }
        env.update(
            HOME=self.paths.home,
            TMPDIR=self.tmp,
            PRIME_AGENT_CODING_AGENT_DIR=self.paths.agent_home,
            PRIME_AGENT_SESSION_DIR=self.paths.sessions,
            # No update check at start: the same agent build for every trial.
            PI_SKIP_VERSION_CHECK="1",
        )
        # No usage metrics from eval runs, unless the user's env asks for them. Not
        # PI_OFFLINE, which would also drop private Prime Inference models (source
        # `core/model-registry.ts`); scripted runs set it (runner.py, contract §11).
        env.setdefault("PRIME_AGENT_TELEMETRY", "0")
        kernel = users_kernel_python(dict(os.environ))
        if kernel:
            env["PRIME_AGENT_KERNEL_PYTHON"] = kernel
        return env

    def argv(self, agent_bin: str, model: str, task: str) -> list[str]:
        # Options first, then `--`, then the prompt as one argument (§2 "argv").
        return [
            agent_bin,
            "--mode",
            "json",
            "--daemon-socket",
            self.socket,
            "--cwd",
            self.paths.repo,
            "--session-dir",
            self.paths.sessions,
            "--model",
            model,
            "--",
            task,
        ]

    def acp_argv(self, agent_bin: str, model: str) -> list[str]:
        """The one-shot argv in `--mode acp` and without its `-- <task>`: the task comes as
        `session/prompt` on stdin (§13)."""
        options = self.argv(agent_bin, model, "")[:-2]
        options[options.index("--mode") + 1] = "acp"
        return options

    def daemon_argv(self, agent_bin: str) -> list[str]:
        """Own the supervisor: start it ourselves on the run's socket (§8.2, last line)."""
        return [agent_bin, "--mode", "daemon", "--daemon-socket", self.socket]

    def write_meta(self, meta: dict) -> None:
        write_atomic(self.paths.run_meta, json.dumps(meta, indent=2) + "\n")

    def cleanup_tmp(self) -> None:
        if self.short_tmp:
            shutil.rmtree(self.short_tmp, ignore_errors=True)


def write_atomic(path: str, text: str) -> None:
    """Write `path` whole or not at all: a reader never sees part of it, and when the
    write fails (a full disk, a dir gone) a file already there is left as it was and
    no temporary file is left beside it. The error is raised."""
    fd, temporary = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}-", dir=os.path.dirname(path)
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def store_record(record: dict, path: str | None, error_key: str) -> tuple[str, str | None]:
    """Write `record` as JSON to `path` (None: nowhere); returns the text to print and
    where it is stored. A failed write is noted on stderr and in `record[error_key]`,
    and the record is printed all the same, with its exit code."""
    text = json.dumps(record, indent=2)
    if path is None:
        return text, None
    try:
        write_atomic(path, text + "\n")
    except OSError as error:
        print_note(f"runner.py: could not write {path}: {error}")
        record[error_key] = f"{type(error).__name__}: {error}"
        return json.dumps(record, indent=2), None
    return text, path


def utc_now() -> str:
    """Now, as result.json and run-set.json record times: ISO-8601 UTC to the millisecond."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
