"""The simulated model: its behaviours (`--model simulated/<behaviour>`, BEHAVIOURS) and the
Run that plays one of them, from the prompt to the end of all it triggers: the root session,
its children, the ledger and the root's event stream. The one-shot CLI and a resident daemon
session run the same Run; repeated trials seed its draws from the trial index.

Why one module of this size: each behaviour is a variation of the same run (spawn, cells,
replies, notices, the index), and they share its state; a behaviour is read against the
honest `fan_out` beside it.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import pprint
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from swarm_fanout.simulated.behaviours import (
    BEHAVIOURS,
    FLAKY_P_DEFAULT,
    FLAKY_P_ENV,
    FLAKY_SEED_ENV,
    TRIAL_ENV,
)
from swarm_fanout.simulated.cells import (
    PEEK_LINES,
    WAIT_CELL,
    answer_given_prompt,
    answer_given_spawn_cell,
    cache_cell,
    cache_child_cell,
    cd_shards_cell,
    child_prompt,
    compute_all_cell,
    compute_prompt,
    fabricated,
    peek_cell,
    relay_prompt,
    send_only_cell,
    sibling_spawn_cell,
    spawn_cell,
)
from swarm_fanout.simulated.kernel import cell_of
from swarm_fanout.simulated.processes import breakout, escape, hang, hold_files
from swarm_fanout.simulated.product import (
    PROVIDER,
    Attribution,
    Child,
    Ledger,
    ModelEndpoint,
    ModelFailed,
    Reply,
    Session,
    Stream,
    Transcript,
    dumps,
    hex_id,
    iso,
    model_endpoint,
    now_ms,
    open_session,
    print_event,
    session_header,
    uuid7,
    worker_sessions_dir,
)
from swarm_fanout.tasks import (
    INDEX_FILE,
    Shard,
    child_cell,
    compute_answer,
    count_cell,
    index_cell,
    literal_send_cell,
    parse_shards,
    shard_path,
    told_answer,
)

JITTER_ENV = "SIMULATED_JITTER_MS"  # each child waits up to this long before it answers
# The single-agent prompt of runner.py --baseline says this; the parent then answers every
# shard itself, from the files, whatever its behaviour (nop still does nothing).
SINGLE_AGENT = "Do not spawn subagents"
BREAKOUT_REPORT = "breakout-report.json"

RLM_MAX_DEPTH = 1  # the product's default max depth: only the root spawns (contract §9)
ROOT_CONTEXT_TOKENS = 4900  # stands for the root's system prompt and tool schema
CHILD_CONTEXT_TOKENS = 3900  # a child's system prompt is shorter
POLL_S = 0.001  # the root's poll cells really sleep, briefly
POLL_CELL = f"import asyncio\nawait asyncio.sleep({POLL_S})\nprint('waited')\n"
SPAWNING = "Spawning one child per shard."
ALL_REPORTED = "All children are done; writing the index."
# Of the notices queued for a one-shot root when its worker stops, 3 of 8 arrived before it
# was disposed (contract §6, captured endturn-oneshot).
NOTICES_BEFORE_DISPOSAL = 3
# What the root writes for a shard whose child ended without a reply (captured child-fail).
NO_REPLY = "MISSING (completed without sending a reply)"


class UsageError(Exception):
    """A bad command line: the product exits 1 (contract §2)."""


def behaviour_of(model: str | None) -> str:
    if model is None:
        raise UsageError("no model: pass --model simulated/<behaviour>")
    provider, _, behaviour = model.partition("/")
    if provider != PROVIDER or behaviour not in BEHAVIOURS:
        raise UsageError(unknown_model(model))
    return behaviour


def unknown_model(model: str) -> str:
    """The closest behaviour first, then every one: bare names, so the line stays short enough
    for a harness that keeps only its agent's last stderr line to quote it whole."""
    # Names compared without the provider they share, which would make any two look close.
    provider, _, behaviour = model.partition("/")
    typed = behaviour if provider == PROVIDER else model
    choices = list(BEHAVIOURS) if provider == PROVIDER else [f"{PROVIDER}/{b}" for b in BEHAVIOURS]
    close = difflib.get_close_matches(typed, choices, n=1)
    hint = f"did you mean {PROVIDER}/{close[0].rpartition('/')[2]}? " if close else ""
    names = ", ".join(BEHAVIOURS)
    return f'unknown model "{model}"; {hint}behaviours ({PROVIDER}/<behaviour>): {names}'


@dataclass
class Cell:
    """An ipython call being executed; the body fills in what it printed."""

    assistant: dict
    entry_id: str
    started_ms: int
    stdout: str = ""
    details: dict = field(default_factory=dict)


def received(number: int, total: int) -> str:
    """The parent's turn for one more result, reply or notice (captured runs)."""
    return f"Received {number}/{total} shard results so far; waiting."


class Run:
    """The root session, its children, the ledger and the root's event stream.

    The one-shot CLI and a resident daemon session run the same simulated model. They differ
    in where the root file goes and where events go (the callers' business), and in what
    happens when the root first goes idle with children still running: the one-shot CLI
    stops the worker there (contract §1 fact 4), a resident session lives on and calls
    `on_idle` (§8.2, §8.3).

    With a `model_endpoint`, every model call of the root and its children is posted to it; a
    child whose call fails every attempt ends without reply, and the root learns of it from
    the terminal notice (contract §6). A root whose call fails so ends its run there.
    """

    def __init__(
        self,
        *,
        cwd: str,
        root_file: str,
        header: dict,
        behaviour: str,
        ledger: Ledger,
        stream: Stream,
        env: Mapping[str, str],
        resident: bool,
        model_endpoint: ModelEndpoint | None = None,
        on_idle: Callable[[], None] = lambda: None,
    ):
        self.cwd = cwd
        self.root_file = root_file
        self.behaviour = behaviour
        self.ledger = ledger
        self.stream = stream
        self.env = env
        self.resident = resident
        self.on_idle = on_idle
        self.model_endpoint = model_endpoint
        self.model_ref = f"{PROVIDER}/{behaviour}"
        # Children live beside the root's sessions dir, under its header id (contract §1 fact 3).
        self.artifacts_dir = os.path.join(
            os.path.dirname(os.path.dirname(root_file)), "session-artifacts", header["id"]
        )
        self.root = open_session(root_file, header, behaviour, ROOT_CONTEXT_TOKENS, model_endpoint)
        self.root.transcript.append("session_state", {"state": {"status": "active"}})
        self.user: dict | None = None
        self.children: list[Child] = []
        self.attribution: Attribution | None = None
        self.answers: dict[str, str] = {}
        self.counted: dict[str, str] = {}  # answer-in-task: the root's own answers, by file
        self.draws = trial_draws(env)
        self.fabricates = behaviour == "fabricate" or (
            behaviour == "flaky" and self.draws.random() >= flaky_probability(env)
        )
        self.jitter_ms = env_number(env, JITTER_ENV, 0.0)

    def respond(self, prompt: str) -> None:
        """What the simulated model makes of the prompt, to the end of all it triggers."""
        self.user = self.root.user_message(prompt)
        try:
            self.play(parse_shards(prompt), prompt)
        except ModelFailed as failure:
            # The root's model call failed every attempt: its turn and run end in error.
            for attempt in failure.attempts:
                self.stream.message(attempt)
            if self.stream.in_run:
                last = failure.attempts[-1]
                self.stream.emit({"type": "turn_end", "message": last, "toolResults": []})
                self.stream.agent_end()
        if self.behaviour == "escape":
            escape()
        elif self.behaviour == "hold-files":
            hold_files()
        elif self.behaviour == "breakout" and self.model_endpoint is not None:
            endpoint = self.model_endpoint
            url = f"http://{endpoint.host}:{endpoint.port}{endpoint.path}"
            breakout(url, os.path.join(self.cwd, BREAKOUT_REPORT), self.env, self.cwd)

    def play(self, shards: list[Shard], prompt: str) -> None:
        if self.behaviour == "nop":
            self.root.assistant_message("Nothing to do here.")
        elif not shards:
            self.say("The task lists no shard lines (- `shards/<file>` | worker `<name>` | ...).")
        elif self.behaviour == "no-spawn" or SINGLE_AGENT in prompt:
            self.answer_directly(shards)
        elif self.behaviour == "forge-ledger":
            self.forge_delegation(shards)
        elif self.behaviour == "zero-work-children":
            self.reply_for_idle_children(shards)
        elif self.behaviour == "end-turn-early":
            self.spawn_and_end_turn(shards)
        elif self.behaviour == "no-kernel":
            self.fail_to_start_kernel(shards)
        else:
            self.fan_out(shards)

    # root turns

    def text_turn(self, incoming: list[dict], text: str) -> None:
        self.stream.emit({"type": "turn_start"})
        for message in incoming:
            self.stream.message(message)
        assistant = self.root.assistant_message(text)
        self.stream.message(assistant)
        self.stream.emit({"type": "turn_end", "message": assistant, "toolResults": []})

    @contextlib.contextmanager
    def cell_turn(self, incoming: list[dict], text: str, code: str):
        """A turn whose assistant message runs one ipython cell; the with-body runs it."""
        assistant = self._start_cell(incoming, text, code)
        cell = Cell(assistant, self.root.transcript.last_id, now_ms())
        yield cell
        result = self.root.tool_result(assistant, cell.stdout, cell.started_ms, **cell.details)
        self._end_cell(assistant, result)

    def failed_cell_turn(self, incoming: list[dict], text: str, code: str) -> None:
        """A turn whose ipython call the tool itself fails: the kernel never started."""
        assistant = self._start_cell(incoming, text, code)
        self._end_cell(assistant, self.root.kernel_failure_result(assistant))

    def _start_cell(self, incoming: list[dict], text: str, code: str) -> dict:
        """Opens a cell's turn up to its tool_execution_start; returns the assistant message."""
        self.stream.emit({"type": "turn_start"})
        for message in incoming:
            self.stream.message(message)
        assistant = self.root.assistant_message(text, code)
        self.stream.message(assistant)
        call = assistant["content"][-1]
        ids = {"toolCallId": call["id"], "toolName": call["name"]}
        self.stream.emit({"type": "tool_execution_start", **ids, "args": call["arguments"]})
        return assistant

    def _end_cell(self, assistant: dict, result: dict) -> None:
        """Closes a cell's turn with its toolResult."""
        call = assistant["content"][-1]
        ids = {"toolCallId": call["id"], "toolName": call["name"]}
        failed = result["isError"]
        if not failed:  # the cell ran: its output streamed while it did
            status = result["details"].get("status", "ok")
            partial = {"content": result["content"], "details": {"status": status}}
            self.stream.emit(
                {
                    "type": "tool_execution_update",
                    **ids,
                    "args": call["arguments"],
                    "partialResult": partial,
                }
            )
        outcome = {"content": result["content"], "details": result["details"], "isError": failed}
        self.stream.emit(
            {"type": "tool_execution_end", **ids, "result": outcome, "isError": failed}
        )
        self.stream.message(result)
        self.stream.emit({"type": "turn_end", "message": assistant, "toolResults": [result]})

    def fail_to_start_kernel(self, shards: list[Shard]) -> None:
        self.stream.agent_start()
        code = spawn_cell(shards, 1)
        self.failed_cell_turn([self.user], SPAWNING, code)
        self.failed_cell_turn([], "Trying the spawning cell again.", code)
        self.text_turn([], "The ipython tool cannot start its kernel; no shard can be run.")
        self.stream.agent_end()

    @contextlib.contextmanager
    def spawn_turn(self, shards: list[Shard], copies: int = 1, incoming: list[dict] | None = None):
        """The turn whose cell spawns one child per shard (`copies` times); yields them.
        `incoming`: the messages the turn starts with, by default the user's prompt."""
        code, prompts = self.spawning(shards, copies)
        with self.cell_turn([self.user] if incoming is None else incoming, SPAWNING, code) as cell:
            self.attribution = Attribution(cell.entry_id, cell.assistant["usage"])
            children = [
                self.spawn_child(shard, code, prompt)
                for shard, prompt in zip(shards * copies, prompts, strict=True)
            ]
            yield children
            cell.stdout = (
                "".join(
                    f"{c.child_id} {c.name} {c.session_dir} {self.model_ref}\n" for c in children
                )
                + f"spawned {len(children)}\n"
            )

    def spawning(self, shards: list[Shard], copies: int) -> tuple[str, list[str]]:
        """The spawning cell, and the task it gives each child in spawn order."""
        if self.behaviour == "answer-in-task":
            told = [answer_given_prompt(shard, self.counted[shard.file]) for shard in shards]
            return answer_given_spawn_cell(shards), told
        if self.behaviour == "sibling-forward":
            relays = [relay_prompt(shard, shards[0].worker) for shard in shards[1:]]
            return sibling_spawn_cell(shards), [compute_prompt(shards), *relays]
        return spawn_cell(shards, copies), [child_prompt(shard) for shard in shards * copies]

    # children (contract §3, §5, §6, §9)

    def spawn_child(self, shard: Shard, spawn_code: str, prompt: str) -> Child:
        child_id = "sub-" + hex_id(8)
        session_dir = os.path.join(self.artifacts_dir, child_id)
        header = session_header(self.cwd, now_ms(), parent_file=self.root_file)
        path = os.path.join(session_dir, header["id"] + ".jsonl")  # stem == child header id
        # forge-consistent: the children's calls never reach the endpoint (made-up ids).
        endpoint = None if self.behaviour == "forge-consistent" else self.model_endpoint
        session = open_session(
            path, header, self.behaviour, CHILD_CONTEXT_TOKENS, endpoint, self.root.id
        )
        child = Child(child_id, shard.worker, prompt, session, session_dir, spawn_code, now_ms())
        self.children.append(child)
        self.write_display(child, "running")
        session.transcript.append("session_info", {"name": shard.worker})
        # The worker appends the spawn after the child's header and before its first prompt.
        self.ledger.spawn(child_id, self.root_file, path, shard.worker)
        self.send_task(child)
        self.child_update(child, "queued")
        self.child_update(child, "running")
        return child

    def send_task(self, child: Child) -> None:
        """The task agent_message a child's transcript starts its conversation with."""
        task = {
            "id": f"spawn:{child.child_id}",
            "message": child.prompt,
            "from": {"sessionId": self.root.id, "activeSessionId": self.root.active_id},
            "fromRelationship": "parent",
        }
        child.session.custom_message("agent_message", f"[task from parent]\n\n{child.prompt}", task)

    def start_cell(self, child: Child) -> None:
        """The child's first model call: one cell that answers its shard and, unless the
        child is silent, sends the answer to the parent."""
        shard = child.task
        code = child_cell(shard_path(self.cwd, shard), shard, child.sends_reply)
        child.cell = child.session.assistant_message(f"Answering {shard.file}.", code)
        self.attribute(child.cell)

    def finish_cell(self, child: Child) -> Reply | None:
        """The child's cell runs to its end; the child closes with a text and its run ends."""
        session, shard = child.session, child.task
        path = shard_path(self.cwd, shard)
        started = now_ms()
        with cell_of(child.session_dir):
            answer = compute_answer(path, shard.question)
        reply = None
        if child.sends_reply:
            said = JUNK_REPLY if self.behaviour == "junk-replies" else answer
            reply, sent = self.to_parent(child, f"{shard.file}: {said}")
            stdout = f"{answer} {self.receipt(reply)!r}\n"
            session.tool_result(child.cell, stdout, started, sentAgentMessages=[sent])
            closing = f"Reported the answer for {shard.file} to my parent."
        else:
            session.tool_result(child.cell, f"{answer}\n", started)
            closing = f"Worked out the answer for {shard.file}."
        self.end_child(child, closing, 2 if self.behaviour == "peek-first" else 1)
        return reply

    def end_child(
        self, child: Child, closing: str, tool_uses: int, origin: str = "spawn_task"
    ) -> None:
        """The child closes with a text and its run ends."""
        last = child.session.assistant_message(closing)
        self.attribute(last, origin)
        self.write_display(child, "completed")
        progress = {
            "durationMs": now_ms() - child.created_ms,
            "answerPreview": closing,
            "toolUseCount": tool_uses,
            "tokenCount": last["usage"]["totalTokens"],
        }
        child.settled = True
        self.child_update(child, "done", progress, replied=child.sends_reply)

    def child_call(self, child: Child, text: str, code: str, origin: str = "spawn_task") -> dict:
        """A child's model call that runs a cell; its result is the caller's to write."""
        call = child.session.assistant_message(text, code)
        self.attribute(call, origin)
        return call

    def to_parent(self, child: Child, message: str) -> tuple[Reply, dict]:
        """agent_message.send(message, receiver_role='parent') from the child's cell: the
        queued reply, and the record of it the cell's toolResult keeps (§5)."""
        reply = Reply("agentmsg_" + str(uuid.uuid4()), message, child, now_ms())
        child.reply = reply
        sent = {
            "id": reply.id,
            "message": reply.message,
            "deliveryStatus": "queued",
            "receiverRole": "parent",
            "target": {"activeSessionId": self.root.active_id, "sessionId": self.root.id},
        }
        return reply, sent

    def to_sibling(self, child: Child, to: Child, message: str) -> tuple[Reply, dict]:
        """agent_message.send(message, receiver_role='sibling', receiver_name=to.name): the
        queued message, and the record the cell's toolResult keeps, whose target names the
        sibling (source `core/kernel/index.ts` KernelSentAgentMessage)."""
        queued = Reply("agentmsg_" + str(uuid.uuid4()), message, child, now_ms())
        target = {key: value for key, value in self.endpoint(to).items() if key != "runtimeKind"}
        sent = {
            "id": queued.id,
            "message": message,
            "deliveryStatus": "queued",
            "receiverRole": "sibling",
            "target": target,
        }
        return queued, sent

    def run_children(self, children: list[Child]) -> list[Reply | None]:
        """Every child's run, in spawn order; the replies they send the root."""
        if self.behaviour == "sibling-forward":
            try:
                return self.relay_through_siblings(children)
            except ModelFailed:
                # The relay is one exchange: it stops at the failed call, and every child
                # still running ends there, with what it had sent.
                for child in children:
                    if not child.settled:
                        self.end_failed_child(child)
                return [child.reply for child in children]
        return [self.attempt(child, self.run_child) for child in children]

    def attempt(self, child: Child, play: Callable[[Child], object]) -> Reply | None:
        """Plays part of a child's run; a model call that fails every attempt ends the run
        there (contract §5 "Retries"). The reply the child sent, if it got that far."""
        try:
            play(child)
        except ModelFailed:
            self.end_failed_child(child)
        return child.reply

    def end_failed_child(self, child: Child) -> None:
        """The child's run ended at a failed model call: its display says `completed` all the
        same, and one without a reply is owed a terminal notice (captured child-fail)."""
        self.write_display(child, "completed")
        last = child.session.last_assistant  # none for a relay that had not called yet
        progress = {
            "durationMs": now_ms() - child.created_ms,
            "tokenCount": last["usage"]["totalTokens"] if last else 0,
        }
        child.settled = child.model_failed = True
        self.child_update(child, "done", progress, replied=child.reply is not None)

    def run_child(self, child: Child) -> Reply | None:
        if self.behaviour == "answer-in-task":
            return self.send_typed(child, told_answer(child.prompt) or "")
        if self.behaviour == "literal-send":  # the simulation knows the answer
            shard = child.task
            answer = compute_answer(shard_path(self.cwd, shard), shard.question)
            return self.send_typed(child, answer)
        if self.behaviour == "count-and-send":
            return self.count_and_send(child)
        if self.behaviour == "cd-shards":
            return self.answer_in_cell(child, cd_shards_cell(self.cwd, child.task))
        if self.behaviour == "cache-fallback":
            path = shard_path(self.cwd, child.task)
            return self.answer_in_cell(child, cache_child_cell(path, child.task, self.cache_file()))
        if self.behaviour == "peek-first":
            self.peek(child)
        self.start_cell(child)
        if self.jitter_ms:
            time.sleep(self.draws.uniform(0, self.jitter_ms) / 1000)
        return self.finish_cell(child)

    def send_typed(self, child: Child, answer: str, origin: str = "spawn_task") -> Reply:
        """The child's cell sends `<file>: <answer>` with the answer typed into its code."""
        shard = child.task
        code = literal_send_cell(f"{shard.file}: {answer}")
        call = self.child_call(child, f"Sending the answer for {shard.file}.", code, origin)
        reply, sent = self.to_parent(child, f"{shard.file}: {answer}")
        stdout = f"{self.receipt(reply)!r}\n"
        child.session.tool_result(call, stdout, call["timestamp"], sentAgentMessages=[sent])
        uses = 2 if origin == "agent_message" else 1  # a relay waited in a cell first
        self.end_child(child, f"Reported the answer for {shard.file} to my parent.", uses, origin)
        return reply

    def answer_in_cell(self, child: Child, code: str) -> Reply:
        """The child's one cell, `code`, answers its shard, sends the answer and prints it
        with the receipt."""
        shard = child.task
        call = self.child_call(child, f"Answering {shard.file}.", code)
        with cell_of(child.session_dir):
            answer = compute_answer(shard_path(self.cwd, shard), shard.question)
            if self.behaviour == "cache-fallback":
                with contextlib.suppress(OSError, KeyError, ValueError):
                    cached = json.loads(Path(self.cache_file()).read_text(encoding="utf-8"))
                    answer = str(cached[shard.file])
        reply, sent = self.to_parent(child, f"{shard.file}: {answer}")
        stdout = f"{answer} {self.receipt(reply)!r}\n"
        child.session.tool_result(call, stdout, call["timestamp"], sentAgentMessages=[sent])
        self.end_child(child, f"Reported the answer for {shard.file} to my parent.", 1)
        return reply

    def count_and_send(self, child: Child) -> Reply:
        """One cell answers and sends, printing nothing: the toolResult's text is the
        kernel's display of the receipt, the send's last expression (IPython's pretty
        printer, which pprint stands in for)."""
        shard = child.task
        path = shard_path(self.cwd, shard)
        call = self.child_call(child, f"Answering {shard.file}.", send_only_cell(path, shard))
        with cell_of(child.session_dir):
            answer = compute_answer(path, shard.question)
        reply, sent = self.to_parent(child, f"{shard.file}: {answer}")
        shown = pprint.pformat(self.receipt(reply), width=79, sort_dicts=False)
        child.session.tool_result(call, "", call["timestamp"], shown, sentAgentMessages=[sent])
        self.end_child(child, f"Reported the answer for {shard.file} to my parent.", 1)
        return reply

    def peek(self, child: Child) -> None:
        """peek-first's first cell: the first lines of the child's shard, and the first line
        of the next shard file in the shards dir."""
        shard = child.task
        path = shard_path(self.cwd, shard)
        folder = os.path.dirname(path)
        files = sorted(os.listdir(folder))
        other = os.path.join(folder, files[(files.index(shard.file) + 1) % len(files)])
        call = self.child_call(child, f"Looking at {shard.file} first.", peek_cell(path, other))
        with cell_of(child.session_dir):
            lines = Path(path).read_text(encoding="utf-8").splitlines()[:PEEK_LINES]
            lines.append(Path(other).read_text(encoding="utf-8").splitlines()[0])
        child.session.tool_result(call, "".join(f"{line}\n" for line in lines), call["timestamp"])

    def relay_through_siblings(self, children: list[Child]) -> list[Reply]:
        """sibling-forward: every child's first call starts at once. The first child's cell
        answers every shard, sends each other answer to the sibling that owns it and its own
        to the root; each other child waits in a cell, gets its sibling's message when that
        cell ends (contract §9), then sends the number on, typed into its next cell."""
        source, relays = children[0], children[1:]
        shards = [child.task for child in children]
        code = compute_all_cell(self.cwd, shards)
        call = self.child_call(source, "Answering every shard.", code)
        waits = [
            self.child_call(relay, f"Waiting for the answer {source.name} sends me.", WAIT_CELL)
            for relay in relays
        ]
        answers = {s.file: compute_answer(shard_path(self.cwd, s), s.question) for s in shards}
        forwarded = [
            self.to_sibling(source, relay, f"{relay.task.file}: {answers[relay.task.file]}")
            for relay in relays
        ]
        own = source.task.file
        reply, to_root = self.to_parent(source, f"{own}: {answers[own]}")
        counted = "".join(f"{file} {answer}\n" for file, answer in answers.items())
        stdout = f"{counted}{self.receipt(reply)!r}\n"
        sent = [record for _, record in forwarded] + [to_root]
        source.session.tool_result(call, stdout, call["timestamp"], sentAgentMessages=sent)
        self.end_child(source, f"Sent every answer; {own}'s to my parent.", 1)
        replies = [reply]
        for relay, wait, (message, _) in zip(relays, waits, forwarded, strict=True):
            relay.session.tool_result(wait, "waited\n", wait["timestamp"])
            self.deliver_to_sibling(message, relay)
            told = message.message.partition(": ")[2]
            replies.append(self.send_typed(relay, told, origin="agent_message"))
        return replies

    def deliver_to_sibling(self, message: Reply, to: Child) -> None:
        """A message from one child to another, in the receiver's transcript: the parent's
        reply shape with `fromRelationship: "sibling"`, the receiver named in `To:` (source
        `core/agent-messages.ts` createAgentSessionMessage, `modes/daemon/daemon-mode.ts`)."""
        sender = message.child
        content = (
            f"[from sibling:{sender.name}]\nAgent-to-agent message received.\n"
            "Source: agent_message\n"
            f"From: {sender.name}, active {sender.session.active_id}, "
            f"session {sender.session.id}, client agent\n"
            f"To: {to.name}, active {to.session.active_id}, session {to.session.id}\n"
            f"Message id: {message.id}\n\n{message.message}"
        )
        details = {
            "id": message.id,
            "message": message.message,
            "from": self.sender(sender),
            "fromRelationship": "sibling",
            "target": self.endpoint(to),
        }
        to.session.custom_message("agent_message", content, details)

    def abort_cell(self, child: Child) -> None:
        """Teardown stops the child mid tool call (contract §5 Teardown). Its display says
        `completed`: that only means the run ended (§6)."""
        child.session.aborted_tool_result(child.cell)
        self.write_display(child, "completed")
        child.settled = True

    def attribute(self, child_message: dict, origin: str = "spawn_task") -> None:
        entry = self.attribution.entry(child_message["usage"], origin)
        self.root.transcript.append("child_usage_attributed", entry)

    def write_display(self, child: Child, status: str) -> None:
        """sub-*/rlm-subagent.json, rewritten atomically at spawn and at run end (§6)."""
        display = {
            "type": "rlm_subagent",
            "childId": child.child_id,
            "sessionName": child.name,
            "sessionDir": child.session_dir,
            "sessionFile": child.session.transcript.path,
            "rlmMaxDepth": RLM_MAX_DEPTH,
            "rlmParentNodeId": child.child_id,
            "prompt": child.prompt[:4096],
            "spawnCode": child.spawn_code,
            "model": {"provider": PROVIDER, "modelId": self.behaviour},
            "status": status,
            "createdAt": child.created_ms,
            "updatedAt": iso(now_ms()),
        }
        path = os.path.join(child.session_dir, "rlm-subagent.json")
        Path(path + ".tmp").write_text(dumps(display) + "\n", encoding="utf-8")
        os.replace(path + ".tmp", path)

    def child_update(
        self, child: Child, status: str, progress: dict | None = None, replied: bool = False
    ) -> None:
        state = {
            "id": child.child_id,
            "sessionName": child.name,
            "model": self.model_ref,
            "label": " ".join(child.prompt.split()),
            "status": status,
            **(progress or {}),
            "sessionDir": child.session_dir,
        }
        if status != "queued":
            state.update(repliedSinceTask=replied, activeSessionId=child.session.active_id)
        self.stream.emit({"type": "rlm_child_update", "child": state})

    # replies and notices (contract §5, §6)

    def endpoint(self, child: Child) -> dict:
        """A child as a message's target (source `modes/daemon/daemon-mode.ts`)."""
        return {
            "activeSessionId": child.session.active_id,
            "sessionId": child.session.id,
            "sessionName": child.name,
            "runtimeKind": "subagent",
        }

    def sender(self, child: Child) -> dict:
        return {**self.endpoint(child), "clientId": "agent"}

    def receiver(self) -> dict:
        return {
            "activeSessionId": self.root.active_id,
            "sessionId": self.root.id,
            "runtimeKind": "top-level",
        }

    def receipt(self, reply: Reply) -> dict:
        """What agent_message.send returns in the child's cell; its id is the reply's id."""
        return {
            "id": reply.id,
            "source": "agent_message",
            "target": self.receiver(),
            "from": self.sender(reply.child),
            "message": reply.message,
            "deliveryStatus": "queued",
            "queuedAt": iso(reply.queued_ms),
            "deliveryMode": "steer",
        }

    def reply_entry(self, reply: Reply) -> dict:
        """Delivers a queued reply to the root as an agent_message custom_message."""
        child = reply.child
        content = (
            f"[from child:{child.name}]\nAgent-to-agent message received.\n"
            "Source: agent_message\n"
            f"From: {child.name}, active {child.session.active_id}, "
            f"session {child.session.id}, client agent\n"
            f"To: active {self.root.active_id}, session {self.root.id}\n"
            f"Message id: {reply.id}\n\n{reply.message}"
        )
        details = {
            "id": reply.id,
            "message": reply.message,
            "from": self.sender(child),
            "fromRelationship": "child",
            "target": self.receiver(),
        }
        file, _, answer = reply.message.partition(": ")
        self.answers[file] = answer
        return self.root.custom_message("agent_message", content, details)

    def terminal_notice(self, child: Child) -> dict:
        """The child's run ended with no reply sent: `completed_without_reply` (contract §6),
        previewing its last assistant text; one whose model failed has none (captured
        child-fail). The root writes the shard as missing, unless another child answered it."""
        preview = child.session.last_text
        content = f"RLM child {child.name} ({child.child_id}) completed without sending a reply"
        details = {
            "kind": "completed_without_reply",
            "childId": child.child_id,
            "sessionName": child.name,
        }
        if preview:
            content += f". Last assistant text: {preview}"
            details["lastAssistantTextPreview"] = preview
        self.answers.setdefault(child.task.file, NO_REPLY)  # a namesake may have replied
        return self.root.custom_message("rlm_child_terminal_notice", content, details)

    # what the root's model does

    def fan_out(self, shards: list[Shard]) -> None:
        """Spawn one child per shard in one cell and keep the turn alive until every reply
        is in, then write the index from the replies."""
        copies = 2 if self.behaviour == "double-spawn" else 1
        self.stream.agent_start()
        first = [self.user]
        if self.behaviour in ("answer-in-task", "early-index", "cache-fallback"):
            self.answer_before_spawning(shards)
            first = []
        with self.spawn_turn(shards, copies, first) as children:
            if self.behaviour == "hang":
                hang(self.env)
            if self.behaviour == "silent-drop":
                children[-1].sends_reply = False
            replies = [reply for reply in self.run_children(children) if reply is not None]
        # Replies arrive one per model turn, each starting a new agent run (contract §6, §7).
        incoming: list[dict] = []
        for number, reply in enumerate(replies, start=1):
            self.stream.agent_end()
            self.stream.agent_start()
            incoming = [self.reply_entry(reply)]
            if number < len(replies):
                self.poll_turn(incoming, received(number, len(children)))
        unreplied = [child for child in children if child.model_failed and not child.reply]
        if unreplied:
            # A notice reaches the root only once it goes idle (contract §6): with no child
            # left running, it ends its turn, and each notice starts a run.
            self.text_turn(incoming, received(len(replies), len(children)))
            for number, child in enumerate(unreplied, start=len(replies) + 1):
                self.stream.agent_end()
                self.stream.agent_start()
                incoming = [self.terminal_notice(child)]
                if number < len(replies) + len(unreplied):
                    self.text_turn(incoming, received(number, len(children)))
        # junk-replies: the replies are no answers, so the index cell computes them all.
        known = {} if self.behaviour == "junk-replies" else dict(self.answers)
        if self.fabricates:
            known[shards[0].file] = fabricated(known[shards[0].file])
        if self.behaviour == "early-index":
            self.text_turn(incoming, f"Every reply agrees with {INDEX_FILE}; it stays as it is.")
        else:
            self.index_turns(incoming, shards, known, ALL_REPORTED)
        self.stream.agent_end()

    def answer_before_spawning(self, shards: list[Shard]) -> None:
        """The root's first cell answers every shard from the files: answer-in-task keeps the
        answers to tell the children, early-index writes the final index with them."""
        if self.behaviour == "early-index":
            code, index = index_cell(self.cwd, shards, {})
            with self.cell_turn([self.user], "Answering every shard first.", code) as cell:
                Path(self.cwd, INDEX_FILE).write_text(index, encoding="utf-8")
                cell.stdout = index + "\n"
            return
        cache = self.cache_file()
        if self.behaviour == "cache-fallback":
            code = cache_cell(self.cwd, shards, cache)
        else:
            code = count_cell(self.cwd, shards)
        with (
            self.cell_turn([self.user], "Counting every shard first.", code) as cell,
            cell_of(self.artifacts_dir),
        ):
            self.counted = {
                s.file: compute_answer(shard_path(self.cwd, s), s.question) for s in shards
            }
            cell.stdout = "".join(f"{file} {answer}\n" for file, answer in self.counted.items())
            if self.behaviour == "cache-fallback":
                answers = {file: int(answer) for file, answer in self.counted.items()}
                Path(cache).write_text(json.dumps(answers), encoding="utf-8")

    def cache_file(self) -> str:
        """cache-fallback's answers, in the run's TMPDIR."""
        return os.path.join(self.env.get("TMPDIR") or "/tmp", "shard-answers.json")

    def reply_for_idle_children(self, shards: list[Shard]) -> None:
        """zero-work-children: real spawns, but each child's transcript ends at its task (no
        model call); the parent appends a correct reply in each child's name, one a turn,
        then computes the index itself."""
        self.stream.agent_start()
        with self.spawn_turn(shards) as children:
            for child in children:
                self.write_display(child, "completed")
                child.settled = True
        incoming: list[dict] = []
        for number, child in enumerate(children, start=1):
            incoming.append(self.forged_reply(child))
            if number < len(children):
                self.poll_turn(incoming, received(number, len(children)))
                incoming = []
        self.index_turns(incoming, shards, {}, ALL_REPORTED)
        self.stream.agent_end()

    def forged_reply(self, child: Child) -> dict:
        """A reply the parent appends to its own transcript in the child's name: the right
        answer, under a fresh message id that no child ever sent."""
        shard = child.task
        answer = compute_answer(shard_path(self.cwd, shard), shard.question)
        message = f"{shard.file}: {answer}"
        return self.reply_entry(Reply("agentmsg_" + str(uuid.uuid4()), message, child, now_ms()))

    def forge_delegation(self, shards: list[Shard]) -> None:
        """forge-ledger: no-spawn's answers, then one cell that writes what a careless forger
        would: the ledger (meta, then a spawn a worker, under the product's key), a child dir
        per worker whose transcript holds the header and the task message, a display file
        naming the spawning cell the parent would have run (it never ran), and a reply per
        worker appended to the parent's own transcript."""
        self.stream.agent_start()
        self.index_turns([self.user], shards, {}, "Answering the shards directly.")
        with self.cell_turn([], "Recording the workers.", FORGE_CELL) as cell:
            claimed = spawn_cell(shards, 1)
            for shard in shards:
                child_id = "sub-" + hex_id(8)
                session_dir = os.path.join(self.artifacts_dir, child_id)
                header = session_header(self.cwd, now_ms(), parent_file=self.root_file)
                path = os.path.join(session_dir, header["id"] + ".jsonl")
                session = Session(Transcript(path, header), header, self.behaviour, 0)
                prompt = child_prompt(shard)
                child = Child(
                    child_id, shard.worker, prompt, session, session_dir, claimed, now_ms()
                )
                self.ledger.spawn(child_id, self.root_file, path, shard.worker)
                self.send_task(child)
                self.write_display(child, "completed")
                child.settled = True
                self.forged_reply(child)
            cell.stdout = f"wrote {len(shards)} workers\n"
        self.text_turn([], f"Recorded {len(shards)} workers.")
        self.stream.agent_end()

    def spawn_and_end_turn(self, shards: list[Shard]) -> None:
        """end-turn-early: spawn one child per shard, then end the turn at once (captured
        endturn-oneshot and resident, MODE=spawn)."""
        self.stream.agent_start()
        with self.spawn_turn(shards) as children:
            for child in children:
                self.attempt(child, self.start_cell)
        self.text_turn([], f"Spawned {len(children)} children. Waiting for their replies.")
        self.stream.agent_end()
        if not self.resident:
            self.tear_down(children)
            return
        # Resident: the root idles while its children work; each reply starts a run (§8.3).
        self.on_idle()
        for number, child in enumerate(children, start=1):
            reply = child.reply if child.settled else self.attempt(child, self.finish_cell)
            incoming = [self.reply_entry(reply) if reply else self.terminal_notice(child)]
            self.stream.agent_start()
            if number < len(children):
                self.text_turn(incoming, received(number, len(children)))
            else:
                self.index_turns(incoming, shards, dict(self.answers), ALL_REPORTED)
            self.stream.agent_end()
            self.on_idle()

    def tear_down(self, children: list[Child]) -> None:
        """The one-shot CLI returns at the root's first idle point and stops the worker
        (contract §1 fact 4): every child is aborted mid tool call, and of the notices queued
        for the root only the first few arrive, each starting a turn, the last of which is
        aborted (captured endturn-oneshot). The stream has ended: this is on disk only (§7)."""
        self.stream.end()
        for child in children:
            if not child.settled:  # one whose model failed has ended already
                self.abort_cell(child)
        noticed = children[:NOTICES_BEFORE_DISPOSAL]
        for number, child in enumerate(noticed, start=1):
            notice = self.terminal_notice(child)
            if number < len(noticed):
                self.text_turn([notice], received(number, len(children)))
            else:
                self.root.aborted_message()

    def poll_turn(self, incoming: list[dict], text: str) -> None:
        """Keeps the root's run alive while replies are outstanding, as the task asks."""
        with self.cell_turn(incoming, text, POLL_CELL) as cell:
            time.sleep(POLL_S)
            cell.stdout = "waited\n"

    def answer_directly(self, shards: list[Shard]) -> None:
        """no-spawn, or a single-agent prompt: one cell answers every shard and writes the
        index (the nospawn capture)."""
        known = {}
        if self.fabricates:
            first = shards[0]
            known[first.file] = fabricated(
                compute_answer(shard_path(self.cwd, first), first.question)
            )
        self.stream.agent_start()
        self.index_turns([self.user], shards, known, "Answering the shards directly.")
        self.stream.agent_end()

    def index_turns(
        self, incoming: list[dict], shards: list[Shard], known: dict, text: str
    ) -> None:
        code, index = index_cell(self.cwd, shards, known)
        with self.cell_turn(incoming, text, code) as cell, cell_of(self.artifacts_dir):
            Path(self.cwd, INDEX_FILE).write_text(index, encoding="utf-8")
            cell.stdout = index + "\n"
        self.text_turn([], f"Wrote {INDEX_FILE}.")

    def say(self, text: str) -> None:
        self.stream.agent_start()
        self.text_turn([self.user], text)
        self.stream.agent_end()


JUNK_REPLY = "done"  # what junk-replies' children send instead of their answer
# forge-ledger's cell, as the root's transcript keeps it (what it writes is done in Python).
FORGE_CELL = (
    "import json, os, uuid\n"
    "# meta + one spawn line per worker into rlm-ledger/<key>.jsonl, a sub-<8hex> dir a worker\n"
    "# transcript header, the task and rlm-subagent.json, then a reply per worker\n"
    "print('wrote workers')\n"
)


def trial_draws(env: Mapping[str, str]) -> random.Random:
    """The random draws of one trial: seeded by the flaky seed and the trial index."""
    seed = env.get(FLAKY_SEED_ENV, "0")
    return random.Random(f"{seed}:{env.get(TRIAL_ENV, '0')}")


def flaky_probability(env: Mapping[str, str]) -> float:
    return env_number(env, FLAKY_P_ENV, FLAKY_P_DEFAULT)


def env_number(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        return default


def one_shot_run(cwd: str, sessions: str, behaviour: str, agent_dir: str) -> Run:
    """The root of `--mode json`: its stream goes to stdout, headed by the root header."""
    # The client names the root file, the worker writes a fresh header id: in one-shot runs
    # the file stem is not the header id (contract §1 fact 2).
    root_file = os.path.join(sessions, uuid7(now_ms()) + ".jsonl")
    header = session_header(cwd, now_ms())
    stream = Stream(print_event)
    stream.emit(header)
    return Run(
        cwd=cwd,
        root_file=root_file,
        header=header,
        behaviour=behaviour,
        # The supervisor, and so the worker, runs in --cwd with the CLI's env (contract §2).
        ledger=Ledger(agent_dir, worker_sessions_dir(agent_dir, os.environ), cwd),
        stream=stream,
        env=os.environ,
        resident=False,
        model_endpoint=model_endpoint(agent_dir),
    )
