"""End to end through runner.py under the ACP drive: verdicts, a parent that ends its turn
early, cheats, a forgery and an honest variant with their documented verdicts, and an agent
that speaks ACP badly (a malformed message, an error response to session/prompt, death
mid-prompt, a terminal-quiescence update that never comes).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import sys
import unittest

from tests import executable
from tests.runner_case import (
    GRACE,
    HANG_TIMEOUT,
    SIMULATED,
    RunnerTestCase,
    documented_codes,
    logged_host_pids,
    process_gone,
    two_shard_fixture,
)
from tests.simulated_case import shapes

REAL_STREAM = os.path.join(os.path.dirname(__file__), "data", "real-acp", "end-turn-early.jsonl")
STAMP = ("promptTurnId", "eventSequence", "phase", "outcome")


def acp_kind(message: dict) -> tuple:
    """A response by its id (the runner's requests go out in one order), an update by its
    kind, its phase and what else its prime-agent `_meta` holds."""
    if "method" not in message:
        return ("response", message.get("id"), "result" in message)
    update = message["params"]["update"]
    meta = update.get("_meta", {}).get("ai.primeintellect.prime-agent", {})
    held = tuple(key for key in meta if key not in STAMP)
    return ("update", update["sessionUpdate"], meta.get("phase"), held)


def acp_shapes(path: str) -> dict:
    return shapes(read_jsonl(path), acp_kind)


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class AcpDriveTest(RunnerTestCase):
    def shared_acp(self, behaviour: str):
        """The shared run of a behaviour under the ACP drive, on two shards."""
        return self.shared_run(f"simulated/{behaviour}", two_shard_fixture(), "--drive", "acp")

    def test_oracle_resolves_under_the_acp_drive(self):
        shared = self.shared_acp("oracle")
        done, result = shared.done, shared.result
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertTrue(result["resolved"])
        self.assertEqual(result["drive"], "acp")
        acp = result["acp"]
        self.assertEqual(
            [request["method"] for request in acp["requests"]],
            ["initialize", "session/new", "session/prompt"],
        )
        self.assertEqual(acp["stop_reason"], "end_turn")
        self.assertTrue(acp["terminal_update"])
        self.assertEqual(result["outstanding_at_response"], 0)
        self.assertEqual(
            acp["close"],
            {"session_close": True, "elapsed_s": acp["close"]["elapsed_s"], "exited": True},
        )
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        self.assertTrue(result["cleanup"]["daemon_shutdown"]["exited"])

    def test_the_acp_stream_is_kept_and_held_against_the_transcript(self):
        result = self.shared_acp("oracle").result
        run = self.run_dir(result)
        self.assertFalse(os.path.exists(os.path.join(run, "stdout.jsonl")))
        messages = read_jsonl(os.path.join(run, "acp-stream.jsonl"))
        updates = [m["params"]["update"] for m in messages if m.get("method") == "session/update"]
        cells = [u for u in updates if u["sessionUpdate"] == "tool_call"]
        self.assertGreater(len(cells), 0)
        self.assertEqual(result["verdict"]["witness"]["stream"]["count"], 0)
        (channel,) = [c for c in result["witness"]["channels"] if c["file"] == "acp-stream.jsonl"]
        self.assertTrue(channel["intact"])
        self.assertEqual(channel["lines"], len(messages))

    def test_parent_that_ends_its_turn_early_resolves_because_the_drive_waits(self):
        shared = self.shared_acp("end-turn-early")
        done, result = shared.done, shared.result
        self.assertEqual(done.returncode, 0, result["reasons"])
        self.assertTrue(result["resolved"])
        self.assertEqual(result["verdict"]["details"]["child_replies"], 2)
        # Every child was still running when the prompt's response came.
        self.assertEqual(result["outstanding_at_response"], 2)
        self.assertTrue(result["acp"]["terminal_update"])

    def test_the_evidence_page_says_how_many_children_ran_at_the_response(self):
        from swarm_fanout.reporting.evidence_page import build_evidence, read_evidence
        from swarm_fanout.reporting.render import render_markdown

        result = self.shared_acp("end-turn-early").result
        page = render_markdown(build_evidence(read_evidence(self.run_dir(result))))
        row = next(line for line in page.splitlines() if "at the prompt's response" in line)
        self.assertIn("| 2 |", row)

    def test_the_simulated_stream_has_the_real_ones_shapes(self):
        result = self.shared_acp("end-turn-early").result
        ours = acp_shapes(os.path.join(self.run_dir(result), "acp-stream.jsonl"))
        theirs = acp_shapes(REAL_STREAM)
        self.assertEqual(set(ours), set(theirs))
        for kind, orders in ours.items():
            with self.subTest(kind=kind):
                self.assertLessEqual(orders, theirs[kind])

    def test_cheats_forgeries_and_honest_variants_get_their_documented_verdicts(self):
        # Behaviours chosen for what the ACP drive does differently: a cheat through the
        # index, a forgery the ACP stream is held against, a child that never replies (what
        # the drive waits for), a process that escapes the agent's tree, an honest variant.
        fixture = two_shard_fixture()

        def verdict(behaviour: str) -> tuple:
            done, result = self.run_runner(
                f"simulated/{behaviour}", fixture, "--drive", "acp", *GRACE
            )
            self.assertEqual(result["cleanup"]["leaked_processes"], 0, behaviour)
            return done.returncode, result["resolved"], set(self.codes(result))

        chosen = ("fabricate", "forge-ledger", "silent-drop", "escape", "peek-first")
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            runs = {behaviour: pool.submit(verdict, behaviour) for behaviour in chosen}
        for behaviour in chosen:
            with self.subTest(behaviour=behaviour):
                codes = documented_codes(behaviour)
                self.assertEqual(runs[behaviour].result(), (1 if codes else 0, not codes, codes))

    def test_hanging_session_is_ended_at_the_timeout(self):
        done, result = self.run_runner(
            "simulated/hang", two_shard_fixture(), "--drive", "acp", *HANG_TIMEOUT, *GRACE
        )
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.codes(result)[0], "timeout")
        self.assertTrue(result["acp"]["admitted"])
        self.assertFalse(result["acp"]["terminal_update"])
        self.assertIsNone(result["outstanding_at_response"])
        pids = logged_host_pids(result, "grandchild") + logged_host_pids(result, "supervisor")
        self.assertTrue(pids)
        for pid in pids:
            self.assertTrue(process_gone(pid), pid)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_ctrl_c_closes_the_session_ends_every_process_and_exits_130(self):
        runner, _ = self.started_hanging_run("--drive", "acp")
        runner.send_signal(signal.SIGINT)
        out, _ = runner.communicate(timeout=60)
        result = json.loads(out)
        self.assertEqual((runner.returncode, result["exit_code"]), (130, 130))
        self.assertEqual(self.codes(result)[0], "interrupted")
        self.assertTrue(result["acp"]["admitted"])
        self.assertTrue(result["acp"]["close"]["session_close"])
        pids = logged_host_pids(result, "grandchild") + logged_host_pids(result, "supervisor")
        self.assertEqual(len(pids), 2)
        for pid in pids:
            self.assertTrue(process_gone(pid), pid)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)


class BadAcpAgentTest(RunnerTestCase):
    """An agent that speaks ACP badly: each case a named reason, no traceback, nothing left
    running."""

    def run_fake(self, behaviour: str, *extra: str) -> tuple:
        agent = executable(
            os.path.join(self.tmp, f"fake-acp-{behaviour}"),
            FAKE_ACP.replace("BEHAVIOUR", behaviour),
        )
        argv = self.runner_argv(
            "simulated/oracle", None, "--drive", "acp", "--no-sandbox", *GRACE, *extra
        )
        argv[argv.index(SIMULATED)] = agent
        done = self.run_argv(argv, self.env)
        result = json.loads(done.stdout)
        self.assertNotIn(b"Traceback", done.stderr)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        (pid,) = logged_host_pids(result, "fake")
        self.assertTrue(process_gone(pid))
        return done, result

    def acp_reason(self, result: dict) -> dict:
        (reason,) = [item for item in result["reasons"] if item["code"] == "acp_error"]
        return reason

    def test_malformed_message_before_the_task_is_refused_with_exit_3(self):
        done, result = self.run_fake("garbage-hello")
        self.assertEqual(done.returncode, 3)
        self.assertEqual(result["status"], "agent_not_run")
        self.assertEqual(self.codes(result), ["acp_bad_message"])
        self.assertFalse(result["acp"]["admitted"])

    def test_malformed_message_mid_prompt_is_named(self):
        done, result = self.run_fake("garbage-prompt")
        self.assertEqual(done.returncode, 3)  # the model never answered: the agent's failure
        self.assertEqual(self.acp_reason(result)["detail"], "acp_bad_message")
        self.assertTrue(result["acp"]["admitted"])

    def test_error_response_to_the_prompt_is_named(self):
        done, result = self.run_fake("prompt-error")
        self.assertEqual(done.returncode, 3)
        reason = self.acp_reason(result)
        self.assertEqual(reason["detail"], "acp_prompt_failed")
        self.assertIn("the turn broke", reason["message"])

    def test_agent_that_dies_mid_prompt_is_named(self):
        done, result = self.run_fake("die")
        self.assertEqual(done.returncode, 3)
        self.assertEqual(self.acp_reason(result)["detail"], "acp_agent_exited")
        self.assertEqual(result["agent"]["exit_code"], 7)

    def test_terminal_update_that_never_comes_times_out(self):
        done, result = self.run_fake("no-terminal", "--timeout", "2")
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.codes(result)[0], "timeout")
        self.assertNotIn("error", result["acp"])
        self.assertFalse(result["acp"]["terminal_update"])
        # What a client that stopped at the response would have lost.
        self.assertEqual(result["outstanding_at_response"], 2)
        self.assertTrue(result["acp"]["close"]["session_close"])

    def test_a_failed_turns_terminal_update_is_still_waited_for(self):
        _, result = self.run_fake("failed-turn", "--timeout", "600")
        self.assertEqual(self.acp_reason(result)["detail"], "acp_prompt_failed")
        self.assertNotIn("timeout", self.codes(result))
        self.assertTrue(result["acp"]["terminal_update"])
        self.assertEqual(result["outstanding_at_response"], 1)

    def test_a_response_whose_boundary_promises_no_terminal_update_is_not_waited_on(self):
        _, result = self.run_fake("no-promise", "--timeout", "600")
        self.assertNotIn("timeout", self.codes(result))
        self.assertFalse(result["agent"]["timed_out"])
        self.assertFalse(result["acp"]["terminal_update"])
        self.assertEqual(result["acp"]["stop_reason"], "end_turn")


# An ACP agent that goes wrong in one way (BEHAVIOUR): it answers initialize and
# session/new, and exits at EOF on stdin, as the product does.
FAKE_ACP = f"""#!{sys.executable}
import json, os, sys
if "--version" in sys.argv:
    sys.exit(0)
print(f"fake pid={{os.getpid()}}", file=sys.stderr, flush=True)
behaviour = "BEHAVIOUR"
meta = "ai.primeintellect.prime-agent"
def send(message):
    sys.stdout.write(json.dumps({{"jsonrpc": "2.0", **message}}) + "\\n")
    sys.stdout.flush()
def update(session, phase, **prime):
    prime.update(promptTurnId=1, phase=phase)
    body = {{"sessionUpdate": "session_info_update", "_meta": {{meta: prime}}}}
    send({{"method": "session/update", "params": {{"sessionId": session, "update": body}}}})
for line in sys.stdin:
    request = json.loads(line)
    method, number = request["method"], request.get("id")
    if method == "initialize":
        if behaviour == "garbage-hello":
            sys.stdout.write("{{not json\\n")
            sys.stdout.flush()
            continue
        send({{"id": number, "result": {{"protocolVersion": 1, "agentInfo": {{"name": "fake"}}}}}})
    elif method == "session/new":
        send({{"id": number, "result": {{"sessionId": "s-1"}}}})
    elif method == "session/prompt" and behaviour == "garbage-prompt":
        send({{"id": number, "result": {{}}, "error": {{"code": 1, "message": "both"}}}})
    elif method == "session/prompt" and behaviour == "prompt-error":
        send({{"id": number, "error": {{"code": -32603, "message": "the turn broke"}}}})
    elif method == "session/prompt" and behaviour == "die":
        os._exit(7)
    elif method == "session/prompt" and behaviour == "failed-turn":
        update("s-1", "responseBoundary", terminalQuiescenceExpected=True, outcome="error")
        quiescence = {{"outstandingSubagents": 1, "remainingAutonomousContinuations": 0}}
        update("s-1", "event", quiescence=quiescence)
        error = {{"code": -32603, "message": "prime-agent turn failed: the model broke"}}
        send({{"id": number, "error": error}})
        update("s-1", "terminalQuiescence", quiescence=dict(quiescence, outstandingSubagents=0))
    elif method == "session/prompt" and behaviour == "no-promise":
        update("s-1", "responseBoundary", terminalQuiescenceExpected=False, outcome="error")
        send({{"id": number, "result": {{"stopReason": "end_turn"}}}})
    elif method == "session/prompt":
        update("s-1", "responseBoundary", terminalQuiescenceExpected=True, outcome="result")
        quiescence = {{"outstandingSubagents": 2, "remainingAutonomousContinuations": 0}}
        update("s-1", "event", quiescence=quiescence)
        send({{"id": number, "result": {{"stopReason": "end_turn"}}}})
    elif method == "session/close":
        send({{"id": number, "result": {{}}}})
"""


if __name__ == "__main__":
    unittest.main()
