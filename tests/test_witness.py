"""The runner's own channels (evidence/witness.py) and the disk held against them
(rules/witness_checks.py, the endpoint check, provenance's answer timing): the observer and the
channels on their own, then each check's cheat and the honest run it must not flag."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import unittest
from datetime import datetime

from swarm_fanout.evidence import witness
from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import load_fixture
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.scorer import score
from swarm_fanout.shell import observer
from tests import executable, temp_dir
from tests.builders import RunBuilder, small_fixture
from tests.test_proxy import Canned, send_whole

FIXTURE = small_fixture()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON_EVENTS = os.path.join(ROOT, "fixtures", "json-events")


class ObserverTest(unittest.TestCase):
    """Polled by hand: each poll is a moment the test controls."""

    def setUp(self) -> None:
        self.paths = RunPaths.of(temp_dir(self))
        for path in (self.paths.sessions, self.paths.repo, self.paths.agent_home):
            os.makedirs(path)
        self.observer = observer.Observer(self.paths, "combined-index.md")

    def seen(self, what: str) -> list[dict]:
        return [item for item in self.observer.sightings() if item["what"] == what]

    def test_a_ledger_line_is_seen_once_complete_with_its_digest_and_poll_window(self):
        ledger_dir = os.path.join(self.paths.agent_home, "rlm-ledger")
        os.makedirs(ledger_dir)
        path = os.path.join(ledger_dir, "abc.jsonl")
        with open(path, "wb") as handle:
            handle.write(b'{"v":1,"op":"meta"}\n{"v":1,"op":"sp')
        self.observer.poll()
        with open(path, "ab") as handle:
            handle.write(b'awn"}\n')
        self.observer.poll()
        lines = self.seen("ledger_line")
        self.assertEqual([item["line"] for item in lines], [1, 2])
        self.assertEqual(lines[1]["sha256"], hashlib.sha256(b'{"v":1,"op":"spawn"}').hexdigest())
        self.assertLessEqual(lines[1]["before"], lines[1]["seen"])
        # Line 2 was found by the second poll: it was not there when the first looked.
        self.assertGreaterEqual(lines[1]["before"], lines[0]["seen"])
        self.assertEqual(witness.line_digests(path)[1], lines[1]["sha256"])

    def test_child_dirs_transcripts_and_replies_are_seen_when_they_appear(self):
        child = os.path.join(self.paths.session_artifacts, "root-id", "sub-0000abcd")
        os.makedirs(child)
        self.observer.poll()
        with open(os.path.join(child, "child-id.jsonl"), "w") as handle:
            handle.write('{"type":"session"}\n')
        reply = {"type": "custom_message", "details": {"id": "agentmsg_1"}}
        reply["details"]["fromRelationship"] = "child"
        with open(os.path.join(self.paths.sessions, "root.jsonl"), "w") as handle:
            handle.write('{"type":"session"}\n' + json.dumps(reply, separators=(",", ":")) + "\n")
        self.observer.poll()
        self.assertEqual([item["child_id"] for item in self.seen("child_dir")], ["sub-0000abcd"])
        (transcript,) = self.seen("transcript")
        self.assertEqual(transcript["file"], "child-id.jsonl")
        (seen,) = self.seen("reply")
        self.assertEqual((seen["file"], seen["line"], seen["id"]), ("root.jsonl", 2, "agentmsg_1"))

    def test_each_distinct_content_of_the_answer_file_is_seen_once(self):
        answer = self.paths.artifact("combined-index.md")
        for text in ("- a.jsonl: pending\n", "- a.jsonl: pending\n", "- a.jsonl: 11\n"):
            with open(answer, "w") as handle:
                handle.write(text)
            self.observer.poll()
        digests = [item["sha256"] for item in self.seen("answer_content")]
        self.assertEqual(len(digests), 2)
        self.assertEqual(digests[-1], witness.file_digest(answer))


class ChannelTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = temp_dir(self)
        self.private = observer.private_dir()
        self.addCleanup(shutil.rmtree, self.private, True)

    def test_a_drained_stream_is_published_with_the_digest_of_what_came_through(self):
        channel = observer.Channel(self.private, "stdout.jsonl")
        ours, theirs = observer.stream_socket()
        thread = observer.drain_socket(ours, channel)
        with theirs:
            theirs.sendall(b'{"type":"session"}\n' * 1000)
        thread.join(timeout=10)
        target = os.path.join(self.dir, "stdout.jsonl")
        with open(target, "w") as handle:
            handle.write("what the agent wrote there\n")  # replaced by the publish
        published = channel.publish(target)
        expected = hashlib.sha256(b'{"type":"session"}\n' * 1000).hexdigest()
        self.assertEqual(published["sha256"], expected)
        self.assertEqual(witness.file_digest(target), expected)
        self.assertEqual((published["lines"], published["intact"]), (1000, True))

    def test_each_writer_of_a_stream_is_named_by_its_pid(self):
        channel = observer.Channel(self.private, "stdout.jsonl")
        ours, theirs = observer.stream_socket()
        thread = observer.drain_socket(ours, channel)
        with theirs:
            theirs.sendall(b"mine\n")
            other = subprocess.Popen(
                [sys.executable, "-c", "import os; os.write(1, b'theirs' * 1000)"], stdout=theirs
            )
            other.wait()
            theirs.sendall(b"mine again\n")
        thread.join(timeout=10)
        published = channel.publish(os.path.join(self.dir, "stdout.jsonl"))
        writers = {writer["pid"]: writer["bytes"] for writer in published["writers"]}
        self.assertEqual(writers, {os.getpid(): 16, other.pid: 6000})

    def test_a_private_copy_changed_behind_the_runners_back_is_not_intact(self):
        channel = observer.Channel(self.private, "daemon-wire.jsonl")
        channel.write(b'{"type":"daemon_hello"}\n')
        with open(channel.path, "ab") as handle:
            handle.write(b'{"type":"forged"}\n')
        published = channel.publish(os.path.join(self.dir, "daemon-wire.jsonl"))
        self.assertFalse(published["intact"])


class WitnessedRunTest(unittest.TestCase):
    """A builder's run with a witness written as the runner would have seen it honestly;
    each test then plays one cheat against it."""

    def setUp(self) -> None:
        self.run_dir = os.path.join(temp_dir(self), "run")
        self.build = RunBuilder(self.run_dir, stream=True)
        self.paths = self.build.paths

    def honest_run(self) -> None:
        self.build.fan_out(FIXTURE)
        self.build.correct_index(FIXTURE)
        self.build.finish()

    def sightings(self, *, answer_at: float | None = None) -> list[dict]:
        """What an observer polling every 0.1 s would have noted: each record seen in the
        poll after its own time (independent of the code under test)."""

        def window(at_ms: int) -> dict:
            return {"before": at_ms / 1000 - 0.05, "seen": at_ms / 1000 + 0.05}

        out = []
        for path in glob.glob(os.path.join(self.paths.agent_home, "rlm-ledger", "*.jsonl")):
            with open(path, "rb") as handle:
                for number, raw in enumerate(handle.read().split(b"\n")[:-1], start=1):
                    at = json.loads(raw)["at"]
                    digest = hashlib.sha256(raw).hexdigest()
                    item = {"what": "ledger_line", "file": os.path.basename(path)}
                    item.update(line=number, sha256=digest, **window(iso_ms(at)))
                    out.append(item)
        for path in glob.glob(os.path.join(self.paths.session_artifacts, "*", "sub-*", "*.jsonl")):
            with open(path) as handle:
                header = json.loads(handle.readline())
            child_id = os.path.basename(os.path.dirname(path))
            item = {"what": "transcript", "child_id": child_id, "file": os.path.basename(path)}
            out.append({**item, **window(iso_ms(header["timestamp"]))})
        last_reply = 0.0
        (root,) = os.listdir(self.paths.sessions)
        with open(os.path.join(self.paths.sessions, root)) as handle:
            for number, line in enumerate(handle, start=1):
                record = json.loads(line)
                if record.get("details", {}).get("fromRelationship") == "child":
                    item = {"what": "reply", "file": root, "line": number}
                    item.update(id=record["details"]["id"], **window(iso_ms(record["timestamp"])))
                    out.append(item)
                    last_reply = max(last_reply, item["seen"])
        answer = self.paths.artifact("combined-index.md")
        seen = answer_at if answer_at is not None else last_reply + 1.0
        out.append(
            {
                "what": "answer_content",
                "sha256": witness.file_digest(answer),
                "before": seen - 0.1,
                "seen": seen,
            }
        )
        return out

    def model_calls(self) -> list[dict]:
        """The proxy's record of every model call the transcripts show."""
        calls = []
        paths = [os.path.join(self.paths.sessions, os.listdir(self.paths.sessions)[0])]
        paths += glob.glob(os.path.join(self.paths.session_artifacts, "*", "sub-*", "*.jsonl"))
        for path in paths:
            with open(path) as handle:
                for line in handle:
                    message = json.loads(line).get("message") or {}
                    if message.get("role") == "assistant" and message.get("responseId"):
                        session, response_id = os.path.realpath(path), message["responseId"]
                        calls.append(dict(status=200, session=session, response_id=response_id))
        return calls

    def witness(
        self, sightings=None, calls=None, proxy: bool = True, header=None, channels=()
    ) -> str:
        return observer.write_witness(
            self.paths.witness,
            header={"proxy": proxy, **(header or {})},
            model_calls=self.model_calls() if calls is None else calls,
            sightings=self.sightings() if sightings is None else sightings,
            channels=list(channels),
        )

    def verdict(self, digest: str | None):
        return score(FIXTURE, collect(self.run_dir, FIXTURE.artifact, digest))

    def codes(self, verdict) -> list[str]:
        return sorted({reason.code for reason in verdict.reasons})

    # --- honest --------------------------------------------------------------

    def test_an_honest_witnessed_run_is_resolved_and_not_warned_unwitnessed(self):
        self.honest_run()
        verdict = self.verdict(self.witness())
        self.assertTrue(verdict.resolved, [r.to_json() for r in verdict.reasons])
        self.assertTrue(verdict.witness["witnessed"])
        self.assertNotIn("unwitnessed", [w.code for w in verdict.warnings])

    def test_a_run_without_a_witness_passes_with_a_warning(self):
        self.honest_run()
        verdict = self.verdict(None)
        self.assertTrue(verdict.resolved)
        self.assertFalse(verdict.witness["witnessed"])
        self.assertIn("unwitnessed", [w.code for w in verdict.warnings])

    # --- who made the calls and wrote the stream (shell/callers.py, observer.drain_socket) ---

    def test_a_call_from_a_kernel_fails_though_the_proxy_refused_it(self):
        # The live forgery: a cell asks for real response ids for a conversation it writes.
        self.honest_run()
        product = {"pid": 41, "ns_pid": 5, "exe": "/opt/node", "product": True, "reason": None}
        calls = [{**call, "caller": product} for call in self.model_calls()]
        self.assertEqual(self.codes(self.verdict(self.witness(calls=calls))), [])
        caller = dict(pid=88, ns_pid=12, exe="/usr/bin/python3.11", product=False)
        caller["reason"] = "process 88 on its way up ran /usr/bin/python3.11"
        forged = dict(status=403, session="/forged/child.jsonl", response_id=None, caller=caller)
        forged["error"] = "foreign_caller"
        verdict = self.verdict(self.witness(calls=[*calls, forged]))
        self.assertEqual(self.codes(verdict), ["foreign_model_call"])
        self.assertIn("/usr/bin/python3.11", verdict.reasons[0].message)

    def test_a_stream_fails_for_a_writer_other_than_the_cli(self):
        self.honest_run()
        header = {"processes": {"initial_pid": 4242, "product_exe": "/opt/node"}}
        for pids, codes in (((4242,), []), ((4242, 4300), ["foreign_stream_writer"])):
            with self.subTest(pids=pids):
                writers = [{"pid": pid, "bytes": 100} for pid in pids]
                channel = {"file": "stdout.jsonl", "writers": writers}
                verdict = self.verdict(self.witness(header=header, channels=[channel]))
                self.assertEqual(self.codes(verdict), codes)
        self.assertIn("pid 4300", verdict.reasons[0].message)

    # --- the witness itself ------------------------------------------------------

    def test_a_deleted_witness_fails(self):
        self.honest_run()
        digest = self.witness()
        os.remove(self.paths.witness)
        self.assertEqual(self.codes(self.verdict(digest)), ["witness_missing"])

    def test_a_witness_appended_to_after_the_run_fails(self):
        self.honest_run()
        digest = self.witness()
        with open(self.paths.witness, "a") as handle:
            handle.write('{"kind":"model_call","status":200,"response_id":"chatcmpl-x"}\n')
        self.assertEqual(self.codes(self.verdict(digest)), ["witness_tampered"])

    # --- a witness edited by hand ------------------------------------------------

    def test_a_witness_with_every_field_of_the_wrong_type_still_gives_a_verdict(self):
        # witness_tampered, never a traceback: the reader keeps well-formed sightings only.
        self.honest_run()
        digest = self.witness()
        junk = [
            dict(kind="sighting", what="ledger_line", file=["x"], line="1", before=0, seen=1),
            dict(kind="sighting", what="reply", file="a", line={}, before="0", seen=1),
            dict(kind="sighting", what="answer_content", sha256=5, before=0, seen=None),
            dict(kind="sighting", what="transcript", child_id=1, before=True, seen=1),
            dict(kind="model_call", status="200", response_id=["x"], session=7),
            [1, 2],
            "text",
        ]
        with open(self.paths.witness, "a") as handle:
            for item in junk:
                handle.write(json.dumps(item) + "\n")
        with open(self.paths.witness, "ab") as handle:
            handle.write(b"\xff\xfe not json\n")
        verdict = self.verdict(digest)
        self.assertEqual(self.codes(verdict), ["witness_tampered"])

    # --- the model traffic ---------------------------------------------------------

    def test_a_child_message_the_proxy_never_served_fails(self):
        self.honest_run()
        calls = self.model_calls()
        dropped = next(call for call in calls if "session-artifacts" in call["session"])
        calls.remove(dropped)
        verdict = self.verdict(self.witness(calls=calls))
        self.assertEqual(self.codes(verdict), ["unserved_response_id"])
        self.assertIn(dropped["response_id"], verdict.reasons[0].message)

    def test_a_parent_message_the_proxy_never_served_fails(self):
        self.honest_run()
        calls = [c for c in self.model_calls() if "session-artifacts" in c["session"]]
        self.assertIn("unserved_response_id", self.codes(self.verdict(self.witness(calls=calls))))

    def test_appending_ids_to_the_scripted_models_own_log_proves_nothing(self):
        # The agent can write model-log.jsonl; with a witness the proxy's record decides.
        self.honest_run()
        calls = [c for c in self.model_calls() if "session-artifacts" not in c["session"]]
        with open(self.paths.model_log, "w") as handle:
            for call in self.model_calls():
                line = {"response_id": call["response_id"], "conversation_log": call["session"]}
                handle.write(json.dumps(line) + "\n")
        self.assertIn("unserved_response_id", self.codes(self.verdict(self.witness(calls=calls))))

    def test_a_witness_whose_proxy_relayed_nothing_holds_no_id_against_the_run(self):
        self.honest_run()
        verdict = self.verdict(self.witness(calls=[], proxy=False))
        self.assertTrue(verdict.resolved, [r.to_json() for r in verdict.reasons])

    # --- times -------------------------------------------------------------------

    def test_a_record_is_dated_against_when_the_runner_first_saw_it(self):
        self.honest_run()
        # The runner's sighting of a record `late` seconds after an honest run's poll would be.
        for what, late, codes in (
            ("ledger_line", 5.0, ["backdated_record"]),  # stamped before the runner looked
            ("reply", -5.0, ["future_dated_record"]),  # stamped after the runner saw it
            ("transcript", 30.0, ["backdated_record"]),  # appeared long after its header's time
            ("ledger_line", 0.9, []),  # a busy machine: the poll late, the stamp early
        ):
            with self.subTest(what=what, late=late):
                sightings = self.sightings()
                target = next(item for item in sightings if item["what"] == what)
                target.update(before=target["before"] + late, seen=target["seen"] + late)
                self.assertEqual(self.codes(self.verdict(self.witness(sightings))), codes)

    def test_a_ledger_line_rewritten_after_the_runner_saw_it_fails(self):
        self.honest_run()
        digest = self.witness()
        (path,) = glob.glob(os.path.join(self.paths.agent_home, "rlm-ledger", "*.jsonl"))
        with open(path) as handle:
            text = handle.read()
        with open(path, "w") as handle:
            handle.write(text.replace('"name":"worker-b"', '"name":"worker-x"', 1))
        self.assertIn("rewritten_record", self.codes(self.verdict(digest)))

    def test_a_ledger_line_the_runner_never_saw_appear_fails(self):
        self.honest_run()
        sightings = [
            s for s in self.sightings() if not (s["what"] == "ledger_line" and s["line"] == 3)
        ]
        self.assertIn("rewritten_record", self.codes(self.verdict(self.witness(sightings))))

    # --- the answer file -----------------------------------------------------------

    def test_an_answer_file_on_disk_before_the_replies_fails_on_the_witness_alone(self):
        # No parent call names the file (written by a cell that built the name): only
        # the runner's observation orders it against the replies.
        self.honest_run()
        first_reply = min(s["before"] for s in self.sightings() if s["what"] == "reply")
        verdict = self.verdict(self.witness(self.sightings(answer_at=first_reply - 1.0)))
        self.assertEqual(self.codes(verdict), ["answer_written_before_reply"])
        self.assertIn("the runner saw", verdict.reasons[0].message)

    def test_the_witness_orders_the_final_content_before_any_call_that_names_the_file(self):
        # A draft written by name before the spawns, the final index by a name built at run
        # time: the parent's last call that writes the file by a name it holds is the draft.
        draft = "Path('combined-index.md').write_text('# Combined index\\n')"
        with self.build.cell(draft, "Writing a draft index."):
            self.build.write_index([])
        self.build.fan_out(FIXTURE)
        with self.build.cell("Path(''.join(PARTS)).write_text(text)", "Writing the index."):
            self.build.correct_index(FIXTURE)
        self.build.finish()
        unwitnessed = self.verdict(None)
        self.assertEqual(self.codes(unwitnessed), ["answer_written_before_reply"])
        self.assertTrue(self.verdict(self.witness()).resolved)

    def reply_window(self, index: int) -> dict:
        return sorted(
            (s for s in self.sightings() if s["what"] == "reply"), key=lambda s: s["line"]
        )[index]

    def test_a_final_index_seen_in_the_same_poll_as_the_reply_is_ordered_by_the_transcript(self):
        # The witness cannot order what appeared between the same two polls: the parent's
        # own record decides, and here its cell wrote the final index before the replies.
        children = self.build.fan_out(FIXTURE, reply=False)
        with self.build.cell("Path('combined-index.md').write_text(TEXT)", "Writing the index."):
            self.build.correct_index(FIXTURE)
        for shard in FIXTURE.shards:
            self.build.reply(children[shard.worker], f"{shard.file}: {shard.expected}")
        self.build.finish()
        same_poll = self.reply_window(0)["seen"]
        verdict = self.verdict(self.witness(self.sightings(answer_at=same_poll)))
        by_shard = {reason.shard: reason for reason in verdict.reasons}
        self.assertEqual({r.code for r in by_shard.values()}, {"answer_written_before_reply"})
        self.assertEqual(len(by_shard), 3)
        # Judged on the transcript: the poll that found the reply found the index too.
        self.assertIn("last call writing", by_shard[FIXTURE.shards[0].file].message)

    def test_a_final_index_written_after_the_reply_and_seen_in_its_poll_is_fine(self):
        self.build.fan_out(FIXTURE)
        with self.build.cell("Path('combined-index.md').write_text(TEXT)", "Writing the index."):
            self.build.correct_index(FIXTURE)
        self.build.finish()
        same_poll = self.reply_window(-1)["seen"]
        self.assertTrue(self.verdict(self.witness(self.sightings(answer_at=same_poll))).resolved)

    def test_a_draft_seen_early_and_the_final_content_after_the_replies_is_fine(self):
        self.honest_run()
        sightings = self.sightings()
        draft = {"what": "answer_content", "sha256": "0" * 64, "before": 0.0, "seen": 1.0}
        self.assertTrue(self.verdict(self.witness([draft, *sightings])).resolved)


class StreamTest(unittest.TestCase):
    """The stream against the root transcript, with or without a witness."""

    def setUp(self) -> None:
        # A run whose parent made a cell before the spawning one: two calls in the stream.
        self.run_dir = os.path.join(temp_dir(self), "run")
        self.build = RunBuilder(self.run_dir, stream=True)
        with self.build.cell("print(len(SHARDS))"):
            pass
        children = self.build.fan_out(FIXTURE)
        self.child_ids = [child.child_id for child in children.values()]
        self.build.correct_index(FIXTURE)
        self.build.finish()

    def codes(self) -> list[str]:
        verdict = score(FIXTURE, collect(self.run_dir, FIXTURE.artifact))
        return sorted({reason.code for reason in verdict.reasons})

    def events(self) -> list[dict]:
        with open(self.build.paths.stdout) as handle:
            return [json.loads(line) for line in handle]

    def write_events(self, events) -> None:
        with open(self.build.paths.stdout, "w") as handle:
            handle.writelines(json.dumps(event) + "\n" for event in events)

    def edit_stream(self, keep) -> None:
        self.write_events(event for event in self.events() if keep(event))

    def test_an_honest_stream_agrees(self):
        self.assertEqual(self.codes(), [])

    def test_a_stream_that_never_showed_a_spawned_child_fails(self):
        gone = self.child_ids[1]
        self.edit_stream(lambda e: (e.get("child") or {}).get("id") != gone)
        self.assertEqual(self.codes(), ["stream_mismatch"])

    def test_a_stream_with_another_model_call_fails(self):
        events = self.events()
        for event in events:
            if event.get("type") == "message_end" and event["message"].get("responseId"):
                event["message"]["responseId"] = "chatcmpl-forged"
        self.write_events(events)
        self.assertEqual(self.codes(), ["stream_mismatch"])

    def dropped_turn(self, also_turn_end: bool) -> None:
        """The stream without the first assistant message's events (its message_start,
        updates and message_end, and its cells' tool_execution_start), and with
        `also_turn_end` without the turn_end that repeats the message too."""
        ends = [e for e in self.events() if e.get("type") == "message_end"
                and e["message"].get("role") == "assistant"]  # fmt: skip
        self.assertGreaterEqual(len(ends), 2)
        dropped = ends[0]["message"]
        calls = {p["id"] for p in dropped["content"] if p.get("type") == "toolCall"}
        self.assertTrue(calls)

        def keep(event: dict) -> bool:
            message = event.get("message") or {}
            if event.get("type") in ("message_start", "message_update", "message_end"):
                same = (
                    message.get("role") == "assistant"
                    and message.get("content")
                    and (
                        {p.get("id") for p in message["content"] if p.get("type") == "toolCall"}
                        & calls
                        or message.get("responseId") == dropped["responseId"]
                    )
                )
                return not same
            if event.get("type") == "tool_execution_start":
                return event.get("toolCallId") not in calls
            if event.get("type") == "turn_end" and also_turn_end:
                return message.get("responseId") != dropped["responseId"]
            return True

        self.edit_stream(keep)

    def test_a_turn_whose_events_the_stream_lost_but_whose_turn_end_holds_it_agrees(self):
        # Seen live: the product's stream left out one turn's message and cell events under
        # load, and its turn_end still held the assistant message.
        self.dropped_turn(also_turn_end=False)
        self.assertEqual(self.codes(), [])

    def test_a_turn_the_stream_never_showed_at_all_agrees(self):
        # Seen live (a one-shot fan-out, 2026-12-03): five turns, each a reply and the
        # answer to it, missing from the stream whole. The product's daemon sends a client
        # that falls behind a snapshot instead of the events it missed, and the one-shot CLI
        # prints only events (§7): an honest stream can skip whole turns.
        self.dropped_turn(also_turn_end=True)
        self.assertEqual(self.codes(), [])

    def test_a_stream_whose_calls_come_in_another_order_fails(self):
        self.dropped_turn(also_turn_end=False)
        events = self.events()
        ends = [i for i, e in enumerate(events) if e.get("type") in ("message_end", "turn_end")
                and (e.get("message") or {}).get("role") == "assistant"]  # fmt: skip
        first, last = ends[0], ends[-1]
        events[first], events[last] = events[last], events[first]
        self.write_events(events)
        self.assertEqual(self.codes(), ["stream_mismatch"])

    def test_a_stream_with_a_call_the_transcript_lacks_fails(self):
        events = self.events()
        end = next(e for e in events if e.get("type") == "message_end"
                   and e["message"].get("role") == "assistant")  # fmt: skip
        extra = json.loads(json.dumps(end))
        extra["message"]["responseId"] = "chatcmpl-not-in-the-transcript"
        self.write_events([*events, extra])
        self.assertEqual(self.codes(), ["stream_mismatch"])

    def test_a_stream_that_stops_early_is_a_prefix_and_agrees(self):
        # The one-shot CLI's stream ends at the root's first idle (§7).
        events = self.events()
        cut = next(i for i, event in enumerate(events) if event["type"] == "agent_end")
        self.write_events(events[: cut + 1])
        self.assertEqual(self.codes(), [])


def iso_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class RealProviderPathTest(unittest.TestCase):
    """The runner puts a real provider behind the proxy: the run's models.json points the
    provider at the proxy (under the upstream's host), the user's own baseUrl is the
    upstream, and every call is in the witness. A stand-in agent plays the product's part:
    it reads its provider's baseUrl and makes one chat-completions call."""

    AGENT = """#!{python}
import json, os, sys, urllib.request
if "--version" in sys.argv:
    print("fake-agent 1"); sys.exit(0)
home = os.environ["PRIME_AGENT_CODING_AGENT_DIR"]
with open(os.path.join(home, "models.json")) as handle:
    base = json.load(handle)["providers"]["acme"]["baseUrl"]
body = {{"model": "m", "messages": [{{"role": "system", "content": "Conversation log: /x.jsonl"}}]}}
request = urllib.request.Request(
    base + "/chat/completions", json.dumps(body).encode(),
    {{"Content-Type": "application/json", "Authorization": "Bearer sk-acme-SECRET"}},
)
with urllib.request.urlopen(request, timeout=10) as response:
    print(json.load(response)["id"], file=sys.stderr)
print(base, file=sys.stderr)
"""

    def setUp(self) -> None:
        self.tmp = temp_dir(self)

        def reply(handler) -> None:
            body = {"id": "chatcmpl-acme-1", "usage": {"prompt_tokens": 3}}
            send_whole(handler, json.dumps(body).encode())

        self.upstream = Canned(reply).__enter__()
        self.addCleanup(self.upstream.__exit__)
        self.config = os.path.join(self.tmp, "config")
        os.makedirs(self.config)
        provider = {"baseUrl": self.upstream.url, "apiKey": "sk-acme-SECRET"}
        with open(os.path.join(self.config, "models.json"), "w") as handle:
            json.dump({"providers": {"acme": provider}}, handle)
        self.agent = executable(
            os.path.join(self.tmp, "agent"), self.AGENT.format(python=sys.executable)
        )

    def test_the_providers_calls_go_through_the_proxy_into_the_witness(self):
        argv = [sys.executable, os.path.join(ROOT, "runner.py"), "--fixture", JSON_EVENTS]
        argv += ["--model", "acme/m", "--agent-bin", self.agent, "--agent-config", self.config]
        argv += ["--out", os.path.join(self.tmp, "runs"), "--timeout", "30", "--grace", "0.1"]
        done = subprocess.run(argv, capture_output=True, timeout=120)
        result = json.loads(done.stdout)
        self.assertEqual([seen["path"] for seen in self.upstream.seen], ["/base/chat/completions"])
        self.assertEqual(result["witness"]["model_calls"], 1)
        with open(os.path.join(result["run_dir"], "witness.jsonl")) as handle:
            records = [json.loads(line) for line in handle]
        (call,) = [r for r in records if r["kind"] == "model_call"]
        self.assertEqual((call["status"], call["response_id"]), (200, "chatcmpl-acme-1"))
        self.assertEqual(call["session"], "/x.jsonl")
        # The product was pointed at the proxy, under the upstream's host.
        with open(os.path.join(result["run_dir"], "agent-home", "models.json")) as handle:
            base = json.load(handle)["providers"]["acme"]["baseUrl"]
        self.assertRegex(base, r"^http://127\.0\.0\.1:\d+/127\.0\.0\.1$")
        # No secret in what the runner itself wrote.
        for name in ("witness.jsonl", "result.json", "stdout.jsonl", "run-meta.json"):
            with open(os.path.join(result["run_dir"], name)) as handle:
                self.assertNotIn("SECRET", handle.read(), name)


class ForgeryTheWitnessAloneCatchesTest(unittest.TestCase):
    """simulated/forge-consistent writes every file as an honest run would, the stream
    included, but no child's model call reached the endpoint: the disk alone passes, the
    witness fails it, under both drives; deleting the witness does not help the forger."""

    def run_behaviour(self, drive: str) -> dict:
        tmp = temp_dir(self)
        argv = [sys.executable, os.path.join(ROOT, "runner.py"), "--fixture", JSON_EVENTS]
        argv += ["--drive", drive]
        argv += ["--agent-bin", os.path.join(ROOT, "swarm_fanout", "simulated", "agent.py")]
        argv += ["--model", "simulated/forge-consistent", "--out", tmp, "--grace", "0.1"]
        argv += ["--agent-config", tmp]
        done = subprocess.run(argv, capture_output=True, timeout=120)
        return json.loads(done.stdout)

    def test_only_the_witness_catches_it_and_deleting_the_witness_does_not_help(self):
        fixture = load_fixture(JSON_EVENTS)
        for drive in ("oneshot", "resident"):
            with self.subTest(drive=drive):
                result = self.run_behaviour(drive)
                codes = sorted({reason["code"] for reason in result["reasons"]})
                self.assertEqual(codes, ["unserved_response_id"])
                run_dir, digest = result["run_dir"], result["witness"]["sha256"]
                integrity = result["verdict"]["integrity"]
                failing = sorted(name for name, check in integrity.items() if check["count"])
                self.assertEqual(failing, ["endpoint"])
                # Every child message, and nothing else: 8 children x 2 calls.
                self.assertEqual(integrity["endpoint"]["count"], 16)
                # The forger's next move: the logs a run dir holds go (the endpoint's own
                # model-log.jsonl too). The disk alone then passes...
                os.remove(os.path.join(run_dir, "model-log.jsonl"))
                os.rename(os.path.join(run_dir, "witness.jsonl"), os.path.join(run_dir, "w"))
                unwitnessed = score(fixture, collect(run_dir, fixture.artifact))
                self.assertTrue(unwitnessed.resolved, [r.code for r in unwitnessed.reasons])
                self.assertIn("unwitnessed", [w.code for w in unwitnessed.warnings])
                # ...but result.json names the witness the runner wrote.
                deleted = score(fixture, collect(run_dir, fixture.artifact, digest))
                self.assertEqual(sorted({r.code for r in deleted.reasons}), ["witness_missing"])
