"""The simulated agent (simulated/agent.py) under the one-shot drive: its detached supervisor,
its formats against the capture for the oracle and every behaviour, a parent that ends its
turn early, model calls through the recording proxy with injected failures, and repeated
trials. What its command line says is the double's own business: runner.py's use of it is
tested end to end (test_runner_*, test_trials: `simulated/flaky` at 1 and 0, `--baseline`).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import sys
import unittest
from pathlib import Path

from swarm_fanout.scripted.model import ScriptedModelServer
from swarm_fanout.shell.proxy import RecordingProxy
from tests import temp_dir
from tests.simulated_case import (
    AGENT,
    CHILD_FAIL_CAPTURE,
    CHILD_ID,
    DEADLINE_S,
    ENDTURN_CAPTURE,
    ENTRY_ID,
    ISO_MS,
    MAIN_CAPTURE,
    NEEDS_PROC,
    ONESHOT,
    REPLY_ID,
    RESIDENT,
    RESPONSE_ID,
    TASKS,
    TOOL_CALL_ID,
    UUID7,
    DaemonClient,
    Run,
    SimulatedAgentCase,
    assert_captured_shapes,
    assistant_texts,
    correct_index,
    event_kind,
    expected_answer,
    ignores_sigterm,
    ipython_codes,
    key_orders,
    kill_and_wait,
    messages,
    notices,
    process_gone,
    read_jsonl,
    replies,
    session_name,
    shapes,
    spawned_ids,
    transcript_kind,
    wait_for,
    worker,
)


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


class OracleTest(SimulatedAgentCase):
    def test_records_have_the_captured_shapes(self):
        run = self.shared_launch()
        ours = assert_captured_shapes(self, run.dir, MAIN_CAPTURE)
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

    def test_ids_and_timestamps_have_the_product_shapes(self):
        run = self.shared_launch()
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
        run = self.shared_launch()
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
        run = self.shared_launch()
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

    def test_each_reply_matches_its_childs_receipt(self):
        run = self.shared_launch()
        by_sender = {r["details"]["from"]["sessionId"]: r for r in replies(run.parent())}
        for path in run.child_files():
            header, *entries = read_jsonl(path)
            reply = by_sender[header["id"]]
            (sent,) = messages(entries, "toolResult")[0]["details"]["sentAgentMessages"]
            self.assertEqual(
                (sent["id"], sent["message"]), (reply["details"]["id"], reply["details"]["message"])
            )
            task = next(e for e in entries if e["type"] == "custom_message")
            self.assertEqual(task["details"]["id"], "spawn:" + path.parent.name)
            self.assertEqual(task["content"], "[task from parent]\n\n" + task["details"]["message"])

    def test_child_usage_is_attributed_once_per_child_call(self):
        run = self.shared_launch()
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

    def test_display_files_record_the_spawning_cell(self):
        run = self.shared_launch()
        spawn_code = ipython_codes(run.parent())[0]
        for path in run.child_files():
            display = json.loads((path.parent / "rlm-subagent.json").read_text())
            self.assertEqual(display["spawnCode"], spawn_code)
            self.assertEqual((display["status"], display["sessionFile"]), ("completed", str(path)))
            self.assertEqual(display["childId"], path.parent.name)

    def test_stdout_has_one_message_end_per_root_model_call(self):
        run = self.shared_launch()
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


class BehaviourTest(SimulatedAgentCase):
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
        """The receiver's agent_message from a sibling: the sender's endpoint in `from`, the
        receiver's in `target` (source core/agent-messages.ts createAgentSessionMessage); the
        sender's toolResult records it with receiverRole `sibling` (core/kernel/index.ts
        KernelSentAgentMessage)."""
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


class EndTurnEarlyTest(SimulatedAgentCase):
    """A parent that ends its turn right after spawning: lost one-shot. Fine resident: the
    runner waits past the daemon's first idle point (test_runner_resident)."""

    def test_one_shot_tears_the_children_down_mid_call(self):
        run = self.shared_launch("end-turn-early", ONESHOT)
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
        run = self.shared_launch("end-turn-early", ONESHOT)
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
        run = self.shared_launch("end-turn-early", ONESHOT)
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
        run = self.shared_launch("end-turn-early", ONESHOT)
        assert_captured_shapes(self, run.dir, ENDTURN_CAPTURE)


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
        model = ScriptedModelServer(os.path.join(temp_dir(self), "model-log.jsonl"), echo=True)
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
        assert_captured_shapes(self, run.dir, CHILD_FAIL_CAPTURE)

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


if __name__ == "__main__":
    unittest.main()
