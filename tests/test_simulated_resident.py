"""The simulated agent under the resident drive: the oracle's artifacts again (the root file's
name and the first idle point are where the drives differ), and protocol 7 against a client of
the test's own (contract §8). The behaviours and the model calls through the recording proxy
are played by the one `Run` both drives share (simulated/run.py): test_simulated_agent
checks them once, and test_runner_resident and test_sandbox_resident run the resident
behaviours end to end.
"""

from __future__ import annotations

import hashlib
import os
import unittest

from tests import test_simulated_agent as oneshot
from tests.simulated_case import (
    ISO_MS,
    RESIDENT,
    TASKS,
    DaemonClient,
    Run,
    SimulatedAgentCase,
    attach_command,
    captured_response,
    captured_wire,
    correct_index,
    event_kind,
    key_orders,
    messages,
    replies,
    shapes,
    wait_command,
)


class ResidentOracleTest(oneshot.OracleTest):
    """The same artifacts under the resident drive (contract §8.3)."""

    drive = RESIDENT


class ResidentDaemonTest(SimulatedAgentCase):
    """`--mode daemon` speaking protocol 7 to a client of the test's own (contract §8)."""

    drive = RESIDENT

    def create_and_attach(self, client: DaemonClient, run: Run, behaviour: str) -> str:
        """Returns the activeSessionId."""
        active_id = client.call(run.create_command(behaviour))["activeSessionId"]
        client.call(attach_command(active_id, client))
        return active_id

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


if __name__ == "__main__":
    unittest.main()
