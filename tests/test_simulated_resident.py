"""The simulated agent under the resident drive: the oracle's artifacts again (the root file's
name is where the drives differ; the other place, the first idle point, is end to end in
test_runner_resident), and protocol 7 against a client of the test's own (contract §8). The
behaviours and the model calls through the recording proxy are played by the one `Run` both
drives share (simulated/run.py): test_simulated_agent checks them once, and
test_runner_resident runs the resident behaviours end to end.
"""

from __future__ import annotations

import hashlib
import os
import unittest

from tests import test_simulated_agent as oneshot
from tests.simulated_case import (
    RESIDENT,
    SimulatedAgentCase,
    attach_command,
    captured_response,
    captured_wire,
    event_kind,
    key_orders,
    shapes,
    wait_command,
)


class ResidentOracleTest(oneshot.OracleTest):
    """The same artifacts under the resident drive (contract §8.3)."""

    drive = RESIDENT


class ResidentDaemonTest(SimulatedAgentCase):
    """`--mode daemon` speaking protocol 7 to a client of the test's own (contract §8)."""

    drive = RESIDENT

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
