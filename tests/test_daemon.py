"""The daemon protocol v7 client and the resident drive, against recorded real exchanges.

`ReplayDaemon` serves, on a real Unix socket, the lines a real prime-agent v0.8.0
daemon sent during the captured resident run (tests/data/real-runs/resident/
daemon-wire.jsonl): each command the client sends releases the recorded lines up
to the recorded response to that command, with the client's id put in.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import unittest

from swarm_fanout.evidence import witness
from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import load_manifest
from swarm_fanout.scorer import score
from swarm_fanout.shell import daemon, observer, resident, rundir
from swarm_fanout.shell.watch import Interrupt, Watch
from tests.test_real_runs import materialize

CAPTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "real-runs", "resident")


def recorded_lines(run_root: str) -> list[dict]:
    with open(os.path.join(run_root, "daemon-wire.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class FakeDaemon:
    """A Unix-socket server on a thread; `serve(connection)` is what a subclass says."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.received: list[dict] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_path)
        self.listener.listen()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as reader:
            self.serve(connection, reader)

    def send(self, connection: socket.socket, message: dict) -> None:
        connection.sendall((json.dumps(message) + "\n").encode())

    def commands(self, reader):
        for raw in reader:
            message = json.loads(raw)
            self.received.append(message)
            yield message

    def serve(self, connection, reader) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()


class ReplayDaemon(FakeDaemon):
    def __init__(self, socket_path: str, lines: list[dict]):
        self.hello = lines[0]
        self.lines = lines[1:]
        self.cursor = 0
        super().__init__(socket_path)

    def serve(self, connection, reader) -> None:
        self.send(connection, self.hello)
        for message in self.commands(reader):
            command = message["command"]["type"]
            recorded = next(
                (
                    index
                    for index in range(self.cursor, len(self.lines))
                    if self.lines[index].get("command") == command
                ),
                None,
            )
            if recorded is None:
                # Not in the recording (get_state): answer with the created session.
                self.send(connection, dict(self._created(), id=message["id"]))
                continue
            for line in self.lines[self.cursor : recorded]:
                self.send(connection, line)
            self.send(connection, dict(self.lines[recorded], id=message["id"]))
            self.cursor = recorded + 1

    def _created(self) -> dict:
        return next(line for line in self.lines if line.get("command") == "create")


class SilentDaemon(FakeDaemon):
    """Says hello, reads commands, never answers."""

    def serve(self, connection, reader) -> None:
        self.send(connection, HELLO)
        for _ in self.commands(reader):
            pass


class MuteDaemon(FakeDaemon):
    """Accepts connections and says nothing at all."""

    def serve(self, connection, reader) -> None:
        for _ in self.commands(reader):
            pass


HELLO = {
    "type": "daemon_hello",
    "protocol": {"name": "prime-agent.daemon", "version": 7},
    "schemaRevision": 22,
    "appVersion": "0.8.0",
    "supervisorPid": 4242,
    "serverCapabilities": ["rlm_quiescence_barrier", "authoritative_child_roster"],
}


class SocketTestCase(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="sf-")
        self.addCleanup(tmp.cleanup)
        self.tmp = os.path.realpath(tmp.name)
        self.socket_path = os.path.join(self.tmp, "d.sock")

    def start(self, server_class, *args) -> FakeDaemon:
        server = server_class(self.socket_path, *args)
        self.addCleanup(server.close)
        return server


class HelloTest(unittest.TestCase):
    def test_current_daemon_is_accepted(self):
        self.assertIsNone(daemon.check_hello(HELLO))

    def test_older_protocol_is_refused_with_what_is_missing(self):
        old = dict(HELLO, protocol={"name": "prime-agent.daemon", "version": 6})
        with self.assertRaises(daemon.DaemonError) as caught:
            daemon.check_hello(old)
        self.assertEqual(caught.exception.code, "daemon_incompatible")
        self.assertIn("version", str(caught.exception))

    def test_daemon_without_the_quiescence_barrier_is_refused(self):
        with self.assertRaises(daemon.DaemonError) as caught:
            daemon.check_hello(dict(HELLO, serverCapabilities=["event_sequence"]))
        self.assertIn("rlm_quiescence_barrier", str(caught.exception))

    def test_schema_revision_before_18_is_refused(self):
        with self.assertRaises(daemon.DaemonError) as caught:
            daemon.check_hello(dict(HELLO, schemaRevision=17))
        self.assertIn("schemaRevision", str(caught.exception))


class ClientTest(SocketTestCase):
    def test_daemon_that_never_answers_times_out_without_hanging(self):
        self.start(SilentDaemon)
        with (
            daemon.DaemonClient(self.socket_path, timeout=2) as client,
            self.assertRaises(daemon.DaemonError) as caught,
        ):
            client.request({"type": "get_state", "activeSessionId": "x"}, timeout=0.3)
        self.assertEqual(caught.exception.code, "daemon_timeout")

    def test_daemon_that_never_says_hello_times_out(self):
        self.start(MuteDaemon)
        with self.assertRaises(daemon.DaemonError) as caught:
            daemon.DaemonClient(self.socket_path, timeout=0.3)
        self.assertEqual(caught.exception.code, "daemon_timeout")

    def test_missing_socket_is_unreachable(self):
        with self.assertRaises(daemon.DaemonError) as caught:
            daemon.DaemonClient(self.socket_path, timeout=0.3)
        self.assertEqual(caught.exception.code, "daemon_unreachable")

    def test_a_stop_request_ends_a_wait(self):
        self.start(SilentDaemon)
        with (
            daemon.DaemonClient(self.socket_path, timeout=2) as client,
            self.assertRaises(daemon.DaemonError) as caught,
        ):
            client.request({"type": "x"}, timeout=30, should_stop=lambda: "interrupted")
        self.assertEqual(caught.exception.code, "daemon_wait_stopped")

    def test_messages_are_split_on_newline_only(self):
        events = []

        class Separator(FakeDaemon):
            def serve(self, connection, reader) -> None:
                self.send(connection, HELLO)
                for message in self.commands(reader):
                    self.send(connection, {"type": "session_event", "text": "a\u2028b"})
                    self.send(connection, {"type": "response", "id": message["id"]})

        self.start(Separator)
        with daemon.DaemonClient(self.socket_path, timeout=2) as client:
            client.request({"type": "x"}, timeout=2, on_event=events.append)
        self.assertEqual(events, [{"type": "session_event", "text": "a\u2028b"}])


class ResidentDriveTest(SocketTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.root = materialize("resident", self.tmp)
        self.lines = recorded_lines(self.root)
        self.run = rundir.RunDir(self.root)
        self.run.socket = self.socket_path
        for name in ("stdout.jsonl", "daemon-wire.jsonl"):
            if os.path.exists(os.path.join(self.root, name)):
                os.remove(os.path.join(self.root, name))
        self.server = self.start(ReplayDaemon, self.lines)
        self.env = {"PRIME_AGENT_SESSION_DIR": self.run.paths.sessions, "HOME": self.run.paths.home}

    def drive(self) -> dict:
        """Drive the recorded daemon; the runner's channels are published into the run dir
        afterwards, as shell/launch.py does once the agent is gone."""
        watch = Watch(self.run, 60, Interrupt())
        private = observer.private_dir()
        self.addCleanup(shutil.rmtree, private, True)
        stream = observer.Channel(private, "stdout.jsonl")
        wire = observer.Channel(private, "daemon-wire.jsonl")
        record = resident.drive_resident(
            self.run, lambda: True, "fake/fake-rlm", "the task", self.env, watch, wire, stream
        )
        self.published = [stream.publish(self.run.paths.stdout), wire.publish(self.run.paths.wire)]
        return record

    def test_the_streams_come_through_the_runners_channels_with_their_digests(self):
        self.drive()
        for item in self.published:
            path = os.path.join(self.root, item["file"])
            self.assertEqual(witness.file_digest(path), item["sha256"])
            self.assertTrue(item["intact"])
        with open(self.run.paths.wire, "rb") as handle:
            self.assertEqual(self.published[1]["lines"], handle.read().count(b"\n"))
        self.assertGreater(self.published[1]["lines"], 300)

    def test_the_drive_runs_the_recorded_sequence_to_quiescence(self):
        record = self.drive()
        self.assertNotIn("error", record)
        self.assertTrue(record["admitted"])
        self.assertEqual(
            [item["command"] for item in record["commands"]],
            ["create", "attach", "prompt", "wait_for_headless_completion", "get_state"],
        )
        self.assertEqual(record["session"]["activeSessionId"], "d87fd3fbfadd")
        self.assertEqual(record["hello"]["appVersion"], "0.8.0")

    def test_commands_travel_in_envelopes_the_real_daemon_accepted(self):
        self.drive()
        sent = self.server.received
        for message in sent:
            self.assertEqual(list(message), ["type", "id", "protocol", "clientId", "command"])
            self.assertEqual(message["type"], "command")
            self.assertEqual(message["protocol"], {"name": "prime-agent.daemon", "version": 7})
        self.assertEqual(len({message["id"] for message in sent}), len(sent))
        self.assertEqual(len({message["clientId"] for message in sent}), 1)
        create, attach, prompt, wait, _ = (message["command"] for message in sent)
        self.assertEqual(create["lifecycle"], "resident")
        self.assertEqual(
            create["config"],
            {
                "cwd": self.run.paths.repo,
                "agentDir": self.run.paths.agent_home,
                "sessionDir": self.run.paths.sessions,
                "model": "fake/fake-rlm",
            },
        )
        self.assertEqual(create["launchEnv"]["PRIME_AGENT_SESSION_DIR"], self.run.paths.sessions)
        self.assertEqual(attach["activeSessionId"], "d87fd3fbfadd")
        self.assertEqual(attach["capabilities"], ["event_sequence"])
        self.assertEqual(
            prompt, {"type": "prompt", "activeSessionId": "d87fd3fbfadd", "message": "the task"}
        )
        self.assertEqual(
            wait,
            {
                "type": "wait_for_headless_completion",
                "activeSessionId": "d87fd3fbfadd",
                "waitForRlmQuiescence": True,
            },
        )

    def test_session_events_become_the_one_shot_stream_shape(self):
        self.drive()
        with open(self.run.paths.stdout, encoding="utf-8") as handle:
            stream = [json.loads(line) for line in handle]
        with open(
            os.path.join(self.root, "sessions", os.listdir(self.run.paths.sessions)[0])
        ) as handle:
            header = json.loads(handle.readline())
        self.assertEqual(stream[0], header)
        recorded_events = [
            line["event"] for line in self.lines if line.get("type") == "session_event"
        ]
        self.assertEqual(stream[1:], recorded_events)

    def test_the_recorded_resident_run_still_scores_resolved_through_the_drive(self):
        self.drive()
        fixture = load_manifest(self.root)
        run = collect(self.root, fixture.artifact)
        verdict = score(fixture, run)
        self.assertTrue(verdict.resolved, verdict.reasons)
        self.assertEqual(run.stream.header_id, "01a2367b-4724-72b9-9dc4-923813f7c4a4")
        self.assertEqual(
            verdict.efficiency["stream"]["turns"], verdict.efficiency["parent"]["turns"]
        )

    def test_shutdown_is_forced_on_the_runs_own_socket(self):
        report = daemon.shutdown_daemon(self.socket_path)
        self.assertTrue(report["success"])
        self.assertEqual(report["supervisor_pid"], 19926)
        self.assertEqual(self.server.received[-1]["command"], {"type": "shutdown", "force": True})


if __name__ == "__main__":
    unittest.main()
