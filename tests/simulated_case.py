"""What the tests of the simulated agent share: the captured runs they are held against, a
fixture of the test's own with answers recomputed by its own evaluator, a daemon client, a
run of the stand-in in a temp dir (`Run`, `SimulatedAgentCase`) and readers of what it left.
Not a test module: `tests/test_simulated_*.py` import it.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from dataclasses import dataclass
from pathlib import Path

from swarm_fanout.shell import rundir
from tests import temp_dir
from tests.builders import compact

REPO = Path(__file__).resolve().parents[1]
AGENT = REPO / "swarm_fanout" / "simulated" / "agent.py"
REAL_RUNS = REPO / "tests" / "data" / "real-runs"
MAIN_CAPTURE = REAL_RUNS / "main"
ENDTURN_CAPTURE = REAL_RUNS / "endturn-oneshot"
CHILD_FAIL_CAPTURE = REAL_RUNS / "child-fail"
RESIDENT_WIRE = REAL_RUNS / "resident" / "daemon-wire.jsonl"
NEEDS_PROC = unittest.skipUnless(Path("/proc/self/stat").exists(), "needs Linux /proc")
# A guard against a hang, not a measure: long enough for a loaded 2-core box, where starting
# the stand-in and its daemon took over 10 s beside two CPU hogs and the rest of the suite.
DEADLINE_S = 60
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

    Lines are split on \\n only (contract §8.1). session_event envelopes that arrive while a
    response is awaited are kept, in order.
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
        self.hello = self._read()

    @property
    def events(self) -> list[dict]:
        return [envelope["event"] for envelope in self.envelopes]

    def send(self, message: dict) -> dict:
        """Sends one command and returns its response."""
        self._file.write(json.dumps(message).encode() + b"\n")
        self._file.flush()
        while True:
            line = self._read()
            if line.get("type") == "response" and line.get("id") == message["id"]:
                return line
            if line.get("type") == "session_event":
                self.envelopes.append(line)

    def request(self, body: dict) -> dict:
        """Sends a command under a fresh id and returns its response."""
        return self.send(command(body, f"t-{next(self._ids)}"))

    def call(self, body: dict) -> dict | None:
        """A command that must succeed; returns its data."""
        response = self.request(body)
        if response.get("success") is not True:
            raise AssertionError(f"{body['type']} failed: {response}")
        return response.get("data")

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


def assert_captured_shapes(test, run_dir: Path, capture: Path, families=RECORD_KINDS) -> dict:
    """Every record kind written in `run_dir` (by the stand-in, or the tests' builders) exists
    in the capture, each dict in it with keys the capture has in that order; the run's records
    by family."""
    ours, captured = run_records(run_dir), run_records(capture)
    for family, kind in families.items():
        our_shapes, captured_shapes = shapes(ours[family], kind), shapes(captured[family], kind)
        for record_kind, found in our_shapes.items():
            with test.subTest(family=family, kind=record_kind):
                test.assertIn(record_kind, captured_shapes)
                test.assertEqual(found - captured_shapes[record_kind], set())
    return ours


_SHARED_LAUNCHES: dict[tuple[str, str], Run] = {}


class SimulatedAgentCase(unittest.TestCase):
    """Runs the stand-in as the runner drives prime-agent, in its own process group with the
    runner's env and layout: one-shot (`--mode json`) or resident (`--mode daemon`, then
    create, attach, prompt, wait_for_headless_completion, shutdown on a second connection).
    """

    drive = ONESHOT
    # While a shared launch starts: what would end with the test ends with the module.
    _for_the_module = False

    def addCleanup(self, function, /, *args, **kwargs):
        if self._for_the_module:
            unittest.addModuleCleanup(function, *args, **kwargs)
        else:
            super().addCleanup(function, *args, **kwargs)

    def shared_launch(self, behaviour: str = "oracle", drive: str | None = None) -> Run:
        """`launch(behaviour, drive=drive)`'s Run for a run that tests only read, never
        change: each behaviour and drive runs once per test process, and what the run leaves
        to end (its supervisor or daemon, its temp dir) ends when the module's tests end. A
        test that talks to the run's processes, writes into its dir, or needs a run of its
        own (another prompt, env or cwd) uses launch."""
        key = (behaviour, drive or self.drive)
        if key not in _SHARED_LAUNCHES:
            if not _SHARED_LAUNCHES:
                unittest.addModuleCleanup(_SHARED_LAUNCHES.clear)
            self._for_the_module = True
            try:
                _SHARED_LAUNCHES[key] = self.launch(behaviour, drive=key[1])
            finally:
                self._for_the_module = False
        return _SHARED_LAUNCHES[key]

    def make_run(self, prompt: str | None = None, session_dir_env: bool = True) -> Run:
        run_dir = Path(temp_dir(self))
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
        drive: str | None = None,
    ) -> Run:
        run = self.make_run(prompt, session_dir_env)
        if (drive or self.drive) == RESIDENT:
            return self.drive_resident(run, behaviour)
        argv = [
            *(sys.executable, str(AGENT), "--mode", "json"),
            *("--daemon-socket", str(run.socket)),
            *("--cwd", str(run.repo)),
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

    def drive_resident(self, run: Run, behaviour: str) -> Run:
        """The resident drive; once quiescent, stdout.jsonl is written as the runner writes
        it (line 1 = the first line of sessionFile, then the events) and the daemon is shut
        down."""
        client = self.start_daemon(run)
        session = client.call(run.create_command(behaviour))
        active_id = session["activeSessionId"]
        client.call(attach_command(active_id, client))
        client.call({"type": "prompt", "activeSessionId": active_id, "message": run.prompt})
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

    def forced_shutdown(self, run: Run) -> int:
        """shutdown{force:true} on a new connection, answered as the product answers it; the
        supervisor's pid."""
        with DaemonClient(run.socket) as daemon:
            response = daemon.send(command({"type": "shutdown", "force": True}, "t-stop"))
        self.assertEqual(response, SHUTDOWN_DONE)
        return daemon.hello["supervisorPid"]

    def shut_down_supervisor(self, run: Run) -> None:
        """The product's stop sequence (contract §2): hello, shutdown{force:true}, pid gone."""
        if run.socket.exists():
            pid = self.forced_shutdown(run)
            wait_for(lambda: process_gone(pid), f"supervisor {pid} to exit")
            self.assertFalse(run.socket.exists())

    def shut_down_daemon(self, run: Run) -> None:
        """The daemon, shut down, exits 0, its socket gone."""
        if run.process.poll() is None:
            pid = self.forced_shutdown(run)
            self.assertEqual(run.process.wait(timeout=DEADLINE_S), 0)
            self.assertTrue(process_gone(pid))
            self.assertFalse(run.socket.exists())


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
