"""Builders for run dirs in the product's on-disk formats, to keep scorer tests short;
tools/bench.py builds its synthetic runs with them too.

Record shapes follow the captured real runs (tests/data/real-runs); the test
`test_real_runs.BuilderFidelityTest` pins every builder record to the key sets of
its captured counterpart, and `test_bench` the stdout stream's events to the capture's.

The simulated agent (simulated/) writes the same formats with writers of its own, on
purpose: it stands in for the product, and were it to share these builders a mistake in
one would hide in both.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from swarm_fanout.evidence.fixture import Fixture, Shard
from swarm_fanout.evidence.runpaths import RunPaths, display_file
from swarm_fanout.ledger import ledger_path

EPOCH_MS = 1_796_209_200_000  # 2026-12-02T11:00:00.000Z


def iso(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"


def small_fixture(root: str = "/nonexistent") -> Fixture:
    """Three shards with distinct answers; workers named as the real fixtures name them."""
    return Fixture(
        name="small",
        artifact="combined-index.md",
        shards=(
            Shard("a.jsonl", "worker-a", "How many records does this shard contain?", 11),
            Shard("b.jsonl", "worker-b", "How many records does this shard contain?", 22),
            Shard("c.jsonl", "worker-c", "How many records does this shard contain?", 33),
        ),
        root=root,
    )


TASK = "answer your shard"
# A child's cell that works the answer out from its shard and sends it in one go (its result
# records the message sent, §5 "Child transcripts").
WORK_CELL = "answer = count({path!r})\nawait agent_message.send(answer, receiver_role='parent')\n"


def work_cell(shard_file: str) -> str:
    """The default child cell for the shard named `shard_file`."""
    return WORK_CELL.format(path=f"shards/{shard_file}")


def compact(record: dict) -> str:
    """A record as the product writes it (JSON.stringify): no spaces, UTF-8 unescaped."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def usage(input_tokens: int, output_tokens: int) -> dict:
    zero = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
    tokens = {"input": input_tokens, "output": output_tokens, "cacheRead": 0, "cacheWrite": 0}
    return {**tokens, "totalTokens": input_tokens + output_tokens, "cost": zero}


@dataclass
class Child:
    child_id: str
    name: str
    session_id: str
    path: str
    depth: int = 1
    # The child's ipython call that sends its reply (its toolResult holds the receipt).
    call_id: str | None = None


class RunBuilder:
    """A run dir written the way a one-shot run with PRIME_AGENT_SESSION_DIR writes it;
    with `stream`, the root's `--mode json` stdout stream too (§7)."""

    def __init__(self, root: str, *, parent_cwd: str | None = None, stream: bool = False):
        self.paths = RunPaths.of(os.path.realpath(root))
        self.clock = EPOCH_MS
        for path in (self.paths.sessions, self.paths.agent_home, self.paths.repo):
            os.makedirs(path, exist_ok=True)
        self.root_id = _uuid7()
        # In one-shot runs the file stem is not the header id (contract §1 fact 2).
        self.parent_path = os.path.join(self.paths.sessions, _uuid7() + ".jsonl")
        self.ledger = ledger_path(self.paths.agent_home, self.paths.sessions)
        self.last_id: str | None = None
        # The parent's ipython call still running: (toolCall id, code).
        self.running: tuple[str, str] | None = None
        self.cwd = parent_cwd or self.paths.repo
        # worker name -> its shard's file, for the default child cell (fan_out learns them).
        self.shard_files: dict[str, str] = {}
        header = self._header(self.root_id, 0)
        self._append_parent(header, entry=False)
        self.stream = Stream(self.paths.stdout, header) if stream else None
        self.user_message("Do the fan-out.")

    def now(self, step: int = 10) -> str:
        self.clock += step
        return iso(self.clock)

    def _header(self, session_id: str, depth: int, **parent: str) -> dict:
        """A transcript's session header; a child's names its `parentSession` (§5)."""
        header = {"type": "session", "version": 3, "id": session_id, "timestamp": self.now()}
        return {**header, "cwd": self.cwd, **parent, "rlmDepth": depth, "git": {"branch": "main"}}

    def _child_message(self, content: str, details: dict) -> dict:
        """An agent message as it lands in a child's transcript (§5)."""
        message = {"type": "custom_message", "customType": "agent_message", "content": content}
        ids = {"id": secrets.token_hex(4), "parentId": None, "timestamp": self.now()}
        return {**message, "display": True, "details": details, **ids}

    # --- parent transcript ---------------------------------------------------

    def _append_parent(self, record: dict, entry: bool = True) -> None:
        if entry:
            ids = {"id": secrets.token_hex(4), "parentId": self.last_id, "timestamp": self.now()}
            self.last_id = ids["id"]
            # The product writes the ids last in custom_message lines, right after
            # `type` everywhere else (captured runs, README fact 8).
            if record["type"] == "custom_message":
                record.update(ids)
            else:
                record = {"type": record.pop("type"), **ids, **record}
        _append(self.parent_path, compact(record))

    def user_message(self, text: str) -> None:
        message = {
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "timestamp": self.clock,
        }
        self._append_parent({"type": "message", "message": message})
        if self.stream:
            self.stream.message(message)

    def assistant(self, text: str, tokens: tuple[int, int] = (100, 10), code: str | None = None):
        """An assistant message; with `code`, an ipython cell that runs until `tool_result`."""
        message = assistant_message(text, tokens, code)
        self._append_parent({"type": "message", "message": message})
        if code is not None:
            self.running = (message["content"][-1]["id"], code)
        if self.stream:
            self.stream.assistant(message)

    def tool_result(self, output: str = "ok\n", status: str = "ok") -> None:
        """The running cell returns (contract §5: its toolResult); `status` "error" for a
        cell that raised (its own exception gives `isError: false`)."""
        call_id, code = self.running
        self.running = None
        message = tool_result(call_id, output, status=status)
        self._append_parent({"type": "message", "message": message})
        if self.stream:
            self.stream.tool_result(message, code)

    def _custom_message(self, custom_type: str, content: str, details: dict) -> None:
        record = {"type": "custom_message", "customType": custom_type, "content": content}
        self._append_parent({**record, "display": True, "details": details})
        if self.stream:
            message = {"role": "custom", "customType": custom_type, "content": content}
            message.update(display=True, details=details, timestamp=self.clock)
            self.stream.message(message)

    def failed_call(self, error: str = "500 Internal error") -> None:
        """A model call of the parent that failed: its own message, stopReason error, an
        errorMessage, no responseId and no usage (contract §5 "Retries")."""
        self._append_parent({"type": "message", "message": failed_message(error)})

    @contextlib.contextmanager
    def cell(self, code: str, text: str = "Spawning."):
        """Spawns inside run in this parent cell: `spawnCode` is its code (contract §6)."""
        self.assistant(text, code=code)
        yield
        self.tool_result()

    def usage_attributed(self, usage_record: dict) -> None:
        """The parent's copy of one child model call's usage (contract §5)."""
        record = {"type": "child_usage_attributed", "targetId": self.last_id}
        usage = {"childUsage": usage_record, "aggregateUsage": usage_record}
        self._append_parent({**record, **usage, "origin": "spawn_task"})

    # --- children -------------------------------------------------------------

    def spawn(
        self,
        name: str,
        *,
        write_transcript: bool = True,
        child_path: str | None = None,
        parent_path: str | None = None,
        depth: int = 1,
        tokens: tuple[int, int] = (50, 5),
        task: str = TASK,
        work: str | None = None,
        before: tuple[tuple[str, str], ...] = (),
        failures: int = 0,
    ) -> Child:
        """A child admitted by the product: transcript, display file, ledger line and
        the parent's usage entry, all inside a parent cell (its own unless one runs).
        The child gets `task`; its first `failures` model calls fail (HTTP 500), then it
        runs the `before` cells, each (code, printed output[, its result's details]), then
        the `work` cell whose result `reply` writes (by default one that counts the worker's
        shard, as `shard_files` names it, else `<name>.jsonl`)."""
        own_cell = self.cell(f"h = await rlm({task!r}, name={name!r})")
        with own_cell if self.running is None else contextlib.nullcontext():
            child_id = "sub-" + secrets.token_hex(4)
            session_id = _uuid7()
            # The product puts a child under its own parent's artifacts (contract §3).
            parent_dir = self.root_id if parent_path is None else _stem(parent_path)
            child_dir = os.path.join(self.paths.children_root(parent_dir), child_id)
            path = child_path or os.path.join(child_dir, session_id + ".jsonl")
            child = Child(child_id, name, session_id, path, depth)
            if write_transcript:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                calls = self._write_child(
                    child, tokens, parent_path or self.parent_path, task, work, before, failures
                )
            if not os.path.exists(self.ledger):
                meta = {"v": 1, "op": "meta", "at": iso(self.clock + 1)}
                self.ledger_line({**meta, "sessionsDir": self.paths.sessions})
            edge = {"parent": parent_path or self.parent_path, "child": path, "depth": depth}
            self._ledger_record("spawn", child_id, **edge, name=name)
            if write_transcript and parent_path is None:
                for call in calls:
                    self.usage_attributed(call["usage"])
            if self.stream:
                # Shown while the spawning cell runs, then while the child works.
                self.stream.children([_child_state(child)], "spawned")
                self.stream.children([_child_state(child)], "working")
            return child

    def _write_child(
        self,
        child: Child,
        tokens: tuple[int, int],
        parent_path: str,
        task_text: str = "",
        work_code: str = "",
        before: tuple[tuple[str, str], ...] = (),
        failures: int = 0,
    ) -> list[dict]:
        """Header, task, the `before` cells and the model call that sends the reply;
        returns the model calls."""
        task_text = task_text or TASK
        work_code = work_code or work_cell(self.shard_files.get(child.name, f"{child.name}.jsonl"))
        header = self._header(child.session_id, child.depth, parentSession=parent_path)
        details = {
            "id": "spawn:" + child.child_id,
            "message": task_text,
            "from": {"sessionId": self.root_id, "activeSessionId": "c39728fce51d"},
            "fromRelationship": "parent",
        }
        task = self._child_message("[task from parent]\n\n" + task_text, details)
        lines = [compact(header), compact(task)]
        for _ in range(failures):
            # A failed attempt is its own message: stopReason error, no responseId, no
            # usage (§5 "Retries"); the parent attributes no usage for it.
            lines.append(self._child_entry(failed_message("500 Internal error")))
        calls = []
        for code, output, *details in before:
            call = assistant_message("Looking.", tokens, code)
            result = tool_result(
                call["content"][-1]["id"], output, **(details[0] if details else {})
            )
            calls.append(call)
            lines += [self._child_entry(call), self._child_entry(result)]
        work = assistant_message("Working.", tokens, work_code)
        calls.append(work)
        child.call_id = work["content"][-1]["id"]
        lines.append(self._child_entry(work, parent_id=task["id"]))
        with open(child.path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        display = {
            "type": "rlm_subagent",
            "childId": child.child_id,
            "sessionName": child.name,
            "sessionDir": os.path.dirname(child.path),
            "sessionFile": child.path,
            "rlmMaxDepth": 1,
            "rlmParentNodeId": child.child_id,
            "prompt": task_text,
            "spawnCode": self.running[1],
            "model": {"provider": "fake", "modelId": "fake-rlm"},
            "status": "completed",
            "createdAt": self.clock,
            "updatedAt": iso(self.clock),
        }
        with open(display_file(os.path.dirname(child.path)), "w", encoding="utf-8") as handle:
            json.dump(display, handle)
        return calls

    def reply(
        self,
        child: Child,
        message: str,
        *,
        session_id: str | None = None,
        label: str | None = None,
        sent: bool = True,
        output: str | None = None,
    ) -> None:
        """A child's reply as the product lands it in the parent (contract §6); `sent`
        also writes the receipt the child's own transcript keeps (§5), as the product does,
        in the result of the child's cell, whose printed `output` is the reply unless given."""
        sender = session_id or child.session_id
        name = label or child.name
        reply_id = f"agentmsg_{uuid.uuid4()}"
        if sent and child.call_id is not None:
            self._receipt(child, reply_id, message, f"{message}\n" if output is None else output)
        if self.stream:
            # A delivered reply ends the root's run and starts the next (contract §7).
            self.stream.children([_child_state(child)], "replied")
            self.stream.reply_arrives(message)
        sent_by = {"activeSessionId": "6ba7fa8dabbf", "sessionId": sender, "sessionName": name}
        target = {"activeSessionId": "c39728fce51d", "sessionId": self.root_id}
        details = {
            "id": reply_id,
            "message": message,
            "from": {**sent_by, "runtimeKind": "subagent", "clientId": "agent"},
            "fromRelationship": "child",
            "target": {**target, "runtimeKind": "top-level"},
        }
        text = f"[from child:{name}]\nAgent-to-agent message received.\n\n{message}"
        self._custom_message("agent_message", text, details)

    def _receipt(self, child: Child, reply_id: str, message: str, output: str) -> None:
        receipt = {"id": reply_id, "message": message, "deliveryStatus": "queued"}
        target = {"activeSessionId": "c39728fce51d", "sessionId": self.root_id}
        receipt.update(receiverRole="parent", target=target)
        self._append_child(child, tool_result(child.call_id, output, sentAgentMessages=[receipt]))

    def child_turn(self, child: Child, text: str = "Done.", tokens: tuple[int, int] = (50, 5)):
        """One more model call of the child, with no cell (its last, say, after its reply);
        the parent keeps a copy of its usage (contract §5)."""
        message = assistant_message(text, tokens, None)
        self._append_child(child, message)
        self.usage_attributed(message["usage"])

    def _child_entry(self, message: dict, parent_id: str | None = None) -> str:
        """A message line of a child's transcript."""
        entry = {"type": "message", "id": secrets.token_hex(4), "parentId": parent_id}
        return compact({**entry, "timestamp": self.now(), "message": message})

    def _append_child(self, child: Child, message: dict) -> None:
        _append(child.path, self._child_entry(message))

    def hears(
        self, child: Child, sender: Child, message: str, message_id: str | None = None
    ) -> None:
        """An agent message from a sibling lands in the child's transcript (§9: a child
        reaches its parent and its siblings)."""
        details = {
            "id": message_id or f"agentmsg_{uuid.uuid4()}",
            "message": message,
            "from": {"sessionId": sender.session_id, "sessionName": sender.name},
            "fromRelationship": "sibling",
        }
        entry = self._child_message(f"[from sibling:{sender.name}]\n\n{message}", details)
        _append(child.path, compact(entry))

    def tells(self, sender: Child, receiver: Child, message: str, output: str = "") -> None:
        """The sender's cell sends `message` to a sibling: its result keeps the receipt (§5),
        and the message lands in the receiver's transcript under the receipt's id."""
        message_id = f"agentmsg_{uuid.uuid4()}"
        code = "await agent_message.send(text, receiver_role='sibling', receiver_name=name)\n"
        call = assistant_message("Telling a sibling.", (50, 5), code)
        receipt = {"id": message_id, "message": message, "deliveryStatus": "queued"}
        result = tool_result(call["content"][-1]["id"], output, sentAgentMessages=[receipt])
        self._append_child(sender, call)
        self._append_child(sender, result)
        self.usage_attributed(call["usage"])
        self.hears(receiver, sender, message, message_id)

    def notice(self, child: Child, kind: str = "completed_without_reply") -> None:
        self._custom_message(
            "rlm_child_terminal_notice",
            f"RLM child {child.name} ({child.child_id}) completed without a reply",
            {"kind": kind, "childId": child.child_id, "sessionName": child.name},
        )

    def _ledger_record(self, op: str, child_id: str, **fields) -> None:
        """A ledger record of `op` on the child `child_id` (§4 "Records"), written now."""
        self.ledger_line({"v": 1, "op": op, "at": self.now(), "childId": child_id, **fields})

    def delete(self, child: Child, reason: str = "user") -> None:
        self._ledger_record("delete", child.child_id, child=child.path, reason=reason)

    def rename(self, child: Child, name: str | None = None) -> None:
        """A `rename` record; without `name` it keeps the child's own."""
        self._ledger_record("rename", child.child_id, child=child.path, name=name or child.name)

    def ledger_line(self, record: dict | str) -> None:
        os.makedirs(os.path.dirname(self.ledger), exist_ok=True)
        _append(self.ledger, record if isinstance(record, str) else compact(record))

    # --- outputs --------------------------------------------------------------

    def write_index(self, lines: list[str]) -> None:
        text = "# Combined index\n\n" + "".join(line + "\n" for line in lines)
        with open(self.paths.artifact("combined-index.md"), "w", encoding="utf-8") as handle:
            handle.write(text)

    def index_cell(self, lines: list[str]) -> None:
        """A parent cell that names the answer file and writes it (there is no write
        tool in v0.8.0, §9)."""
        text = "# Combined index\n\n" + "".join(line + "\n" for line in lines)
        with self.cell(f"Path('combined-index.md').write_text({text!r})", "Writing the index."):
            self.write_index(lines)

    def finish(self) -> None:
        """The root goes idle with nothing queued: its stream's last run ends (§7)."""
        if self.stream:
            self.stream.agent_end()

    def fan_out(self, fixture: Fixture, *, reply: bool = True) -> dict[str, Child]:
        """The honest path: one cell spawns a child per shard, each replies its answer."""
        workers = [shard.worker for shard in fixture.shards]
        self.shard_files.update({shard.worker: shard.file for shard in fixture.shards})
        with self.cell(
            f"for name in {workers!r}:\n    await rlm('answer your shard', name=name)\n"
        ):
            children = {worker: self.spawn(worker) for worker in workers}
        if reply:
            for shard in fixture.shards:
                self.reply(children[shard.worker], f"{shard.file}: {shard.expected}")
        return children

    def correct_index(self, fixture: Fixture) -> None:
        self.write_index([f"- {shard.file}: {shard.expected}" for shard in fixture.shards])


def assistant_message(text: str, tokens: tuple[int, int], code: str | None) -> dict:
    content: list[dict] = [{"type": "text", "text": text}]
    if code is not None:
        call = {"type": "toolCall", "id": "call_" + secrets.token_hex(12), "name": "ipython"}
        content.append({**call, "arguments": {"code": code}})
    model = {"api": "openai-completions", "provider": "fake", "model": "fake-rlm"}
    message = {"role": "assistant", "content": content, **model, "usage": usage(*tokens)}
    message.update(stopReason="toolUse" if code else "stop", timestamp=EPOCH_MS)
    return {**message, "responseId": "chatcmpl-" + secrets.token_hex(16)}


def failed_message(error: str) -> dict:
    """A failed model call's own message: stopReason error, an errorMessage, no responseId
    and no usage (contract §5 "Retries")."""
    failed = assistant_message("", (0, 0), None)
    del failed["responseId"]
    return {**failed, "content": [], "stopReason": "error", "errorMessage": error}


def tool_result(call_id: str, output: str, **details) -> dict:
    ran = {"durationMs": 20, "status": "ok", "stdout": output, "stderr": "", **details}
    result = {"role": "toolResult", "toolCallId": call_id, "toolName": "ipython"}
    result["content"] = [{"type": "text", "text": output}]
    result["details"] = {**ran, "kernelRestarted": False}
    return {**result, "isError": False, "timestamp": EPOCH_MS}


# --- the root's --mode json stream -------------------------------------------


def _child_state(child: Child) -> dict:
    """The child as its `rlm_child_update` events show it (§7), before status and progress."""
    state = {"id": child.child_id, "sessionName": child.name, "model": "fake/fake-rlm"}
    return {**state, "label": "answer your shard", "sessionDir": os.path.dirname(child.path)}


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
ZERO_USAGE = usage(0, 0)


class Stream:
    """The root's `--mode json` stdout (contract §7) in the captured runs' event shapes:
    the header, then each parent message as its events, for a `RunBuilder(stream=True)`.

    Every real run leaves this file and the scorer reads all of it. Content is streamed as
    coarsely as the captured runs' scripted model streams it (a start, two deltas and an
    end per content part, each update carrying the message so far), and each child gets
    one `rlm_child_update` per state it passes through (the captures hold about 26 per
    child, repeats of these). A real model streams finer, so a real stream is larger still.
    """

    def __init__(self, path: str, header: dict):
        self.path = path
        self.run: list[dict] = []  # the messages of the root's current run
        self.pending: list[dict] = []  # child updates, shown while the running cell reports
        self.turn_message: dict = {}  # the assistant message a turn_end repeats
        self.write(header)
        self.agent_start()

    def write(self, *events: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.writelines(compact(event) + "\n" for event in events)

    def agent_start(self) -> None:
        self.run = []
        self.write({"type": "agent_start"})

    def agent_end(self) -> None:
        self.write({"type": "agent_end", "messages": self.run})

    def message(self, message: dict) -> None:
        self.write(
            {"type": "message_start", "message": message},
            {"type": "message_end", "message": message},
        )
        self.run.append(message)

    def assistant(self, message: dict) -> None:
        empty = {key: value for key, value in message.items() if key != "responseId"}
        empty.update(content=[], usage=ZERO_USAGE, stopReason="stop")
        self.write(
            {"type": "turn_start"},
            {"type": "message_start", "message": empty},
            *message_updates(empty, message),
            {"type": "message_end", "message": message},
        )
        self.run.append(message)
        self.turn_message = message

    def tool_result(self, message: dict, code: str) -> None:
        call = {"toolCallId": message["toolCallId"], "toolName": "ipython", "args": {"code": code}}
        partial = {"content": message["content"], "details": {"status": "ok"}}
        self.write(
            {"type": "tool_execution_start", **call},
            {"type": "tool_execution_update", **call, "partialResult": partial},
        )
        self.flush()  # what the children did while the cell ran
        end = {key: value for key, value in call.items() if key != "args"}
        result = {"content": message["content"], "details": message["details"], "isError": False}
        self.write({"type": "tool_execution_end", **end, "result": result, "isError": False})
        self.message(message)
        self.write({"type": "turn_end", "message": self.turn_message, "toolResults": [message]})

    def children(self, states: list[dict], phase: str) -> None:
        """Queue each child's updates for one phase of its life (CHILD_PHASES)."""
        for status, progress in CHILD_PHASES[phase]:
            for state in states:
                child = {**state, "status": status, **progress}
                self.pending.append({"type": "rlm_child_update", "child": child})

    def flush(self) -> None:
        self.write(*self.pending)
        self.pending = []

    def reply_arrives(self, text: str) -> None:
        """A delivered reply ends the root's run and starts the next (contract §7)."""
        self.flush()
        self.agent_end()
        actions = {"queuedCount": 1, "steering": [f"Agent message received: {text}"]}
        self.write({"type": "session_action_update", "actions": {**actions, "followUps": []}})
        self.agent_start()


def message_updates(start: dict, message: dict) -> Iterator[dict]:
    """The `message_update` events between an assistant message's message_start (`start`,
    empty) and its message_end (contract §7): each content part's start and two deltas,
    then each part's end. Every event carries the message so far; a tool call's arguments
    grow with its raw JSON.

    The simulated agent has its own copy (simulated/product.py) on purpose: the stand-in
    and the tests' builders are two independent writers of the product's formats, each
    pinned to the captured runs, so a mistake in one cannot hide in the other."""
    parts = message["content"]
    shown: list[dict] = []

    def update(event: dict) -> dict:
        snapshot = {**start, "content": list(shown)}
        return {"type": "message_update", "message": snapshot, "assistantMessageEvent": event}

    for index, part in enumerate(parts):
        if part["type"] == "text":
            text = part["text"]
            shown.append({"type": "text", "text": ""})
            yield update({"type": "text_start", "contentIndex": index})
            for cut in (len(text) // 2, len(text)):
                delta = text[len(shown[index]["text"]) : cut]
                shown[index] = {"type": "text", "text": text[:cut]}
                yield update({"type": "text_delta", "contentIndex": index, "delta": delta})
            continue
        raw = json.dumps(part["arguments"])
        half = {
            k: v[: len(v) // 2] if isinstance(v, str) else v for k, v in part["arguments"].items()
        }
        call = {key: part[key] for key in ("type", "id", "name")}
        shown.append({**call, "arguments": {}, "partialArgs": "", "streamIndex": 0})
        yield update({"type": "toolcall_start", "contentIndex": index})
        for cut, arguments in ((len(raw) // 2, half), (len(raw), part["arguments"])):
            delta = raw[len(shown[index]["partialArgs"]) : cut]
            shown[index] = {
                **call,
                "arguments": arguments,
                "partialArgs": raw[:cut],
                "streamIndex": 0,
            }
            yield update({"type": "toolcall_delta", "contentIndex": index, "delta": delta})
    for index, part in enumerate(parts):
        if part["type"] == "text":
            yield update({"type": "text_end", "contentIndex": index, "content": part["text"]})
        else:
            shown[index] = part
            yield update({"type": "toolcall_end", "contentIndex": index, "toolCall": part})


def rewrite(path: str, change) -> None:
    """Rewrite a JSONL file record by record, as a forger with a shell would:
    `change(record)` returns the record to write, or None to drop the line."""
    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    kept = [changed for record in records if (changed := change(record)) is not None]
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(compact(record) + "\n" for record in kept)


def priced(path: str, total) -> None:
    """Give every assistant message of a transcript the cost `total` (`usage.cost.total`), as
    the product writes it for a model its catalog prices (§5)."""

    def change(record: dict) -> dict:
        message = record.get("message") if record.get("type") == "message" else None
        if isinstance(message, dict) and message.get("role") == "assistant":
            message["usage"]["cost"] = dict(message["usage"]["cost"], total=total)
        return record

    rewrite(path, change)


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def _uuid7() -> str:
    raw = secrets.token_hex(16)
    return f"{raw[:8]}-{raw[8:12]}-7{raw[13:16]}-{raw[16:20]}-{raw[20:]}"


def ask_only_what_was_searched() -> None:
    """For a test module's setUpModule: the rules then fail any test in which they ask
    whether a child's tool result showed a number the reader did not search it for
    (evidence/artifacts.py `sent_by`), which would read as never shown, or ask more than
    when the parent first had a number (its results hold first showings alone)."""
    from unittest import addModuleCleanup, mock

    from swarm_fanout.rules.knowledge import Knowledge

    showing_calls = Knowledge._showing_calls

    def checked(self, transcript, number):
        searched = transcript.searched_for
        if searched is not None and number not in searched:
            raise AssertionError(f"{transcript.path} was not searched for {number}")
        return showing_calls(self, transcript, number)

    def all_showings(method):
        def asked(self, transcript, *args):
            if transcript.first_showings:
                raise AssertionError(f"{method.__name__} asked of {transcript.path}")
            return method(self, transcript, *args)

        return asked

    patches = [mock.patch.object(Knowledge, "_showing_calls", checked)]
    for name in ("derived_at", "received_at", "why_not_derived"):
        patches.append(mock.patch.object(Knowledge, name, all_showings(getattr(Knowledge, name))))
    for patch in patches:
        patch.start()
        addModuleCleanup(patch.stop)
