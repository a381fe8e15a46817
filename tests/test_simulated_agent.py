"""simulated/agent.py, run exactly as the runner launches prime-agent, on a small fixture.

Format fidelity is pinned to the captured real run tests/data/real-runs/main: every record type
the stand-in writes must exist there, with the same keys in the same order at every level.
Answers are recomputed here by an evaluator of the test's own.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from dataclasses import dataclass
from pathlib import Path

from scripted.model import ScriptedModelServer
from shell import rundir
from shell.proxy import RecordingProxy

REPO = Path(__file__).resolve().parents[1]
AGENT = REPO / "simulated" / "agent.py"
REAL_RUNS = REPO / "tests" / "data" / "real-runs"
MAIN_CAPTURE = REAL_RUNS / "main"
ENDTURN_CAPTURE = REAL_RUNS / "endturn-oneshot"
CHILD_FAIL_CAPTURE = REAL_RUNS / "child-fail"
RESIDENT_WIRE = REAL_RUNS / "resident" / "daemon-wire.jsonl"
NEEDS_PROC = unittest.skipUnless(Path("/proc/self/stat").exists(), "needs Linux /proc")
DEADLINE_S = 10
PROTOCOL = {"name": "prime-agent.daemon", "version": 7}
SHUTDOWN_DONE = {"id": "t-stop", "type": "response", "command": "shutdown", "success": True}
ONESHOT, RESIDENT = "oneshot", "resident"

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
ENTRY_ID = re.compile(r"^[0-9a-f]{8}$")
CHILD_ID = re.compile(r"^sub-[0-9a-f]{8}$")
RESPONSE_ID = re.compile(r"^chatcmpl-[0-9a-f]{32}$")
TOOL_CALL_ID = re.compile(r"^call_[0-9a-f]{24}$")
REPLY_ID = re.compile(
    r"^agentmsg_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
)
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

KINDS = ("click", "view", "buy")
REGIONS = ("eu", "us", "ap")
# One task line per question form of the grammar, plus one question outside it.
TASKS = [
    ("events-01.jsonl", "How many records does this shard contain?"),
    ("events-02.jsonl", 'How many records have `kind` equal to "click"?'),
    ("events-03.jsonl", "What is the sum of `bytes` over all records?"),
    ("metrics-01.csv", "What is the maximum value of `latency_ms` over all records?"),
    ("metrics-02.csv", "How many distinct values of `region` occur?"),
    ("events-04.jsonl", 'What is the sum of `bytes` over records whose `kind` is "click"?'),
    (
        "metrics-03.csv",
        'What is the maximum value of `latency_ms` over records whose `region` is "eu"?',
    ),
    (
        "events-05.jsonl",
        'How many distinct values of `user` occur among records whose `kind` is "click"?',
    ),
    ("events-06.jsonl", "What is the median of `bytes`?"),
]


def worker(file: str) -> str:
    return "worker-" + file.split(".")[0]


def write_shards(shards: Path) -> None:
    shards.mkdir(parents=True)
    for number, (file, _) in enumerate(TASKS, start=1):
        path = shards / file
        if file.endswith(".csv"):
            rows = [
                {"host": f"h{j}", "region": REGIONS[(j + number) % 3], "latency_ms": 20 + 7 * j}
                for j in range(3 + number)
            ]
            with path.open("w", newline="") as out:
                writer = csv.DictWriter(out, ["host", "region", "latency_ms"])
                writer.writeheader()
                writer.writerows(rows)
        else:
            records = [
                {"kind": KINDS[j * number % 3], "user": f"u{(j + number) % 4}", "bytes": 10 * j}
                for j in range(2 + number)
            ]
            path.write_text("".join(json.dumps(r) + "\n" for r in records))


def task_prompt(tasks=TASKS) -> str:
    lines = [
        f"- `shards/{file}` | worker `{worker(file)}` | {question}" for file, question in tasks
    ]
    return "Spawn one RLM child per shard below, then write combined-index.md.\n\n" + "\n".join(
        lines
    )


def expected_answer(path: Path, question: str) -> str:
    """The test's own evaluator of the question grammar."""
    if path.suffix == ".csv":
        with path.open(newline="") as rows:
            records = list(csv.DictReader(rows))
    else:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    where = re.search(r' (?:over|among) records whose `(\w+)` is "([^"]*)"\?$', question)
    if where:
        records = [r for r in records if str(r[where[1]]) == where[2]]
        question = question[: where.start()] + "?"
    field = re.search(r"`(\w+)`", question)
    if question == "How many records does this shard contain?":
        return str(len(records))
    if equal := re.fullmatch(r'How many records have `(\w+)` equal to "([^"]*)"\?', question):
        return str(len([r for r in records if str(r[equal[1]]) == equal[2]]))
    if question.startswith("What is the sum of"):
        return str(sum(int(r[field[1]]) for r in records))
    if question.startswith("What is the maximum value of"):
        return str(max(int(r[field[1]]) for r in records))
    if question.startswith("How many distinct values of"):
        return str(len({str(r[field[1]]) for r in records}))
    return "unknown"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def compact(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def ignores_sigterm(pid: int) -> bool:
    ignored = re.search(r"^SigIgn:\s*([0-9a-f]+)$", Path(f"/proc/{pid}/status").read_text(), re.M)
    return bool(int(ignored[1], 16) & 1 << (signal.SIGTERM - 1))


def group_members(pgid: int) -> list[int]:
    members = []
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(status.parent.name))
    return members


def wait_for(predicate, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return result


def kill_and_wait(pid: int) -> None:
    if not process_gone(pid):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), f"pid {pid} to end")


def command(body: dict, command_id: str = "t-1") -> dict:
    envelope = {"type": "command", "id": command_id, "protocol": PROTOCOL}
    return {**envelope, "clientId": "test-client", "command": body}


class DaemonClient:
    """A connection to the run's own socket: the hello, then commands in the v7 envelope.

    Lines are split on \\n only (contract §8.1). session_event envelopes and other pushed
    messages that arrive while a response is awaited are kept, in order.
    """

    def __init__(self, path: Path):
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.settimeout(DEADLINE_S)
        try:
            self._socket.connect(str(path))
        except OSError:
            self._socket.close()
            raise
        self._file = self._socket.makefile("rwb")  # binary readline splits on b"\n" only
        self._ids = itertools.count(1)
        self.envelopes: list[dict] = []
        self.pushed: list[dict] = []
        self.hello = self._read()

    @property
    def events(self) -> list[dict]:
        return [envelope["event"] for envelope in self.envelopes]

    def send(self, message: dict | str) -> dict:
        """Sends one line and returns its response (a parse error has no id)."""
        self.post(message)
        return self.response_to(message.get("id") if isinstance(message, dict) else None)

    def post(self, message: dict | str) -> None:
        """Sends one line without waiting for its response."""
        line = message if isinstance(message, str) else json.dumps(message)
        self._file.write(line.encode() + b"\n")
        self._file.flush()

    def request(self, body: dict) -> dict:
        """Sends a command under a fresh id and returns its response."""
        return self.send(command(body, f"t-{next(self._ids)}"))

    def call(self, body: dict) -> dict | None:
        """A command that must succeed; returns its data."""
        response = self.request(body)
        if response.get("success") is not True:
            raise AssertionError(f"{body['type']} failed: {response}")
        return response.get("data")

    def response_to(self, command_id) -> dict:
        while True:
            message = self._read()
            if message.get("type") == "response" and (
                message.get("id") == command_id or message.get("command") == "parse"
            ):
                return message
            if message.get("type") == "session_event":
                self.envelopes.append(message)
            else:
                self.pushed.append(message)

    def _read(self) -> dict:
        line = self._file.readline()
        if not line:
            raise AssertionError("the daemon closed the connection")
        return json.loads(line)

    def close(self) -> None:
        self._file.close()
        self._socket.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *_) -> None:
        self.close()


def connect_when_listening(path: Path) -> DaemonClient | None:
    try:
        return DaemonClient(path)
    except (FileNotFoundError, ConnectionRefusedError):
        return None


@dataclass
class Run:
    dir: Path
    prompt: str
    env: dict[str, str]
    process: subprocess.Popen | None = None

    @property
    def repo(self) -> Path:
        return self.dir / "repo"

    @property
    def socket(self) -> Path:
        return self.dir / "daemon.sock"

    def stderr(self) -> str:
        return (self.dir / "stderr.txt").read_text()

    def logged_pid(self, what: str) -> int | None:
        found = re.search(rf"^simulated-agent: {what} pid=(\d+)$", self.stderr(), re.M)
        return int(found[1]) if found else None

    def stdout(self) -> list[dict]:
        return read_jsonl(self.dir / "stdout.jsonl")

    def parent_file(self) -> Path:
        (path,) = (self.dir / "sessions").glob("*.jsonl")
        return path

    def parent(self) -> list[dict]:
        return read_jsonl(self.parent_file())

    def child_files(self) -> list[Path]:
        root_id = self.parent()[0]["id"]
        return sorted((self.dir / "session-artifacts" / root_id).glob("sub-*/*.jsonl"))

    def ledger_files(self) -> list[Path]:
        return sorted((self.dir / "agent-home" / "rlm-ledger").glob("*.jsonl"))

    def ledger(self) -> list[dict]:
        (path,) = self.ledger_files()
        return read_jsonl(path)

    def index(self) -> str:
        return (self.repo / "combined-index.md").read_text()

    def create_command(self, behaviour: str, launch_env: dict | None = None) -> dict:
        config = {
            "cwd": str(self.repo),
            "agentDir": str(self.dir / "agent-home"),
            "sessionDir": str(self.dir / "sessions"),
            "model": f"simulated/{behaviour}",
        }
        env = self.env if launch_env is None else launch_env
        return {"type": "create", "lifecycle": "resident", "config": config, "launchEnv": env}


def attach_command(active_id: str, client: DaemonClient) -> dict:
    return {
        "type": "attach",
        "activeSessionId": active_id,
        "clientId": client.hello["clientId"],
        "capabilities": ["event_sequence"],
    }


def wait_command(active_id: str) -> dict:
    return {
        "type": "wait_for_headless_completion",
        "activeSessionId": active_id,
        "waitForRlmQuiescence": True,
    }


def messages(entries: list[dict], role: str) -> list[dict]:
    return [
        e["message"] for e in entries if e["type"] == "message" and e["message"]["role"] == role
    ]


def replies(entries: list[dict]) -> list[dict]:
    return [
        e
        for e in entries
        if e["type"] == "custom_message" and e["details"].get("fromRelationship") == "child"
    ]


def ipython_codes(entries: list[dict]) -> list[str]:
    return [
        part["arguments"]["code"]
        for message in messages(entries, "assistant")
        for part in message["content"]
        if part["type"] == "toolCall"
    ]


def session_name(child_file: Path) -> str:
    return next(e["name"] for e in read_jsonl(child_file) if e["type"] == "session_info")


def correct_index(repo: Path, tasks=TASKS) -> str:
    bullets = [f"- {f}: {expected_answer(repo / 'shards' / f, q)}\n" for f, q in tasks]
    return "# Combined index\n\n" + "".join(bullets)


# --- record shapes, compared with the capture ---------------------------------------------


def key_orders(record, path=()):
    """Every dict in a record as (path, keys in order); list items are labelled by type/role."""
    if isinstance(record, dict):
        yield path, tuple(record)
        for key, value in record.items():
            yield from key_orders(value, (*path, key))
    elif isinstance(record, list):
        for item in record:
            label = (item.get("type") or item.get("role")) if isinstance(item, dict) else ""
            yield from key_orders(item, (*path, f"[{label}]"))


def transcript_kind(entry: dict) -> tuple:
    if entry["type"] == "session":
        return ("session", "child" if "parentSession" in entry else "root")
    if entry["type"] == "message":
        return ("message", entry["message"]["role"])
    if entry["type"] == "custom_message":
        return (entry["type"], entry["customType"], entry["details"].get("fromRelationship"))
    return (entry["type"],)


def event_kind(event: dict) -> tuple:
    if event["type"] == "rlm_child_update":
        return (event["type"], event["child"]["status"])
    if isinstance(event.get("message"), dict):
        return (event["type"], event["message"]["role"])
    return (event["type"],)


def shapes(records: list[dict], kind) -> dict[tuple, set]:
    found: dict[tuple, set] = {}
    for record in records:
        found.setdefault(kind(record), set()).update(key_orders(record))
    return found


def run_records(run_dir: Path) -> dict[str, list[dict]]:
    """A run's records by file family (a capture or a simulated run: the same layout)."""
    artifacts = run_dir / "session-artifacts"
    ledgers = sorted((run_dir / "agent-home" / "rlm-ledger").glob("*.jsonl"))
    return {
        "transcript": [
            entry
            for path in [*run_dir.glob("sessions/*.jsonl"), *artifacts.glob("*/sub-*/*.jsonl")]
            for entry in read_jsonl(path)
        ],
        "display": [json.loads(p.read_text()) for p in artifacts.glob("*/sub-*/rlm-subagent.json")],
        "ledger": [record for path in ledgers for record in read_jsonl(path)],
        "stdout": read_jsonl(run_dir / "stdout.jsonl"),
    }


RECORD_KINDS = {
    "transcript": transcript_kind,
    "display": lambda record: (record["type"],),
    "ledger": lambda record: ("ledger", record["op"]),
    "stdout": event_kind,
}


class SimulatedAgentCase(unittest.TestCase):
    """Runs the stand-in as the runner drives prime-agent, in its own process group with the
    runner's env and layout: one-shot (`--mode json`) or resident (`--mode daemon`, then
    create, attach, prompt, wait_for_headless_completion, shutdown on a second connection).
    """

    drive = ONESHOT

    def make_run(self, prompt: str | None = None, session_dir_env: bool = True) -> Run:
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        run_dir = Path(temp.name)
        for name in ("sessions", "agent-home", "home", "tmp"):
            (run_dir / name).mkdir()
        tmp = str(run_dir / "tmp")
        if not rundir.fits_a_socket(rundir.worker_socket_path(tmp)):
            # A long system TMPDIR: the product's worker sockets need a shorter one.
            tmp = tempfile.mkdtemp(prefix="sf-", dir="/tmp")
            self.addCleanup(shutil.rmtree, tmp, True)
        write_shards(run_dir / "repo" / "shards")
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "PRIME_AGENT_CODING_AGENT_DIR": str(run_dir / "agent-home"),
            "HOME": str(run_dir / "home"),
            "TMPDIR": tmp,
        }
        if session_dir_env:
            env["PRIME_AGENT_SESSION_DIR"] = str(run_dir / "sessions")
        return Run(run_dir, task_prompt() if prompt is None else prompt, env)

    def launch(
        self,
        behaviour: str = "oracle",
        prompt: str | None = None,
        wait: bool = True,
        session_dir_env: bool = True,
        cwd: str | None = None,
        drive: str | None = None,
    ) -> Run:
        run = self.make_run(prompt, session_dir_env)
        if (drive or self.drive) == RESIDENT:
            return self.drive_resident(run, behaviour, wait)
        argv = [
            *(sys.executable, str(AGENT), "--mode", "json"),
            *("--daemon-socket", str(run.socket)),
            *("--cwd", cwd or str(run.repo)),
            *("--session-dir", str(run.dir / "sessions")),
            *("--model", f"simulated/{behaviour}", "--", run.prompt),
        ]
        self.start(run, argv)
        self.addCleanup(self.shut_down_supervisor, run)
        if wait:
            run.process.wait(timeout=DEADLINE_S)
        return run

    def start(self, run: Run, argv: list[str], env: dict | None = None) -> None:
        with (
            (run.dir / "stdout.jsonl").open("wb") as stdout,
            (run.dir / "stderr.txt").open("wb") as stderr,
        ):
            run.process = subprocess.Popen(
                argv,
                cwd=run.repo,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=run.env if env is None else env,
                start_new_session=True,
            )
        self.addCleanup(self.reap, run)

    def start_daemon(self, run: Run, env: dict | None = None) -> DaemonClient:
        """`--mode daemon` in the foreground; returns a connection once it answers."""
        argv = [sys.executable, str(AGENT), "--mode", "daemon", "--daemon-socket", str(run.socket)]
        self.start(run, argv, env)
        self.addCleanup(self.shut_down_daemon, run)
        client = wait_for(lambda: connect_when_listening(run.socket), "the daemon's hello")
        self.addCleanup(client.close)
        return client

    def drive_resident(self, run: Run, behaviour: str, wait: bool = True) -> Run:
        """The resident drive; once quiescent, stdout.jsonl is written as the runner writes
        it (line 1 = the first line of sessionFile, then the events) and the daemon is shut
        down."""
        client = self.start_daemon(run)
        session = client.call(run.create_command(behaviour))
        active_id = session["activeSessionId"]
        client.call(attach_command(active_id, client))
        client.call({"type": "prompt", "activeSessionId": active_id, "message": run.prompt})
        if wait:
            client.call(wait_command(active_id))
            header = Path(session["sessionFile"]).read_text().split("\n", 1)[0]
            lines = [header, *(compact(event) for event in client.events)]
            (run.dir / "stdout.jsonl").write_text("".join(line + "\n" for line in lines))
            self.shut_down_daemon(run)
        return run

    def reap(self, run: Run) -> None:
        """Leaves the process group of the CLI or daemon empty."""
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait(timeout=DEADLINE_S)
        if Path("/proc").is_dir():
            self.assertEqual(group_members(run.process.pid), [])

    def shut_down_supervisor(self, run: Run) -> None:
        """The product's stop sequence (contract §2): hello, shutdown{force:true}, pid gone."""
        if not run.socket.exists():
            return
        with DaemonClient(run.socket) as daemon:
            response = daemon.send(command({"type": "shutdown", "force": True}, "t-stop"))
        self.assertEqual(response, SHUTDOWN_DONE)
        pid = daemon.hello["supervisorPid"]
        wait_for(lambda: process_gone(pid), f"supervisor {pid} to exit")
        self.assertFalse(run.socket.exists())

    def shut_down_daemon(self, run: Run) -> None:
        """shutdown{force:true} on a new connection: the daemon exits 0, its socket gone."""
        if run.process.poll() is not None:
            return
        with DaemonClient(run.socket) as daemon:
            response = daemon.send(command({"type": "shutdown", "force": True}, "t-stop"))
        self.assertEqual(response, SHUTDOWN_DONE)
        self.assertEqual(run.process.wait(timeout=DEADLINE_S), 0)
        self.assertTrue(process_gone(daemon.hello["supervisorPid"]))
        self.assertFalse(run.socket.exists())

    def assert_captured_shapes(self, run, capture) -> dict:
        """Every record kind the stand-in wrote exists in the capture with no other keys."""
        ours, captured = run_records(run.dir), run_records(capture)
        for family, kind in RECORD_KINDS.items():
            our_shapes, captured_shapes = shapes(ours[family], kind), shapes(captured[family], kind)
            for record_kind, found in our_shapes.items():
                with self.subTest(family=family, kind=record_kind):
                    self.assertIn(record_kind, captured_shapes)
                    self.assertEqual(found - captured_shapes[record_kind], set())
        return ours


class CommandLineTest(SimulatedAgentCase):
    def run_cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(AGENT), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )

    def test_version_prints_one_line_and_exits_0(self):
        done = self.run_cli("--version")
        self.assertEqual((done.returncode, done.stdout), (0, "prime-agent 0.8.0 (simulated)\n"))

    def test_help_documents_both_modes_and_every_behaviour(self):
        done = self.run_cli("--help")
        self.assertEqual(done.returncode, 0)
        for text in ("--mode json", "--mode daemon", "wait_for_headless_completion"):
            self.assertIn(text, done.stdout)
        behaviours = re.findall(r"^    ([a-z-]+)  +\S", done.stdout, re.M)
        self.assertEqual(
            behaviours,
            [
                *("oracle", "nop", "no-spawn", "double-spawn", "fabricate", "silent-drop"),
                *("hang", "escape", "hold-files", "end-turn-early", "flaky"),
                *("forge-ledger", "junk-replies", "zero-work-children", "forge-consistent"),
                "no-kernel",
                *("answer-in-task", "literal-send", "early-index", "sibling-forward"),
                *("count-and-send", "peek-first", "breakout"),
            ],
        )

    def test_file_is_an_executable_python3_script(self):
        self.assertTrue(AGENT.read_text().startswith("#!/usr/bin/env python3\n"))
        self.assertTrue(os.access(AGENT, os.X_OK))

    def test_unknown_behaviour_exits_1_before_starting_a_supervisor(self):
        run = self.launch("telepathy")
        self.assertEqual(run.process.returncode, 1)
        self.assertIn("simulated/telepathy", run.stderr())
        self.assertFalse(run.socket.exists())

    def test_unknown_provider_exits_1(self):
        done = self.run_cli("--mode", "json", "--model", "fake/oracle", "--", "task")
        self.assertEqual(done.returncode, 1)
        self.assertIn('unknown model "fake/oracle"', done.stderr)

    def test_only_one_prompt_is_accepted(self):
        done = self.run_cli("--mode", "json", "--model", "simulated/nop", "--", "one", "two")
        self.assertEqual(done.returncode, 1)
        self.assertIn("exactly one prompt", done.stderr)

    def test_an_unknown_flag_eats_the_next_argument(self):
        # "stray" is the extension flag's value, not a second prompt: the run gets as far as
        # checking --cwd (contract §2).
        args = ("--ext", "stray", "--mode", "json", "--model", "simulated/nop")
        done = self.run_cli(*args, "--cwd", "/nonexistent/repo", "--", "task")
        self.assertEqual(done.returncode, 1)
        self.assertIn("--cwd /nonexistent/repo is not a directory", done.stderr)

    def test_missing_cwd_exits_1(self):
        run = self.launch(cwd="/nonexistent/repo")
        self.assertEqual(run.process.returncode, 1)
        self.assertIn("--cwd", run.stderr())
        self.assertFalse(run.socket.exists())


class SupervisorTest(SimulatedAgentCase):
    @NEEDS_PROC
    def test_supervisor_is_detached_and_keeps_the_cli_env(self):
        run = self.launch("nop")
        pid = run.logged_pid("supervisor")
        with DaemonClient(run.socket) as daemon:
            self.assertEqual(daemon.hello["supervisorPid"], pid)
        self.assertNotEqual(os.getsid(pid), run.process.pid)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        self.assertIn(f"PRIME_AGENT_CODING_AGENT_DIR={run.dir / 'agent-home'}".encode(), environ)
        self.assertEqual(stat.S_IMODE(run.socket.stat().st_mode), 0o600)

    def test_hello_has_the_captured_keys_in_order(self):
        run = self.launch("nop")
        with DaemonClient(run.socket) as daemon:
            hello = daemon.hello
        captured = json.loads((MAIN_CAPTURE / "daemon-hello.json").read_text())
        self.assertEqual(list(key_orders(hello)), list(key_orders(captured)))
        self.assertEqual(hello["serverCapabilities"], captured["serverCapabilities"])
        self.assertEqual(hello["socketPath"], str(run.socket))

    def test_commands_need_the_protocol_7_envelope(self):
        run = self.launch("nop")
        parse_error = {
            "type": "response",
            "command": "parse",
            "success": False,
            "error": "Daemon commands require protocol 7 or newer",
        }
        old = {
            **command({"type": "shutdown", "force": True}),
            "protocol": {**PROTOCOL, "version": 4},
        }
        with DaemonClient(run.socket) as daemon:
            self.assertEqual(daemon.send({"type": "shutdown", "force": True}), parse_error)
            self.assertEqual(daemon.send(old), parse_error)
            self.assertEqual(daemon.send("not json"), parse_error)

    def test_other_commands_are_unsupported(self):
        run = self.launch("nop")
        with DaemonClient(run.socket) as daemon:
            response = daemon.send(command({"type": "get_rlm_children"}, "t-2"))
        self.assertEqual(
            response,
            {
                "id": "t-2",
                "type": "response",
                "command": "get_rlm_children",
                "success": False,
                "error": "unsupported in simulation",
            },
        )

    def test_a_tmpdir_too_long_for_the_worker_socket_fails_as_the_product_does(self):
        # The product binds $TMPDIR/prime-agent-<uid>/worker-<12 hex>-<12 hex>.sock; over
        # 107 bytes the worker never answers and the CLI exits 1 with no transcript.
        run = self.make_run()
        long_tmp = run.dir / ("t" * 60)
        long_tmp.mkdir()
        argv = [
            *(sys.executable, str(AGENT), "--mode", "json"),
            *("--daemon-socket", str(run.socket), "--cwd", str(run.repo)),
            *("--model", "simulated/oracle", "--", run.prompt),
        ]
        self.start(run, argv, {**run.env, "TMPDIR": str(long_tmp)})
        self.addCleanup(self.shut_down_supervisor, run)
        self.assertEqual(run.process.wait(timeout=DEADLINE_S), 1)
        self.assertIn("Timed out connecting to daemon session worker", run.stderr())
        self.assertIn(f"{long_tmp}/prime-agent-{os.getuid()}/worker-", run.stderr())
        self.assertEqual(list((run.dir / "sessions").iterdir()), [])
        self.assertEqual(list((run.dir / "agent-home").iterdir()), [])

    def test_shutdown_without_force_leaves_the_supervisor_running(self):
        run = self.launch("nop")
        with DaemonClient(run.socket) as daemon:
            self.assertTrue(daemon.send(command({"type": "shutdown"}))["success"])
        with DaemonClient(run.socket) as daemon:
            self.assertEqual(daemon.hello["supervisorPid"], run.logged_pid("supervisor"))


class OracleTest(SimulatedAgentCase):
    def test_records_have_the_captured_shapes(self):
        run = self.launch()
        ours = self.assert_captured_shapes(run, MAIN_CAPTURE)
        transcript_kinds = set(shapes(ours["transcript"], transcript_kind))
        self.assertLessEqual(
            {
                ("session", "root"),
                ("session", "child"),
                ("model_change",),
                ("session_info",),
                ("message", "assistant"),
                ("message", "toolResult"),
                ("custom_message", "agent_message", "child"),
                ("custom_message", "agent_message", "parent"),
                ("child_usage_attributed",),
            },
            transcript_kinds,
        )
        stdout_kinds = set(shapes(ours["stdout"], event_kind))
        for status in ("queued", "running", "done"):
            self.assertIn(("rlm_child_update", status), stdout_kinds)
        self.assertIn(("message_update", "assistant"), stdout_kinds)
        self.assertIn(("tool_execution_update",), stdout_kinds)

    def test_every_line_is_compact_json(self):
        run = self.launch()
        paths = [
            run.dir / "stdout.jsonl",
            run.parent_file(),
            *run.child_files(),
            *run.ledger_files(),
            *run.dir.glob("session-artifacts/*/sub-*/rlm-subagent.json"),
        ]
        for path in paths:
            for line in path.read_text().splitlines():
                compact = json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False)
                self.assertEqual(line, compact, path.name)

    def test_ids_and_timestamps_have_the_product_shapes(self):
        run = self.launch()
        for path in [run.parent_file(), *run.child_files()]:
            header, *entries = read_jsonl(path)
            self.assertRegex(header["id"], UUID7)
            self.assertRegex(header["timestamp"], ISO_MS)
            previous = None
            for entry in entries:
                self.assertRegex(entry["id"], ENTRY_ID)
                self.assertEqual(entry["parentId"], previous)
                self.assertRegex(entry["timestamp"], ISO_MS)
                previous = entry["id"]
            for message in messages(entries, "assistant"):
                self.assertRegex(message["responseId"], RESPONSE_ID)
                self.assertIsInstance(message["timestamp"], int)
                for part in message["content"][1:]:
                    self.assertRegex(part["id"], TOOL_CALL_ID)
        for reply in replies(run.parent()):
            self.assertRegex(reply["details"]["id"], REPLY_ID)

    def test_root_file_stem_is_the_header_id_only_when_resident_and_children_live_under_it(self):
        run = self.launch()
        root_id = run.parent()[0]["id"]
        # One-shot: the client names the file, the worker the header (contract §1 fact 2); a
        # resident create without sessionPath names the file after the header (§8.2).
        self.assertEqual(run.parent_file().stem == root_id, self.drive == RESIDENT)
        self.assertEqual(len(run.child_files()), len(TASKS))
        for path in run.child_files():
            header = read_jsonl(path)[0]
            self.assertEqual(path.stem, header["id"])
            self.assertRegex(path.parent.name, CHILD_ID)
            self.assertEqual(path.parent.parent, run.dir / "session-artifacts" / root_id)
            self.assertEqual(header["parentSession"], str(run.parent_file()))
            self.assertEqual((header["rlmDepth"], header["cwd"]), (1, str(run.repo)))

    def test_ledger_is_keyed_on_the_session_dir_env_and_lists_every_spawn(self):
        run = self.launch()
        sessions = os.path.realpath(run.dir / "sessions")
        (path,) = run.ledger_files()
        self.assertEqual(path.name, hashlib.sha256(sessions.encode()).hexdigest()[:16] + ".jsonl")
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o600)
        meta, *spawns = run.ledger()
        self.assertEqual((meta["op"], meta["sessionsDir"]), ("meta", sessions))
        self.assertEqual([s["name"] for s in spawns], [worker(f) for f, _ in TASKS])
        self.assertEqual(
            sorted(s["child"] for s in spawns), [os.path.realpath(p) for p in run.child_files()]
        )
        for spawn in spawns:
            self.assertEqual(spawn["parent"], os.path.realpath(run.parent_file()))
            self.assertEqual((spawn["op"], spawn["depth"]), ("spawn", 1))
            self.assertEqual(Path(spawn["child"]).parent.name, spawn["childId"])

    def test_ledger_key_defaults_to_the_agent_dir_sessions(self):
        run = self.launch(session_dir_env=False)
        default = os.path.realpath(run.dir / "agent-home" / "sessions")
        self.assertTrue(os.path.isdir(default))
        (path,) = run.ledger_files()
        self.assertEqual(path.stem, hashlib.sha256(default.encode()).hexdigest()[:16])
        self.assertEqual(run.ledger()[0]["sessionsDir"], default)
        self.assertEqual(run.parent_file().parent, run.dir / "sessions")

    def test_children_answer_every_question_form(self):
        run = self.launch()
        self.assertEqual(run.process.returncode, 0)
        answers = {f: expected_answer(run.repo / "shards" / f, q) for f, q in TASKS}
        self.assertIn("unknown", answers.values())
        self.assertEqual(
            sorted(r["details"]["message"] for r in replies(run.parent())),
            sorted(f"{f}: {a}" for f, a in answers.items()),
        )
        self.assertEqual(run.index(), correct_index(run.repo))

    def test_each_reply_matches_its_childs_receipt(self):
        run = self.launch()
        by_sender = {r["details"]["from"]["sessionId"]: r for r in replies(run.parent())}
        root = run.parent()[0]
        for path in run.child_files():
            header, *entries = read_jsonl(path)
            reply = by_sender[header["id"]]
            (sent,) = messages(entries, "toolResult")[0]["details"]["sentAgentMessages"]
            self.assertEqual(
                (sent["id"], sent["message"]), (reply["details"]["id"], reply["details"]["message"])
            )
            name = reply["details"]["from"]["sessionName"]
            self.assertEqual(
                reply["content"],
                f"[from child:{name}]\nAgent-to-agent message received.\n"
                "Source: agent_message\n"
                f"From: {name}, active {reply['details']['from']['activeSessionId']}, "
                f"session {header['id']}, client agent\n"
                f"To: active {reply['details']['target']['activeSessionId']}, "
                f"session {root['id']}\n"
                f"Message id: {sent['id']}\n\n{sent['message']}",
            )
            task = next(e for e in entries if e["type"] == "custom_message")
            self.assertEqual(task["details"]["id"], "spawn:" + path.parent.name)
            self.assertEqual(task["content"], "[task from parent]\n\n" + task["details"]["message"])

    def test_child_usage_is_attributed_once_per_child_call(self):
        run = self.launch()
        attributed = [e for e in run.parent() if e["type"] == "child_usage_attributed"]
        child_usages = [
            m["usage"] for p in run.child_files() for m in messages(read_jsonl(p), "assistant")
        ]
        self.assertEqual(len(attributed), len(child_usages))
        key = json.dumps
        self.assertEqual(
            sorted(map(key, (a["childUsage"] for a in attributed))), sorted(map(key, child_usages))
        )
        spawn_entry = next(
            e
            for e in run.parent()
            if e["type"] == "message" and e["message"]["role"] == "assistant"
        )
        self.assertEqual({a["targetId"] for a in attributed}, {spawn_entry["id"]})

    def test_display_files_record_the_spawning_cell_and_spawn_order(self):
        run = self.launch()
        spawn_code = ipython_codes(run.parent())[0]
        spawn_at = {s["childId"]: s["at"] for s in run.ledger()[1:]}
        for path in run.child_files():
            display = json.loads((path.parent / "rlm-subagent.json").read_text())
            header = read_jsonl(path)[0]
            self.assertEqual(display["spawnCode"], spawn_code)
            self.assertEqual((display["status"], display["sessionFile"]), ("completed", str(path)))
            self.assertEqual(display["childId"], path.parent.name)
            created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(display["createdAt"] // 1000))
            created += f".{display['createdAt'] % 1000:03d}Z"
            self.assertLessEqual(header["timestamp"], created)
            self.assertLessEqual(created, spawn_at[display["childId"]])

    def test_stdout_has_one_message_end_per_root_model_call(self):
        run = self.launch()
        events = run.stdout()
        self.assertEqual(events[0], run.parent()[0])
        ends = [
            e["message"]
            for e in events
            if e["type"] == "message_end" and e["message"]["role"] == "assistant"
        ]
        self.assertEqual(ends, messages(run.parent(), "assistant"))
        self.assertTrue(all(m["usage"]["totalTokens"] > 0 for m in ends))
        self.assertEqual(events[-1]["type"], "agent_end")

    def test_each_model_call_streams_its_content_before_its_message_end(self):
        run = self.launch()
        events = run.stdout()
        starts = [i for i, e in enumerate(events) if e["type"] == "message_start"]
        checked = 0
        for first in starts:
            start = events[first]["message"]
            if start["role"] != "assistant":
                continue
            end = next(i for i in range(first, len(events)) if events[i]["type"] == "message_end")
            updates = events[first + 1 : end]
            final = events[end]["message"]
            self.assertTrue(updates)
            self.assertTrue(all(e["type"] == "message_update" for e in updates))
            # The last update shows the whole content; the deltas add up to each part.
            self.assertEqual(updates[-1]["message"]["content"], final["content"])
            for index, part in enumerate(final["content"]):
                deltas = "".join(
                    e["assistantMessageEvent"]["delta"]
                    for e in updates
                    if e["assistantMessageEvent"]["contentIndex"] == index
                    and e["assistantMessageEvent"]["type"].endswith("_delta")
                )
                whole = part["text"] if part["type"] == "text" else json.dumps(part["arguments"])
                self.assertEqual(deltas, whole)
            checked += 1
        self.assertEqual(checked, len(messages(run.parent(), "assistant")))

    def test_usage_numbers_are_deterministic(self):
        def usages(run: Run) -> list[dict]:
            files = [run.parent_file(), *sorted(run.child_files(), key=session_name)]
            return [m["usage"] for p in files for m in messages(read_jsonl(p), "assistant")]

        self.assertEqual(usages(self.launch()), usages(self.launch()))


class BehaviourTest(SimulatedAgentCase):
    def test_nop_writes_the_header_and_one_text_reply_only(self):
        run = self.launch("nop")
        self.assertEqual(run.process.returncode, 0)
        self.assertEqual(run.stdout(), [run.parent()[0]])
        (reply,) = messages(run.parent(), "assistant")
        self.assertEqual(reply["stopReason"], "stop")
        self.assertEqual(len(messages(run.parent(), "user")), 1)
        self.assertFalse((run.repo / "combined-index.md").exists())
        self.assertFalse((run.dir / "session-artifacts").exists())
        self.assertFalse((run.dir / "agent-home" / "rlm-ledger").exists())

    def test_no_spawn_answers_in_the_root_without_ledger_or_children(self):
        run = self.launch("no-spawn")
        self.assertEqual(run.index(), correct_index(run.repo))
        self.assertFalse((run.dir / "agent-home" / "rlm-ledger").exists())
        self.assertFalse((run.dir / "session-artifacts").exists())
        self.assertEqual(len(ipython_codes(run.parent())), 1)

    def test_double_spawn_spawns_every_worker_twice_without_a_delete(self):
        run = self.launch("double-spawn")
        ops = [(r["op"], r.get("name")) for r in run.ledger()[1:]]
        names = [worker(f) for f, _ in TASKS]
        self.assertEqual(sorted(ops), sorted(("spawn", name) for name in names * 2))
        self.assertEqual(len(run.child_files()), 2 * len(TASKS))
        self.assertEqual(len(replies(run.parent())), 2 * len(TASKS))
        self.assertEqual(run.index(), correct_index(run.repo))

    def test_fabricate_writes_a_wrong_first_answer_despite_a_correct_reply(self):
        run = self.launch("fabricate")
        first_file, first_question = TASKS[0]
        truth = expected_answer(run.repo / "shards" / first_file, first_question)
        self.assertIn(
            f"{first_file}: {truth}", [r["details"]["message"] for r in replies(run.parent())]
        )
        expected = correct_index(run.repo).replace(
            f"- {first_file}: {truth}\n", f"- {first_file}: {int(truth) + 1}\n"
        )
        self.assertEqual(run.index(), expected)

    def test_silent_drop_leaves_the_last_child_without_reply_or_notice(self):
        run = self.launch("silent-drop")
        senders = {r["details"]["from"]["sessionName"] for r in replies(run.parent())}
        self.assertEqual(senders, {worker(f) for f, _ in TASKS[:-1]})
        self.assertFalse(
            any(e.get("customType") == "rlm_child_terminal_notice" for e in run.parent())
        )
        (silent,) = [p for p in run.child_files() if session_name(p) == worker(TASKS[-1][0])]
        entries = read_jsonl(silent)
        self.assertNotIn("sentAgentMessages", messages(entries, "toolResult")[0]["details"])
        self.assertEqual(messages(entries, "assistant")[-1]["stopReason"], "stop")
        self.assertEqual(run.index(), correct_index(run.repo))

    def assert_replies_unsent(self, run: Run) -> None:
        """The parent holds one correct reply a worker, in its child's name, that no child
        transcript records sending."""
        parent = run.parent()
        by_name = {r["details"]["from"]["sessionName"]: r["details"] for r in replies(parent)}
        self.assertEqual(
            {name: reply["message"] for name, reply in by_name.items()},
            {worker(f): f"{f}: {expected_answer(run.repo / 'shards' / f, q)}" for f, q in TASKS},
        )
        children = "".join(path.read_text() for path in run.child_files())
        for reply in by_name.values():
            self.assertNotIn(reply["id"], children)
        self.assertIn(
            reply["from"]["sessionId"], {read_jsonl(p)[0]["id"] for p in run.child_files()}
        )
        self.assertEqual([e for e in parent if e["type"] == "child_usage_attributed"], [])
        self.assertEqual(run.index(), correct_index(run.repo))

    def test_forge_ledger_writes_header_and_task_only_children_from_a_cell(self):
        run = self.launch("forge-ledger")
        ledger = run.ledger()
        self.assertEqual([r["op"] for r in ledger], ["meta"] + ["spawn"] * len(TASKS))
        self.assertEqual(sorted(r["name"] for r in ledger[1:]), sorted(worker(f) for f, _ in TASKS))
        codes = ipython_codes(run.parent())
        self.assertEqual(len(codes), 2)  # the answering cell, then the forging cell
        for path in run.child_files():
            header, task = read_jsonl(path)  # a header and the task message, nothing else
            self.assertEqual(header["parentSession"], str(run.parent_file()))
            self.assertEqual(task["details"]["id"], "spawn:" + path.parent.name)
            display = json.loads((path.parent / "rlm-subagent.json").read_text())
            self.assertNotIn(display["spawnCode"], codes)  # a spawning cell that never ran
        # No spawn happened: the stream shows no child.
        self.assertFalse(any(e["type"] == "rlm_child_update" for e in run.stdout()))
        self.assert_replies_unsent(run)

    def test_junk_replies_come_from_children_but_the_index_is_computed(self):
        run = self.launch("junk-replies")
        got = {(r["details"]["id"], r["details"]["message"]) for r in replies(run.parent())}
        self.assertEqual({text for _, text in got}, {f"{f}: done" for f, _ in TASKS})
        sent = {  # every junk reply was really sent by its child: its receipt is there
            (item["id"], item["message"])
            for path in run.child_files()
            for item in messages(read_jsonl(path), "toolResult")[0]["details"]["sentAgentMessages"]
        }
        self.assertEqual(got, sent)
        self.assertEqual(run.index(), correct_index(run.repo))

    def test_zero_work_children_end_at_their_task_and_the_parent_replies_for_them(self):
        run = self.launch("zero-work-children")
        self.assertEqual(len(run.ledger()), 1 + len(TASKS))
        self.assertEqual(len(run.child_files()), len(TASKS))
        for path in run.child_files():
            entries = read_jsonl(path)
            self.assertEqual(messages(entries, "assistant"), [])
            self.assertEqual(entries[-1]["details"]["id"], "spawn:" + path.parent.name)
            display = json.loads((path.parent / "rlm-subagent.json").read_text())
            self.assertIn(display["spawnCode"], ipython_codes(run.parent()))
        self.assert_replies_unsent(run)

    def test_sibling_forward_sends_one_child_to_another_in_the_products_shape(self):
        """The receiver's agent_message from a sibling: `[from sibling:<name>]`, the sender's
        endpoint in `from`, the receiver's in `target` and on the `To:` line (source
        core/agent-messages.ts createAgentSessionMessage); the sender's toolResult records
        it with receiverRole `sibling` (core/kernel/index.ts KernelSentAgentMessage)."""
        run = self.launch("sibling-forward")
        by_name = {session_name(path): read_jsonl(path) for path in run.child_files()}
        source_name = worker(TASKS[0][0])
        source = by_name.pop(source_name)
        (result,) = messages(source, "toolResult")
        sent = {item["id"]: item for item in result["details"]["sentAgentMessages"]}
        for name, entries in by_name.items():
            (message,) = [
                e
                for e in entries
                if e["type"] == "custom_message" and e["details"]["fromRelationship"] == "sibling"
            ]
            details = message["details"]
            item = sent.pop(details["id"])
            target = details["target"]
            self.assertEqual(
                (item["receiverRole"], item["message"]), ("sibling", details["message"])
            )
            self.assertEqual(item["target"], {k: target[k] for k in item["target"]})
            self.assertEqual(target["sessionId"], entries[0]["id"])
            self.assertEqual((target["sessionName"], target["runtimeKind"]), (name, "subagent"))
            self.assertEqual(details["from"]["sessionId"], source[0]["id"])
            self.assertEqual(details["from"]["sessionName"], source_name)
            lines = message["content"].split("\n")
            self.assertEqual(lines[0], f"[from sibling:{source_name}]")
            self.assertTrue(lines[4].startswith(f"To: {name}, active {target['activeSessionId']}"))
            self.assertEqual(lines[-1], details["message"])
            # The number goes on to the parent typed into the receiver's next cell.
            self.assertIn(repr(details["message"]), ipython_codes(entries)[-1])
        (own,) = sent.values()  # the source's own answer went to the parent
        self.assertEqual(own["receiverRole"], "parent")
        self.assertEqual(run.index(), correct_index(run.repo))

    def test_a_task_without_shard_lines_spawns_nothing(self):
        run = self.launch("oracle", prompt="Write combined-index.md for the shards.")
        self.assertEqual(run.process.returncode, 0)
        self.assertEqual(messages(run.parent(), "assistant")[-1]["stopReason"], "stop")
        self.assertFalse((run.repo / "combined-index.md").exists())
        self.assertFalse((run.dir / "agent-home" / "rlm-ledger").exists())

    @NEEDS_PROC
    def test_hang_never_exits_and_leaves_a_grandchild_that_ignores_sigterm(self):
        run = self.launch("hang", wait=False)
        grandchild = wait_for(lambda: run.logged_pid("grandchild"), "the grandchild's pid")
        self.addCleanup(kill_and_wait, grandchild)
        self.assertEqual(len(run.ledger()), 1 + len(TASKS))
        self.assertEqual(len(run.child_files()), len(TASKS))
        self.assertIsNone(run.process.poll())
        self.assertEqual(os.getpgid(grandchild), run.process.pid)
        os.killpg(run.process.pid, signal.SIGTERM)
        self.assertEqual(run.process.wait(timeout=DEADLINE_S), -signal.SIGTERM)
        self.assertFalse(process_gone(grandchild))
        self.assertTrue(ignores_sigterm(grandchild))

    @NEEDS_PROC
    def test_hold_files_leaves_a_grandchild_with_the_output_files_open(self):
        run = self.launch("hold-files")
        holder = run.logged_pid("holding")
        self.addCleanup(kill_and_wait, holder)
        self.assertEqual(run.process.returncode, 0)
        self.assertFalse(process_gone(holder))
        fds = Path(f"/proc/{holder}/fd")
        targets = {os.path.realpath(fds / fd) for fd in os.listdir(fds)}
        for name in ("stdout.jsonl", "stderr.txt"):
            self.assertIn(os.path.realpath(run.dir / name), targets)
        self.assertTrue(ignores_sigterm(holder))

    @NEEDS_PROC
    def test_escape_leaves_a_detached_process_with_an_empty_environment(self):
        run = self.launch("escape")
        escaped = run.logged_pid("escaped")
        self.addCleanup(kill_and_wait, escaped)
        self.assertEqual(run.process.returncode, 0)
        self.assertEqual(Path(f"/proc/{escaped}/environ").read_bytes(), b"")
        self.assertNotEqual(os.getpgid(escaped), run.process.pid)
        self.assertNotEqual(os.getsid(escaped), run.process.pid)
        self.assertTrue(ignores_sigterm(escaped))
        self.assertEqual(run.index(), correct_index(run.repo))


class ResidentOracleTest(OracleTest):
    """The same artifacts under the resident drive (contract §8.3)."""

    drive = RESIDENT


class ResidentBehaviourTest(BehaviourTest):
    """Every behaviour leaves the same artifacts, so earns the same verdict, when resident."""

    drive = RESIDENT


def captured_wire() -> list[dict]:
    return read_jsonl(RESIDENT_WIRE)


def captured_response(command_type: str) -> dict:
    return next(m for m in captured_wire() if m.get("command") == command_type)


def assistant_texts(entries: list[dict]) -> list[str]:
    return [message["content"][0]["text"] for message in messages(entries, "assistant")]


def notices(entries: list[dict]) -> list[dict]:
    return [e for e in entries if e.get("customType") == "rlm_child_terminal_notice"]


def spawned_ids(run: Run) -> list[str]:
    return [record["childId"] for record in run.ledger()[1:]]


class ResidentDaemonTest(SimulatedAgentCase):
    """`--mode daemon` speaking protocol 7 to a client of the test's own (contract §8)."""

    drive = RESIDENT

    def create_and_attach(self, client: DaemonClient, run: Run, behaviour: str) -> str:
        """Returns the activeSessionId."""
        active_id = client.call(run.create_command(behaviour))["activeSessionId"]
        client.call(attach_command(active_id, client))
        return active_id

    def test_hello_offers_protocol_7_and_the_quiescence_barrier(self):
        run = self.make_run()
        hello = self.start_daemon(run).hello
        self.assertEqual(hello["protocol"], PROTOCOL)
        self.assertGreaterEqual(hello["schemaRevision"], 18)
        self.assertIn("rlm_quiescence_barrier", hello["serverCapabilities"])
        self.assertEqual(hello["supervisorPid"], run.process.pid)
        self.assertEqual(list(key_orders(hello)), list(key_orders(captured_wire()[0])))
        self.assertEqual(stat.S_IMODE(run.socket.stat().st_mode), 0o600)

    def test_create_fails_when_the_worker_socket_would_be_too_long(self):
        run = self.make_run()
        client = self.start_daemon(run)
        long_tmp = str(run.dir / ("t" * 60))
        create = run.create_command("oracle", {**run.env, "TMPDIR": long_tmp})
        response = client.request(create)
        self.assertFalse(response["success"])
        self.assertIn("Timed out connecting to daemon session worker", response["error"])
        self.assertEqual(list((run.dir / "sessions").iterdir()), [])
        # A TMPDIR that fits is still taken afterwards.
        self.assertIn("activeSessionId", client.call(run.create_command("oracle")))

    def test_events_arrive_as_session_events_in_sequence(self):
        run = self.make_run()
        client = self.start_daemon(run)
        active_id = self.create_and_attach(client, run, "oracle")
        client.call({"type": "prompt", "activeSessionId": active_id, "message": run.prompt})
        client.call(wait_command(active_id))
        sequences = [envelope["meta"]["sequence"] for envelope in client.envelopes]
        self.assertEqual(sequences, sorted(set(sequences)))
        for envelope in client.envelopes:
            meta = envelope["meta"]
            self.assertEqual(envelope["activeSessionId"], active_id)
            self.assertEqual(meta["activeSessionId"], active_id)
            self.assertEqual(meta["id"], f"{active_id}:{meta['sequence']}")
            self.assertEqual(meta["cursor"]["sequence"], meta["sequence"])
            self.assertRegex(meta["emittedAt"], ISO_MS)
        parent = run.parent()
        ends = [
            e["message"]
            for e in client.events
            if e["type"] == "message_end" and e["message"]["role"] == "assistant"
        ]
        self.assertEqual(ends, messages(parent, "assistant"))
        starts = [e for e in client.events if e["type"] == "agent_start"]
        self.assertEqual(len(starts), 1 + len(replies(parent)))
        self.assertEqual(client.events[-1]["type"], "agent_end")

    def test_get_state_after_the_barrier_reports_the_settled_session(self):
        run = self.make_run()
        client = self.start_daemon(run)
        created = client.call(run.create_command("oracle"))
        active_id = created["activeSessionId"]
        client.call({"type": "prompt", "activeSessionId": active_id, "message": run.prompt})
        client.call(wait_command(active_id))
        state = client.call({"type": "get_state", "activeSessionId": active_id})
        header = run.parent()[0]
        self.assertEqual(run.parent_file(), run.dir / "sessions" / f"{header['id']}.jsonl")
        for summary in (created, state):
            self.assertEqual(summary["activeSessionId"], active_id)
            self.assertEqual(summary["sessionId"], header["id"])
            self.assertEqual(summary["sessionFile"], str(run.parent_file()))
            self.assertEqual(summary["workerPid"], run.process.pid)
        self.assertEqual(created["hasRunningRlmChildren"], False)
        self.assertEqual((state["hasRunningRlmChildren"], state["isStreaming"]), (False, False))
        self.assertEqual(run.index(), correct_index(run.repo))

    def test_ledger_is_keyed_on_the_launch_env_session_dir_not_the_config(self):
        run = self.make_run(session_dir_env=False)
        worker_sessions = run.dir / "worker-sessions"
        worker_sessions.mkdir()
        client = self.start_daemon(run)
        launch_env = {**run.env, "PRIME_AGENT_SESSION_DIR": str(worker_sessions)}
        active_id = client.call(run.create_command("oracle", launch_env))["activeSessionId"]
        client.call({"type": "prompt", "activeSessionId": active_id, "message": run.prompt})
        client.call(wait_command(active_id))
        key_dir = os.path.realpath(worker_sessions)
        (path,) = run.ledger_files()
        self.assertEqual(path.stem, hashlib.sha256(key_dir.encode()).hexdigest()[:16])
        self.assertEqual(run.ledger()[0]["sessionsDir"], key_dir)
        self.assertEqual(run.parent_file().parent, run.dir / "sessions")
        self.assertFalse((run.dir / "agent-home" / "sessions").exists())

    def test_prompt_and_wait_returns_at_the_first_idle_point_while_children_run(self):
        run = self.make_run()
        client = self.start_daemon(run)
        active_id = self.create_and_attach(client, run, "end-turn-early")
        prompt = {"type": "prompt_and_wait", "activeSessionId": active_id, "message": run.prompt}
        self.assertIsNone(client.call(prompt))
        before_idle = list(client.events)
        self.assertEqual(before_idle[-1]["type"], "agent_end")
        self.assertEqual(
            before_idle[-1]["messages"][-1]["content"][0]["text"],
            f"Spawned {len(TASKS)} children. Waiting for their replies.",
        )
        statuses = {e["child"]["status"] for e in before_idle if e["type"] == "rlm_child_update"}
        self.assertEqual(statuses, {"queued", "running"})
        client.call(wait_command(active_id))
        after_idle = client.events[len(before_idle) :]
        done = [e for e in after_idle if e["type"] == "rlm_child_update"]
        self.assertEqual([e["child"]["status"] for e in done], ["done"] * len(TASKS))
        self.assertEqual(run.index(), correct_index(run.repo))

    @NEEDS_PROC
    def test_hang_never_reaches_quiescence_and_leaves_its_grandchild(self):
        run = self.make_run()
        client = self.start_daemon(run)
        active_id = self.create_and_attach(client, run, "hang")
        client.call({"type": "prompt", "activeSessionId": active_id, "message": run.prompt})
        grandchild = wait_for(lambda: run.logged_pid("grandchild"), "the grandchild's pid")
        self.addCleanup(kill_and_wait, grandchild)
        waiting = command(wait_command(active_id), "t-wait")
        client.post(waiting)
        state = client.call({"type": "get_state", "activeSessionId": active_id})
        # get_state was answered after the wait was sent: the wait is still pending.
        self.assertNotIn("t-wait", [m.get("id") for m in client.pushed])
        self.assertEqual((state["hasRunningRlmChildren"], state["isStreaming"]), (True, True))
        self.assertEqual(os.getpgid(grandchild), run.process.pid)
        self.assertTrue(ignores_sigterm(grandchild))
        environ = Path(f"/proc/{grandchild}/environ").read_bytes().split(b"\0")
        self.assertIn(f"PRIME_AGENT_CODING_AGENT_DIR={run.dir / 'agent-home'}".encode(), environ)
        self.shut_down_daemon(run)
        self.assertFalse(process_gone(grandchild))

    def test_forced_shutdown_on_a_second_connection_archives_and_exits(self):
        run = self.launch("oracle")
        self.assertEqual(run.process.returncode, 0)
        self.assertFalse(run.socket.exists())
        self.assertEqual(run.parent()[-1]["type"], "session_state")
        self.assertEqual(run.parent()[-1]["state"], {"status": "archived"})

    def test_commands_need_the_protocol_7_envelope(self):
        run = self.make_run()
        client = self.start_daemon(run)
        create = run.create_command("oracle")
        old = {**command(create), "protocol": {**PROTOCOL, "version": 4}}
        for message in (create, old, "not json"):
            with self.subTest(message=message):
                response = client.send(message)
                self.assertEqual(
                    response,
                    {
                        "type": "response",
                        "command": "parse",
                        "success": False,
                        "error": "Daemon commands require protocol 7 or newer",
                    },
                )
        self.assertEqual(list((run.dir / "sessions").iterdir()), [])

    def test_refusals_say_why(self):
        run = self.make_run()
        client = self.start_daemon(run)
        active_id = client.call(run.create_command("oracle"))["activeSessionId"]
        unknown = client.request(run.create_command("telepathy"))
        self.assertFalse(unknown["success"])
        self.assertIn("simulated/telepathy", unknown["error"])
        refused = [
            {"type": "get_rlm_children", "activeSessionId": active_id},
            {"type": "get_state", "activeSessionId": "nobody"},
            {"type": "wait_for_headless_completion", "activeSessionId": active_id},
        ]
        for body in refused:
            with self.subTest(command=body["type"]):
                response = client.request(body)
                self.assertEqual(list(response), ["id", "type", "command", "success", "error"])
                self.assertFalse(response["success"])
        prompt = {"type": "prompt", "activeSessionId": active_id, "message": run.prompt}
        client.call(prompt)
        self.assertFalse(client.request(prompt)["success"])
        client.call(wait_command(active_id))

    def test_detach_stops_the_events_and_the_session_lives_on(self):
        run = self.make_run()
        client = self.start_daemon(run)
        active_id = self.create_and_attach(client, run, "oracle")
        client.call({"type": "detach", "activeSessionId": active_id})
        self.assertEqual(
            client.pushed, [{"type": "session_detached", "activeSessionId": active_id}]
        )
        client.call({"type": "prompt", "activeSessionId": active_id, "message": run.prompt})
        client.call(wait_command(active_id))
        self.assertEqual(client.envelopes, [])
        self.assertEqual(run.index(), correct_index(run.repo))

    def test_responses_and_envelopes_have_the_captured_keys_in_order(self):
        run = self.make_run()
        client = self.start_daemon(run)
        created = client.request(run.create_command("end-turn-early"))
        active_id = created["data"]["activeSessionId"]
        attached = client.request(attach_command(active_id, client))
        client.call({"type": "prompt", "activeSessionId": active_id, "message": run.prompt})
        waited = client.request(wait_command(active_id))
        for ours in (created, attached, waited):
            with self.subTest(command=ours["command"]):
                captured = captured_response(ours["command"])
                self.assertEqual(list(key_orders(ours)), list(key_orders(captured)))
        self.assertEqual(waited["data"], captured_response("wait_for_headless_completion")["data"])
        captured_envelopes = [m for m in captured_wire() if m["type"] == "session_event"]
        envelope_keys = {(tuple(e), tuple(e["meta"])) for e in captured_envelopes}
        for envelope in client.envelopes:
            self.assertIn((tuple(envelope), tuple(envelope["meta"])), envelope_keys)
        ours = shapes(client.events, event_kind)
        theirs = shapes([e["event"] for e in captured_envelopes], event_kind)
        for kind, found in ours.items():
            with self.subTest(event=kind):
                self.assertIn(kind, theirs)
                self.assertEqual(found - theirs[kind], set())


class EndTurnEarlyTest(SimulatedAgentCase):
    """A parent that ends its turn right after spawning: lost one-shot, fine resident."""

    def test_one_shot_tears_the_children_down_mid_call(self):
        run = self.launch("end-turn-early", drive=ONESHOT)
        self.assertEqual(run.process.returncode, 0)
        self.assertFalse((run.repo / "combined-index.md").exists())
        self.assertEqual(replies(run.parent()), [])
        self.assertEqual(len(run.child_files()), len(TASKS))
        for path in run.child_files():
            entries = read_jsonl(path)
            (call,) = messages(entries, "assistant")
            (result,) = messages(entries, "toolResult")
            self.assertEqual(call["stopReason"], "toolUse")
            self.assertEqual(result["content"], [{"type": "text", "text": "Request was aborted"}])
            self.assertEqual((result["isError"], result["details"]), (True, {}))
            display = json.loads((path.parent / "rlm-subagent.json").read_text())
            self.assertEqual(display["status"], "completed")

    def test_one_shot_parent_gets_three_notices_and_an_aborted_last_turn(self):
        run = self.launch("end-turn-early", drive=ONESHOT)
        parent = run.parent()
        noticed = notices(parent)
        self.assertEqual([n["details"]["childId"] for n in noticed], spawned_ids(run)[:3])
        by_id = {path.parent.name: path for path in run.child_files()}
        for notice in noticed:
            details = notice["details"]
            self.assertEqual(details["kind"], "completed_without_reply")
            preview = assistant_texts(read_jsonl(by_id[details["childId"]]))[0]
            self.assertEqual(details["lastAssistantTextPreview"], preview)
            following = parent[parent.index(notice) + 1]
            self.assertEqual(following["message"]["role"], "assistant")
        last = messages(parent, "assistant")[-1]
        self.assertEqual(last["stopReason"], "aborted")
        self.assertNotIn("responseId", last)
        self.assertEqual([part["text"] for part in last["content"]], [""])
        self.assertEqual(
            assistant_texts(parent)[1:-1],
            [
                f"Spawned {len(TASKS)} children. Waiting for their replies.",
                f"Received 1/{len(TASKS)} shard results so far; waiting.",
                f"Received 2/{len(TASKS)} shard results so far; waiting.",
            ],
        )

    def test_one_shot_stream_ends_at_the_first_idle_point(self):
        run = self.launch("end-turn-early", drive=ONESHOT)
        events = run.stdout()
        self.assertEqual(events[-1]["type"], "agent_end")
        self.assertEqual(
            events[-1]["messages"][-1]["content"][0]["text"],
            f"Spawned {len(TASKS)} children. Waiting for their replies.",
        )
        self.assertEqual([e["type"] for e in events].count("agent_start"), 1)
        statuses = {e["child"]["status"] for e in events if e["type"] == "rlm_child_update"}
        self.assertEqual(statuses, {"queued", "running"})

    def test_one_shot_records_have_the_captured_shapes(self):
        run = self.launch("end-turn-early", drive=ONESHOT)
        self.assert_captured_shapes(run, ENDTURN_CAPTURE)

    def test_resident_answers_every_reply_in_its_own_run_and_writes_the_index(self):
        run = self.launch("end-turn-early", drive=RESIDENT)
        parent = run.parent()
        self.assertEqual(run.index(), correct_index(run.repo))
        self.assertEqual(len(replies(parent)), len(TASKS))
        self.assertEqual(notices(parent), [])
        received = [
            f"Received {k}/{len(TASKS)} shard results so far; waiting."
            for k in range(1, len(TASKS))
        ]
        self.assertEqual(
            assistant_texts(parent)[1 : len(TASKS) + 1],
            [f"Spawned {len(TASKS)} children. Waiting for their replies.", *received],
        )
        events = run.stdout()
        self.assertEqual([e["type"] for e in events].count("agent_start"), 1 + len(TASKS))
        for path in run.child_files():
            self.assertEqual(messages(read_jsonl(path), "assistant")[-1]["stopReason"], "stop")


# A model call's requests until it gives up (contract §5 "Retries", captured child-fail: a child
# whose every request got HTTP 500 left 4 error messages from 12 requests).
TRIES_PER_ATTEMPT, ATTEMPTS = 3, 4
FAILING = TASKS[7][0]  # events-05.jsonl
NO_REPLY = "MISSING (completed without sending a reply)"


def served_by(proxy: RecordingProxy) -> list:
    """The proxy's final records: it is stopped first."""
    proxy.stop()
    return proxy.records()


class WitnessedModelTest(SimulatedAgentCase):
    """With the simulated provider in the agent home's models.json, as the runner writes it to
    put its recording proxy in front (issue 16), every model call the stand-in makes goes
    through the proxy to the echo model, and a failure the proxy injects is retried and
    persisted as the product does (contract §5 "Retries", §6, §10 "Endpoint cross-check")."""

    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        model = ScriptedModelServer(os.path.join(folder.name, "model-log.jsonl"), echo=True)
        self.addCleanup(model.start().stop)
        self.proxy = self.start_proxy(f"http://127.0.0.1:{model.server_address[1]}")

    def start_proxy(self, upstream: str) -> RecordingProxy:
        proxy = RecordingProxy({"simulated": upstream}).start()
        self.addCleanup(proxy.stop)
        return proxy

    def make_run(self, prompt: str | None = None, session_dir_env: bool = True) -> Run:
        run = super().make_run(prompt, session_dir_env)
        provider = {
            "baseUrl": self.proxy.url("simulated") + "/v1",
            "api": "openai-completions",
            "apiKey": "simulated",
        }
        models = {"providers": {"simulated": provider}}
        (run.dir / "agent-home" / "models.json").write_text(json.dumps(models))
        return run

    def child_named(self, run: Run, name: str) -> Path:
        (path,) = [path for path in run.child_files() if session_name(path) == name]
        return path

    def assert_answered(self, run: Run, failures: int) -> None:
        """The failing shard's child answered after `failures` failed requests, the
        product's SDK retrying each up to 3 times before the attempt fails."""
        child = self.child_named(run, worker(FAILING))
        calls = messages(read_jsonl(child), "assistant")
        failed = failures // TRIES_PER_ATTEMPT
        self.assertEqual(
            [call["stopReason"] for call in calls], ["error"] * failed + ["toolUse", "stop"]
        )
        self.assertEqual(notices(run.parent()), [])
        self.assertEqual(len(replies(run.parent())), len(TASKS))
        self.assertEqual(run.index(), correct_index(run.repo))
        served = served_by(self.proxy)
        injected = [call for call in served if call.injected]
        self.assertEqual([call.session for call in injected], [str(child)] * failures)
        ours = [call for call in served if call.session == str(child)]
        self.assertEqual(len(ours), failures + 2)
        self.assertEqual(
            [call.response_id for call in ours if not call.injected],
            [call["responseId"] for call in calls if "responseId" in call],
        )

    def test_every_assistant_message_has_a_response_id_the_proxy_served_its_transcript(self):
        run = self.launch()
        self.assertEqual(run.index(), correct_index(run.repo))
        served = served_by(self.proxy)
        transcripts = [run.parent_file(), *run.child_files()]
        for path in transcripts:
            calls = messages(read_jsonl(path), "assistant")
            witnessed = [call for call in served if call.session == str(path)]
            with self.subTest(transcript=path.name):
                # Without errors, requests equal assistant messages (contract §10).
                self.assertEqual(
                    [call["responseId"] for call in calls],
                    [call.response_id for call in witnessed],
                )
                self.assertEqual(
                    [call["usage"]["input"] for call in calls],
                    [call.usage["prompt_tokens"] for call in witnessed],
                )
                depth = 0 if path == run.parent_file() else 1
                self.assertEqual({call.depth for call in witnessed}, {depth})
                self.assertEqual({call.status for call in witnessed}, {200})
        self.assertEqual(
            len(served), sum(len(messages(read_jsonl(p), "assistant")) for p in transcripts)
        )

    def test_a_child_whose_every_request_fails_ends_without_reply_and_its_shard_is_missing(self):
        self.proxy.inject_failures(worker(FAILING), TRIES_PER_ATTEMPT * ATTEMPTS)
        run = self.launch()
        child = self.child_named(run, worker(FAILING))
        entries = read_jsonl(child)
        calls = messages(entries, "assistant")
        self.assertEqual(len(calls), ATTEMPTS)
        for call in calls:
            self.assertEqual(
                (call["stopReason"], call["errorMessage"], call["content"]),
                ("error", "500 injected failure", []),
            )
            self.assertEqual(call["usage"]["totalTokens"], 0)
            self.assertNotIn("responseId", call)
        self.assertEqual(messages(entries, "toolResult"), [])
        display = json.loads((child.parent / "rlm-subagent.json").read_text())
        self.assertEqual(display["status"], "completed")
        parent = run.parent()
        senders = {reply["details"]["from"]["sessionName"] for reply in replies(parent)}
        self.assertEqual(senders, {worker(file) for file, _ in TASKS} - {worker(FAILING)})
        (notice,) = notices(parent)
        child_id = child.parent.name
        self.assertEqual(
            notice["details"],
            {
                "kind": "completed_without_reply",
                "childId": child_id,
                "sessionName": worker(FAILING),
            },
        )
        self.assertEqual(
            notice["content"],
            f"RLM child {worker(FAILING)} ({child_id}) completed without sending a reply",
        )
        answer = expected_answer(run.repo / "shards" / FAILING, TASKS[7][1])
        self.assertEqual(
            run.index(),
            correct_index(run.repo).replace(
                f"- {FAILING}: {answer}\n", f"- {FAILING}: {NO_REPLY}\n"
            ),
        )
        injected = [call for call in served_by(self.proxy) if call.injected]
        self.assertEqual(
            {(call.session, call.depth, call.status) for call in injected}, {(str(child), 1, 500)}
        )
        self.assertEqual(len(injected), TRIES_PER_ATTEMPT * ATTEMPTS)
        self.assert_captured_shapes(run, CHILD_FAIL_CAPTURE)

    def test_a_failed_attempt_is_persisted_and_the_next_one_answers(self):
        self.proxy.inject_failures(worker(FAILING), TRIES_PER_ATTEMPT)
        self.assert_answered(self.launch(), TRIES_PER_ATTEMPT)

    def test_a_failure_the_sdk_retries_leaves_no_message(self):
        self.proxy.inject_failures(worker(FAILING), 1)
        self.assert_answered(self.launch(), 1)

    def test_a_root_whose_every_request_fails_ends_its_run_in_error(self):
        unused = socket.socket()
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        unused.close()
        self.proxy = self.start_proxy(f"http://127.0.0.1:{port}")
        run = self.launch()
        parent = run.parent()
        calls = messages(parent, "assistant")
        self.assertEqual(len(calls), ATTEMPTS)
        for call in calls:
            self.assertEqual(call["stopReason"], "error")
            self.assertRegex(call["errorMessage"], r"^502 proxy: upstream_unreachable")
        self.assertEqual(run.child_files(), [])
        self.assertFalse((run.repo / "combined-index.md").exists())
        events = run.stdout()
        self.assertEqual(events[-1]["type"], "agent_end")
        self.assertEqual(events[-1]["messages"][-1], calls[-1])
        self.assertEqual(len(served_by(self.proxy)), TRIES_PER_ATTEMPT * ATTEMPTS)


class ResidentWitnessedModelTest(WitnessedModelTest):
    drive = RESIDENT


class RepeatedTrialTest(SimulatedAgentCase):
    """What runner.py --trials and --baseline need: a flaky model whose draw is fixed by the
    trial index, and a parent that answers a single-agent prompt itself."""

    def run_with(self, env: dict, prompt: str | None = None) -> Run:
        run = self.make_run(prompt)
        argv = [
            *(sys.executable, str(AGENT), "--mode", "json"),
            *("--daemon-socket", str(run.socket), "--cwd", str(run.repo)),
            *("--session-dir", str(run.dir / "sessions")),
            *("--model", "simulated/flaky", "--", run.prompt),
        ]
        self.start(run, argv, dict(run.env, **env))
        self.addCleanup(self.shut_down_supervisor, run)
        run.process.wait(timeout=DEADLINE_S)
        return run

    def test_flaky_with_probability_1_is_an_oracle_and_0_fabricates_the_first_answer(self):
        good = self.run_with({"SIMULATED_FLAKY_P": "1", "SWARM_FANOUT_TRIAL": "1"})
        self.assertEqual(good.index(), correct_index(good.repo))
        bad = self.run_with({"SIMULATED_FLAKY_P": "0", "SWARM_FANOUT_TRIAL": "1"})
        first, *rest = bad.index().splitlines()[2:]
        file, question = TASKS[0]
        self.assertNotEqual(
            first, f"- {file}: {expected_answer(bad.repo / 'shards' / file, question)}"
        )
        self.assertEqual(rest, correct_index(bad.repo).splitlines()[3:])
        self.assertEqual(len(bad.child_files()), len(TASKS))

    def test_flaky_draws_the_same_for_the_same_trial_index_and_seed(self):
        env = {"SIMULATED_FLAKY_SEED": "7", "SWARM_FANOUT_TRIAL": "3"}
        first, second = self.run_with(env), self.run_with(env)
        right = [run.index() == correct_index(run.repo) for run in (first, second)]
        self.assertEqual(right[0], right[1])

    def test_single_agent_prompt_is_answered_by_the_parent_from_the_files(self):
        lines = "".join(f"- `shards/{file}` | {question}\n" for file, question in TASKS)
        prompt = f"Do not spawn subagents: answer every question yourself.\n\n{lines}"
        run = self.run_with({"SIMULATED_FLAKY_P": "1"}, prompt)
        self.assertEqual(run.index(), correct_index(run.repo))
        self.assertFalse((run.dir / "agent-home" / "rlm-ledger").exists())
        self.assertFalse((run.dir / "session-artifacts").exists())
        self.assertEqual(len(ipython_codes(run.parent())), 1)


if __name__ == "__main__":
    unittest.main()
