"""The ACP drive's pieces on their own: a line read as JSON-RPC (shell/acp.py), what the
session's updates say of the prompt's turn (shell/acp_drive.py `Turn`), both held to a
stream the real product wrote (tests/data/real-acp), and the witness's stream check over an
ACP stream (evidence/acp_stream.py, rules/witness_checks.py): the honest stream and the
forged ones.
"""

from __future__ import annotations

import json
import os
import unittest

from swarm_fanout.evidence.acp_stream import read_acp_stream
from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.reporting.summary import summarize
from swarm_fanout.scorer import score
from swarm_fanout.shell.acp import AcpError, parse_message
from swarm_fanout.shell.acp_drive import Turn
from tests import temp_dir
from tests.builders import RunBuilder, small_fixture
from tests.test_trials import errored, record, scored

FIXTURE = small_fixture()
REAL_STREAM = os.path.join(os.path.dirname(__file__), "data", "real-acp", "end-turn-early.jsonl")
META = "ai.primeintellect.prime-agent"


def real_messages() -> list[dict]:
    with open(REAL_STREAM, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


class ParseMessageTest(unittest.TestCase):
    def test_requests_notifications_and_responses_are_messages(self):
        for line in (
            b'{"jsonrpc":"2.0","id":1,"result":{}}',
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"x"}}',
            b'{"jsonrpc":"2.0","method":"session/update","params":{}}',
            b'{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{}}',
        ):
            with self.subTest(line=line):
                self.assertIsInstance(parse_message(line), dict)

    def test_anything_else_is_a_bad_message(self):
        for line in (
            b"{not json",
            b"[1, 2]",
            b'{"id":1,"result":{}}',  # no jsonrpc
            b'{"jsonrpc":"1.0","id":1,"result":{}}',
            b'{"jsonrpc":"2.0","id":1,"result":{},"error":{}}',
            b'{"jsonrpc":"2.0","id":1}',
            b'{"jsonrpc":"2.0","result":{}}',
            b'{"jsonrpc":"2.0","method":7}',
            b"\xff\xfe",
        ):
            with self.subTest(line=line):
                error = parse_message(line)
                self.assertIsInstance(error, AcpError)
                self.assertEqual(error.code, "acp_bad_message")


class TurnTest(unittest.TestCase):
    def follow(self, messages: list[dict], session_id: str | None = None) -> Turn:
        """The turn as the drive follows it, of the session the stream opened unless named."""
        turn = Turn(session_id or messages[1]["result"]["sessionId"])
        for message in messages:
            if message.get("id") == 3 and "result" in message:  # session/prompt's response
                turn.responded = True
            elif "method" in message:
                turn.update(message)
        return turn

    def test_the_real_stream_counts_every_child_at_the_response_and_ends_terminal(self):
        turn = self.follow(real_messages())
        # The captured end-turn-early run: the parent spawned 8 children and ended its turn.
        self.assertEqual(turn.outstanding_at_response, 8)
        self.assertTrue(turn.promises_terminal())
        self.assertEqual(turn.terminal["quiescence"]["outstandingSubagents"], 0)
        self.assertEqual(turn.turn_id, 1)

    def test_another_sessions_updates_are_not_this_turns(self):
        turn = self.follow(real_messages(), "another-session")
        self.assertIsNone(turn.boundary)
        self.assertIsNone(turn.outstanding_at_response)
        self.assertIsNone(turn.terminal)

    def test_a_terminal_update_still_counting_children_is_not_terminal(self):
        messages = real_messages()
        for message in messages:
            meta = message.get("params", {}).get("update", {}).get("_meta", {}).get(META, {})
            if meta.get("phase") == "terminalQuiescence":
                meta["quiescence"]["outstandingSubagents"] = 1
        self.assertIsNone(self.follow(messages).terminal)


class RealAcpStreamTest(unittest.TestCase):
    def test_the_real_stream_shows_the_spawning_cell_and_every_child(self):
        stream = read_acp_stream(REAL_STREAM)
        self.assertEqual(len(stream.tool_call_ids), 1)
        self.assertEqual(len(stream.child_ids), 8)
        self.assertEqual(stream.findings, ())


class AcpStreamCheckTest(unittest.TestCase):
    """The stream check over an ACP stream: cells in the transcript's order (gaps allowed)
    and a subagent update for every child spawned in a cell it shows."""

    def setUp(self) -> None:
        self.run_dir = os.path.join(temp_dir(self), "run")
        build = RunBuilder(self.run_dir, stream=True)
        with build.cell("print(len(SHARDS))"):
            pass
        children = build.fan_out(FIXTURE)
        self.child_ids = [child.child_id for child in children.values()]
        build.correct_index(FIXTURE)
        build.finish()
        # The builder's --mode json stream, as the ACP updates the product maps it to.
        with open(build.paths.stdout, encoding="utf-8") as handle:
            events = [json.loads(line) for line in handle]
        os.unlink(build.paths.stdout)
        self.path = build.paths.acp_stream
        self.write([update for event in events for update in acp_updates(event)])

    def write(self, updates: list[dict]) -> None:
        with open(self.path, "w", encoding="utf-8") as handle:
            for update in updates:
                params = {"sessionId": "s-1", "update": update}
                message = {"jsonrpc": "2.0", "method": "session/update", "params": params}
                handle.write(json.dumps(message) + "\n")

    def updates(self) -> list[dict]:
        with open(self.path, encoding="utf-8") as handle:
            return [json.loads(line)["params"]["update"] for line in handle]

    def codes(self) -> list[str]:
        verdict = score(FIXTURE, collect(self.run_dir, FIXTURE.artifact))
        return sorted({reason.code for reason in verdict.reasons})

    def cells(self) -> list[int]:
        return [i for i, u in enumerate(self.updates()) if u["sessionUpdate"] == "tool_call"]

    def test_an_honest_stream_agrees(self):
        self.assertGreaterEqual(len(self.cells()), 2)
        self.assertEqual(len(read_acp_stream(self.path).child_ids), len(self.child_ids))
        self.assertEqual(self.codes(), [])

    def test_a_stream_that_skips_a_cell_agrees(self):
        updates = self.updates()
        del updates[self.cells()[0]]
        self.write(updates)
        self.assertEqual(self.codes(), [])

    def test_a_stream_whose_cells_come_in_another_order_fails(self):
        updates = self.updates()
        first, last = self.cells()[0], self.cells()[-1]
        updates[first], updates[last] = updates[last], updates[first]
        self.write(updates)
        self.assertEqual(self.codes(), ["stream_mismatch"])

    def test_a_stream_with_a_cell_the_transcript_lacks_fails(self):
        updates = self.updates()
        forged = dict(updates[self.cells()[0]], toolCallId="call_not_in_the_transcript")
        self.write([*updates, forged])
        self.assertEqual(self.codes(), ["stream_mismatch"])

    def test_a_stream_that_never_showed_a_spawned_child_fails(self):
        gone = self.child_ids[1]
        kept = [u for u in self.updates() if gone not in json.dumps(u)]
        self.write(kept)
        self.assertEqual(self.codes(), ["stream_mismatch"])


class WouldLoseChildrenTest(unittest.TestCase):
    """The run-set summary counts the scored trials a client that stops at the prompt's
    response would have lost children in."""

    def test_trials_with_children_outstanding_at_the_response_are_counted(self):
        records = [
            record(1, dict(scored(True), outstanding_at_response=8)),
            record(2, dict(scored(True), outstanding_at_response=0)),
            record(3, dict(scored(False, "wrong_answer"), outstanding_at_response=2)),
            record(4, dict(errored(), outstanding_at_response=5)),  # errored: not counted
        ]
        summary = summarize({"trials": 4}, records)
        self.assertEqual(summary["would_lose_children"], 2)
        outstanding = [row["outstanding_at_response"] for row in summary["trials"]]
        self.assertEqual(outstanding, [8, 0, 2, 5])

    def test_a_set_whose_drive_reports_no_count_says_none(self):
        summary = summarize({"trials": 2}, [record(1, scored(True)), record(2, scored(False))])
        self.assertIsNone(summary["would_lose_children"])


def acp_updates(event: dict) -> list[dict]:
    """The ACP updates the product makes of a root event (source `modes/acp/acp-events.ts`),
    as far as the check reads them."""
    if event.get("type") == "tool_execution_start":
        return [{"sessionUpdate": "tool_call", "toolCallId": event["toolCallId"]}]
    if event.get("type") == "rlm_child_update":
        subagent = {"id": event["child"]["id"], "status": event["child"]["status"]}
        return [
            {"sessionUpdate": "session_info_update", "_meta": {META: {"subagents": [subagent]}}}
        ]
    return []


if __name__ == "__main__":
    unittest.main()
