"""Benchmark: scoring time and peak memory at the product's limits (not a test).

For each scale, writes a synthetic run dir in the product's formats to a temp dir
(a parent transcript and the root's `--mode json` stdout stream, N children with
their transcripts and display files, a spawn ledger padded with valid rename
records, a combined index) and measures two steps:

- score: `artifacts.collect` + `scorer.score`, the runner's scoring path;
- floor: reading every line of the same JSON files (transcripts, stdout stream,
  display records, ledger) and `json.loads`-ing it.

Time: each of `--repeat` fresh processes times its first score and floor (cold),
then times the two back to back, in pairs, for about a second. The ratio is the
median over all pairs of score / floor: a shared VM's slow spells last longer than
a pair, so they move both times of a pair alike. The times shown are the best.
Memory: one more fresh process per step runs it once, so that its peak RSS
belongs to that step alone.

Targets: score <= 1.5 x floor at every scale; peak memory that does not grow with
transcript size; time linear in input size.

    uv run --locked python bench.py                 # all scales (one to four minutes)
    uv run --locked python bench.py --scales 8,100  # a subset
    uv run --locked python bench.py --no-stream     # without the stdout stream
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from simulated.product import message_updates

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# The product rejects a ledger of more than 32 MiB or 100 000 records (§4 "Strictness");
# the top scale's ledger comes as close to both as it can.
PRODUCT_LEDGER_LIMIT = 32 * 1024 * 1024
# children -> (tool output bytes per child message, ledger records, ledger bytes or
# None for whatever the records take, parent poll turns)
SCALES = {
    8: (2_000, 20, None, 20),
    100: (60_000, 5_000, None, 200),
    1000: (180_000, 100_000, PRODUCT_LEDGER_LIMIT - 64 * 1024, 2_000),
}
ROOT_ID = "01a23676-2c0e-73cc-9a77-4316f379fb77"
STREAM = "stdout.jsonl"
PARENT_NAME = "01a23676-21ac-7333-b829-3ac088ac78fd.jsonl"
USAGE = {
    "input": 4000,
    "output": 70,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 4070,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}
ZERO_USAGE = {**{key: 0 for key in USAGE if key != "cost"}, "cost": USAGE["cost"]}


def dumps(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"))


def iso(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class Transcript:
    """Writes one session transcript in the product's record shapes, on a fake clock."""

    def __init__(self, path: str, header: dict, clock_ms: int, stream_path: str | None = None):
        self.handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.clock = clock_ms
        self.number = 0
        record = {"type": "session", "version": 3, "id": header.pop("id")}
        record.update(timestamp=iso(clock_ms), **header)
        self.handle.write(dumps(record) + "\n")
        # The root's stdout stream, when asked: each message goes to both.
        self.stream = Stream(stream_path, record) if stream_path else None
        self.codes: dict[str, str] = {}

    def entry(self, kind: str, at_ms: int | None = None, **fields) -> str:
        self.clock = at_ms if at_ms is not None else self.clock + 1
        self.number += 1
        entry_id = f"{self.number:08x}"
        self.handle.write(
            dumps({"type": kind, "id": entry_id, "parentId": None, "timestamp": iso(self.clock)})[
                :-1
            ]
            + ","
            + dumps(fields)[1:]
            + "\n"
        )
        return entry_id

    def assistant(self, text: str, call: tuple[str, str] | None = None, at_ms=None) -> str:
        content = [{"type": "text", "text": text}]
        if call:
            content.append(
                {
                    "type": "toolCall",
                    "id": call[0],
                    "name": "ipython",
                    "arguments": {"code": call[1]},
                }
            )
        self.responses = getattr(self, "responses", 0) + 1
        message = {
            "role": "assistant",
            "content": content,
            "api": "openai-completions",
            "provider": "bench",
            "model": "bench",
            "usage": USAGE,
            "stopReason": "toolUse" if call else "stop",
            "timestamp": self.clock,
            "responseId": "chatcmpl-"
            + hashlib.md5(f"{self.handle.name}{self.number}".encode()).hexdigest(),
        }
        if call:
            self.codes[call[0]] = call[1]
        if self.stream:
            self.stream.assistant(message)
        return self.entry("message", at_ms, message=message)

    def user(self, text: str) -> None:
        message = {"role": "user", "content": [{"type": "text", "text": text}]}
        message["timestamp"] = self.clock
        if self.stream:
            self.stream.message(message)
        self.entry("message", message=message)

    def custom(self, custom_type: str, content: str, details: dict) -> None:
        if self.stream:
            message = {"role": "custom", "customType": custom_type, "content": content}
            self.stream.message({**message, "details": details, "timestamp": self.clock})
        self.entry("custom_message", customType=custom_type, content=content, details=details)

    def tool_result(self, call_id: str, output: str, sent: list | None = None, at_ms=None):
        details = {"status": "ok", "sentAgentMessages": sent} if sent else {"status": "ok"}
        message = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": "ipython",
            "content": [{"type": "text", "text": output}],
            "details": details,
            "isError": False,
            "timestamp": self.clock,
        }
        if self.stream:
            self.stream.tool_result(message, self.codes[call_id])
        self.entry("message", at_ms, message=message)

    def close(self) -> None:
        self.handle.close()
        if self.stream:
            self.stream.close()


# The states a child passes through in `rlm_child_update` (captured runs): while the
# spawning cell runs, while it works, and once it has replied.
_LIVE = {"repliedSinceTask": False, "activeSessionId": "be08203c0cd6"}
_ANSWERED = {
    **_LIVE,
    "repliedSinceTask": True,
    "answerPreview": "Replied.",
    "toolUseCount": 1,
    "tokenCount": 4270,
}
CHILD_PHASES = {
    "spawned": [("queued", {}), ("running", _LIVE)],
    "working": [
        ("running", {**_LIVE, "activity": {"kind": "waiting"}}),
        ("running", {**_LIVE, "activity": {"kind": "writing"}, "answerPreview": "Counting."}),
        ("running", {**_LIVE, "answerPreview": "Counting.", "tokenCount": 4054}),
        ("running", {**_LIVE, "tokenCount": 4054, "toolUseCount": 1}),
    ],
    "replied": [
        ("running", _ANSWERED),
        ("done", {**_ANSWERED, "durationMs": 6123}),
        ("done", {**_ANSWERED, "durationMs": 6123, "recap": ""}),
    ],
}


class Stream:
    """Writes the root's `--mode json` stdout (contract §7) in the product's event shapes.

    Every real run leaves this file and the scorer reads all of it; in the captured
    runs it is 7 to 9.5 times the size of the parent transcript. Content is streamed as
    coarsely as the captured runs' scripted model streams it (a start, two deltas and
    an end per content part, each update carrying the message so far), and each child
    gets one `rlm_child_update` per state it passes through (the captures hold about
    26 per child, repeats of these). A real model streams finer, so a real stream is
    larger still.
    """

    def __init__(self, path: str, header: dict):
        self.handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.run: list[dict] = []
        self.pending: list[dict] = []
        self.turn_message: dict = {}  # the assistant message a turn_end repeats
        self.write(header)

    def write(self, event: dict) -> None:
        self.handle.write(dumps(event) + "\n")

    def agent_start(self) -> None:
        self.run = []
        self.write({"type": "agent_start"})

    def agent_end(self) -> None:
        self.write({"type": "agent_end", "messages": self.run})

    def message(self, message: dict) -> None:
        self.write({"type": "message_start", "message": message})
        self.write({"type": "message_end", "message": message})
        self.run.append(message)

    def assistant(self, message: dict) -> None:
        self.write({"type": "turn_start"})
        empty = {key: value for key, value in message.items() if key != "responseId"}
        empty.update(content=[], usage=ZERO_USAGE, stopReason="stop")
        self.write({"type": "message_start", "message": empty})
        for update in message_updates(empty, message):
            self.write(update)
        self.write({"type": "message_end", "message": message})
        self.run.append(message)
        self.turn_message = message

    def tool_result(self, message: dict, code: str) -> None:
        call = {"toolCallId": message["toolCallId"], "toolName": "ipython", "args": {"code": code}}
        result = {"content": message["content"], "details": message["details"]}
        partial = {"content": message["content"], "details": {"status": "ok"}}
        self.write({"type": "tool_execution_start", **call})
        self.write({"type": "tool_execution_update", **call, "partialResult": partial})
        self.flush()  # what the children did while the cell ran
        end = {key: value for key, value in call.items() if key != "args"}
        end.update(result={**result, "isError": False}, isError=False)
        self.write({"type": "tool_execution_end", **end})
        self.message(message)
        self.write({"type": "turn_end", "message": self.turn_message, "toolResults": [message]})

    def children(self, states: list[dict], phase: str) -> None:
        """Queue each child's updates for one phase of its life (CHILD_PHASES)."""
        for status, progress in CHILD_PHASES[phase]:
            for state in states:
                child = {**state, "status": status, **progress}
                self.pending.append({"type": "rlm_child_update", "child": child})

    def flush(self) -> None:
        for event in self.pending:
            self.write(event)
        self.pending = []

    def reply_arrives(self, text: str) -> None:
        """A delivered reply ends the root's run and starts the next (contract §7)."""
        self.flush()
        self.agent_end()
        actions = {"queuedCount": 1, "steering": [f"Agent message received: {text}"]}
        self.write({"type": "session_action_update", "actions": {**actions, "followUps": []}})
        self.agent_start()

    def close(self) -> None:
        self.handle.close()


def child_names(index: int, start: int) -> tuple[str, str, str, int]:
    """childId, session id, worker name and spawn time of the index-th child."""
    session_id = f"01a23676-{index:04x}-7000-8000-{index:012x}"
    return f"sub-{index:08x}", session_id, f"worker-{index:04d}", start + 20 + index * 5


def ledger_lines(sessions: str, parent_path: str, edges: list, records: int) -> Iterator[str]:
    """The ledger: meta, one spawn per (childId, child file, name, at) edge, then
    renames that keep each child's name, up to `records` lines in all."""
    yield dumps({"v": 1, "op": "meta", "at": iso(edges[0][3]), "sessionsDir": sessions}) + "\n"
    for child_id, child_path, worker, at_ms in edges:
        record = {"v": 1, "op": "spawn", "at": iso(at_ms), "childId": child_id}
        record.update(parent=parent_path, child=child_path, depth=1, name=worker)
        yield dumps(record) + "\n"
    last = iso(edges[-1][3])
    for index in range(max(0, records - len(edges) - 1)):
        child_id, child_path, worker, _ = edges[index % len(edges)]
        record = {"v": 1, "op": "rename", "at": last, "childId": child_id}
        yield dumps({**record, "child": child_path, "name": worker}) + "\n"


def run_dir_for(parent: str, children: int, records: int, ledger_bytes: int | None) -> str:
    """A run dir path under `parent` whose ledger will fill `ledger_bytes` (just under
    it): every path in the ledger starts with the run dir, so its length sets the
    ledger's size. None: a plain `run`."""
    parent = os.path.realpath(parent)
    if ledger_bytes is None:
        return os.path.join(parent, "run")

    def size(run_dir: str) -> int:
        sessions = os.path.join(run_dir, "sessions")
        artifacts_dir = os.path.join(run_dir, "session-artifacts", ROOT_ID)
        edges = []
        for index in range(children):
            child_id, session_id, worker, at_ms = child_names(index, 0)
            child_path = os.path.join(artifacts_dir, child_id, session_id + ".jsonl")
            edges.append((child_id, child_path, worker, at_ms))
        parent_path = os.path.join(sessions, PARENT_NAME)
        lines = ledger_lines(sessions, parent_path, edges, records)
        return sum(len(line.encode()) for line in lines)

    base = os.path.join(parent, "run")
    fixed = size(base)
    per_char = size(base + "-") - fixed
    pad = max(0, (ledger_bytes - fixed) // per_char)
    if pad > 200:  # a path component has at most 255 bytes
        raise ValueError(f"a {ledger_bytes}-byte ledger needs longer paths than a dir name gives")
    return base + "-" * pad


def make_run(
    root: str,
    children: int,
    output_bytes: int,
    ledger_records: int,
    polls: int,
    stream: bool = True,
):
    """Write an honest run dir (it scores resolved, every integrity check passing).

    Returns the fixture manifest path and the JSON files the floor reads: every
    transcript, display record, stdout stream and ledger the scorer reads (the
    ledger last). `stream=False` leaves out the stdout stream that every real run has.
    """
    repo, sessions = os.path.join(root, "repo"), os.path.join(root, "sessions")
    home = os.path.join(root, "agent-home")
    for path in (repo, sessions, os.path.join(home, "rlm-ledger")):
        os.makedirs(path)
    sessions = os.path.realpath(sessions)
    repo = os.path.realpath(repo)
    parent_path = os.path.join(sessions, PARENT_NAME)
    artifacts_dir = os.path.join(os.path.dirname(sessions), "session-artifacts", ROOT_ID)
    filler = "x" * output_bytes
    start = 1_796_210_000_000
    stream_path = os.path.join(root, STREAM) if stream else None
    header = {"id": ROOT_ID, "cwd": repo, "rlmDepth": 0, "git": {"branch": "master"}}
    parent = Transcript(parent_path, header, start, stream_path)
    if parent.stream:
        parent.stream.agent_start()
    parent.user("Process every shard: one RLM child per shard, then write combined-index.md.")
    spawn_code = "for shard in shards:\n    await rlm(task(shard), name=worker(shard))\n"
    parent.assistant("Spawning.", ("call_spawn", spawn_code), at_ms=start + 10)
    shards, spawns, files = [], [], [parent_path] + ([stream_path] if stream_path else [])
    states = []  # each child as `rlm_child_update` shows it
    for index in range(children):
        child_id, session_id, worker, at_ms = child_names(index, start)
        child_dir = os.path.join(artifacts_dir, child_id)
        os.makedirs(child_dir)
        child_path = os.path.join(child_dir, session_id + ".jsonl")
        files.append(child_path)
        header = {"id": session_id, "cwd": repo, "parentSession": parent_path, "rlmDepth": 1}
        child = Transcript(child_path, header, at_ms - 3)
        child.entry("session_info", name=worker)
        task = {
            "id": f"spawn:{child_id}",
            "message": "t",
            "from": {"sessionId": ROOT_ID, "activeSessionId": "c39728fce51d"},
            "fromRelationship": "parent",
        }
        child.entry("custom_message", customType="agent_message", content="t", details=task)
        reply = {"id": f"agentmsg_{index:08d}", "message": f"s{index:04d}.jsonl: {index}"}
        child.assistant("Answering.", (f"call_c{index}", "await agent_message.send(...)"))
        child.tool_result(f"call_c{index}", filler, sent=[reply])
        child.assistant("Done.")
        child.close()
        display = {
            "type": "rlm_subagent",
            "childId": child_id,
            "sessionName": worker,
            "sessionDir": child_dir,
            "sessionFile": child_path,
            "spawnCode": spawn_code,
            "status": "completed",
            "createdAt": at_ms - 1,
        }
        display_path = os.path.join(child_dir, "rlm-subagent.json")
        with open(display_path, "w", encoding="utf-8") as handle:
            handle.write(dumps(display))
        files.append(display_path)
        for _ in range(2):
            parent.entry(
                "child_usage_attributed",
                targetId="00000001",
                childUsage=USAGE,
                aggregateUsage=USAGE,
                origin="spawn_task",
            )
        shards.append(
            {"file": f"s{index:04d}.jsonl", "worker": worker, "question": "q", "expected": index}
        )
        spawns.append((child_id, child_path, worker, session_id, at_ms, reply))
        state = {"id": child_id, "sessionName": worker, "model": "bench/bench", "label": "t"}
        states.append({**state, "sessionDir": child_dir})
    clock = start + 40 + children * 5
    if parent.stream:
        parent.stream.children(states, "spawned")  # shown while the spawning cell runs
    parent.tool_result("call_spawn", "spawned", at_ms=clock)
    # Replies arrive spread over the polling turns, each starting a new run (§7).
    delivered = 0
    for turn in range(polls + 1):
        if turn < polls:
            parent.assistant(f"poll {turn}", (f"call_p{turn}", "await asyncio.sleep(2)"))
            if parent.stream and turn == 0:
                parent.stream.children(states, "working")
            parent.tool_result(f"call_p{turn}", filler[: output_bytes // 10])
        due = children if turn == polls else (turn + 1) * children // (polls + 1)
        for index in range(delivered, due):
            _, _, worker, session_id, _, reply = spawns[index]
            details = {
                **reply,
                "from": {"sessionId": session_id, "sessionName": worker},
                "fromRelationship": "child",
            }
            if parent.stream:
                parent.stream.children([states[index]], "replied")
                parent.stream.reply_arrives(reply["message"])
            parent.custom("agent_message", content="r", details=details)
        delivered = due
    if parent.stream:
        parent.stream.agent_end()
    parent.close()
    ledger_name = hashlib.sha256(sessions.encode()).hexdigest()[:16] + ".jsonl"
    ledger = os.path.join(home, "rlm-ledger", ledger_name)
    files.append(ledger)
    with open(ledger, "w", encoding="utf-8") as handle:
        edges = [(child_id, path, worker, at_ms) for child_id, path, worker, _, at_ms, _ in spawns]
        handle.writelines(ledger_lines(sessions, parent_path, edges, ledger_records))
    with open(os.path.join(repo, "combined-index.md"), "w", encoding="utf-8") as handle:
        handle.writelines(f"- {shard['file']}: {shard['expected']}\n" for shard in shards)
    manifest = os.path.join(root, "fixture.json")
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump({"name": "bench", "artifact": "combined-index.md", "shards": shards}, handle)
    return manifest, files


def measure_score(run_dir: str, manifest: str) -> dict:
    from artifacts import collect
    from fixture import load_manifest
    from scorer import score

    fixture = load_manifest(manifest)
    began = time.perf_counter()
    verdict = score(fixture, collect(run_dir, fixture.artifact))
    elapsed = time.perf_counter() - began
    return {"seconds": elapsed, "resolved": verdict.resolved}


def measure_floor(files: list[str]) -> dict:
    began = time.perf_counter()
    lines = 0
    for path in files:
        with open(path, "rb") as handle:
            for line in handle:
                json.loads(line)
                lines += 1
    return {"seconds": time.perf_counter() - began, "lines": lines}


# Within one process, score and floor are timed in back-to-back pairs until this
# much time has passed (at least MIN_PAIRS, at most MAX_PAIRS pairs). Each pair's
# ratio compares the two under the same conditions: on a shared VM a slow spell
# lasts longer than one pair, so it moves both of a pair's times alike.
WARM_BUDGET_S = 1.0
MIN_PAIRS = 2
MAX_PAIRS = 100


def child_main(argv: list[str]) -> int:
    """One fresh process; prints JSON with the process's own peak RSS.

    `pair`: the first (cold) score and floor, then warm pairs, alternating which of
    the two runs first. `score` or `floor`: that step once, for its peak RSS alone.
    """
    kind = argv[0]
    with open(argv[1], encoding="utf-8") as handle:
        payload = json.load(handle)

    def step(name: str) -> dict:
        if name == "score":
            return measure_score(payload["run_dir"], payload["manifest"])
        return measure_floor(payload["files"])

    if kind != "pair":
        result = step(kind)
    else:
        score, floor = step("score"), step("floor")
        result = {
            "resolved": score["resolved"],
            "lines": floor["lines"],
            "cold": [score["seconds"], floor["seconds"]],
            "pairs": [],
        }
        began = time.perf_counter()
        while len(result["pairs"]) < MIN_PAIRS or (
            len(result["pairs"]) < MAX_PAIRS and time.perf_counter() - began < WARM_BUDGET_S
        ):
            if len(result["pairs"]) % 2:
                floor_s = step("floor")["seconds"]
                score_s = step("score")["seconds"]
            else:
                score_s = step("score")["seconds"]
                floor_s = step("floor")["seconds"]
            result["pairs"].append([score_s, floor_s])
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))
    return 0


def run_measurement(kind: str, payload: dict) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(payload, handle)
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--measure", kind, handle.name],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        os.unlink(handle.name)
    return json.loads(done.stdout)


def _positive(text: str) -> int:
    if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _scales(text: str) -> list[int]:
    """`8,100,1000`: child counts, each a positive integer."""
    return [_positive(item) for item in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--measure":
        return child_main(args[1:])
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scales",
        type=_scales,
        default=list(SCALES),
        help="children per scale, e.g. 8,100 (default: 8,100,1000)",
    )
    parser.add_argument(
        "--repeat",
        type=_positive,
        default=5,
        help="fresh processes that time score and floor in pairs (default: 5)",
    )
    parser.add_argument(
        "--no-stream",
        action="store_true",
        help="leave out the root's stdout stream, which every real run has, to time "
        "the transcripts and the ledger alone",
    )
    options = parser.parse_args(args)
    rows = []
    for children in options.scales:
        output_bytes, ledger_records, ledger_bytes, polls = SCALES.get(
            children, (10_000, children * 10, None, children)
        )
        with tempfile.TemporaryDirectory(prefix="sf-bench-") as tmp:
            run_dir = run_dir_for(tmp, children, ledger_records, ledger_bytes)
            manifest, files = make_run(
                run_dir, children, output_bytes, ledger_records, polls, not options.no_stream
            )
            size = sum(os.path.getsize(path) for path in files)
            ledger_size = os.path.getsize(files[-1])
            stream_size = sum(os.path.getsize(path) for path in files if path.endswith(STREAM))
            payload = {"run_dir": run_dir, "manifest": manifest, "files": files}
            runs = [run_measurement("pair", payload) for _ in range(options.repeat)]
            score_rss = run_measurement("score", payload)["peak_rss_mib"]
            floor_rss = run_measurement("floor", {"files": files})["peak_rss_mib"]
        pairs = [pair for run in runs for pair in run["pairs"]]
        per_process = [statistics.median(s / f for s, f in run["pairs"]) for run in runs]
        rows.append(
            {
                "children": children,
                "input_mib": round(size / 2**20, 1),
                "stream_mib": round(stream_size / 2**20, 1),
                "ledger_records": ledger_records,
                "ledger_mib": round(ledger_size / 2**20, 1),
                "lines": runs[0]["lines"],
                "score_s": round(min(s for s, _ in pairs), 4),
                "floor_s": round(min(f for _, f in pairs), 4),
                "ratio": round(statistics.median(s / f for s, f in pairs), 2),
                "ratio_range": [round(min(per_process), 2), round(max(per_process), 2)],
                "pairs": len(pairs),
                "cold_score_s": round(min(run["cold"][0] for run in runs), 4),
                "cold_floor_s": round(min(run["cold"][1] for run in runs), 4),
                "score_peak_rss_mib": round(score_rss, 1),
                "floor_peak_rss_mib": round(floor_rss, 1),
                "resolved": all(run["resolved"] for run in runs),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
