"""The product's ledger contract: path rule, candidates, tolerant parsing, replay."""

from __future__ import annotations

import hashlib
import json
import os
import unittest
from datetime import datetime

from swarm_fanout import ledger
from swarm_fanout.evidence.jsonl import iso_to_ms
from tests import temp_dir

CAPTURED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "real-runs")

SPAWN = {
    "v": 1,
    "op": "spawn",
    "at": "2026-12-02T11:14:10.194Z",
    "childId": "sub-9f89a7ec",
    "parent": "/r/sessions/p.jsonl",
    "child": "/r/session-artifacts/parent-id/sub-9f89a7ec/c1.jsonl",
    "depth": 1,
    "name": "worker-a",
}


def line(**changes) -> str:
    record = dict(SPAWN)
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v is not None}, separators=(",", ":"))


def meta(sessions_dir: str, at: str = "2026-12-02T11:14:10.194Z") -> str:
    return json.dumps({"v": 1, "op": "meta", "at": at, "sessionsDir": sessions_dir})


class TempDirTest(unittest.TestCase):
    def setUp(self) -> None:
        self.root = os.path.realpath(temp_dir(self))

    def write(self, name: str, text: str | bytes) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(text.encode() if isinstance(text, str) else text)
        return path

    def read(self, *lines: str) -> ledger.LedgerFile:
        """A ledger of the run's sessions dir `s`: its meta line, then `lines`."""
        sessions = os.path.join(self.root, "s")
        body = "".join(text + "\n" for text in (meta(sessions), *lines))
        return ledger.read_ledger(self.write(ledger.ledger_key(sessions) + ".jsonl", body))


class LedgerPathTest(TempDirTest):
    def test_key_is_sha256_of_the_realpath_of_an_existing_dir(self):
        real = os.path.join(self.root, "real-sessions")
        os.mkdir(real)
        link = os.path.join(self.root, "link")
        os.symlink(real, link)
        expected = hashlib.sha256(real.encode()).hexdigest()[:16]
        self.assertEqual(ledger.ledger_key(link), expected)
        self.assertEqual(
            ledger.ledger_path("/home/a", link), f"/home/a/rlm-ledger/{expected}.jsonl"
        )

    def test_key_of_a_missing_dir_is_its_absolute_path_without_trailing_slash(self):
        missing = os.path.join(self.root, "not-yet") + "/"
        expected = hashlib.sha256(missing.rstrip("/").encode()).hexdigest()[:16]
        self.assertEqual(ledger.ledger_key(missing), expected)

    def test_relative_dir_resolves_against_the_current_dir(self):
        here = os.getcwd()
        self.addCleanup(os.chdir, here)
        os.chdir(self.root)
        expected = hashlib.sha256(os.path.join(self.root, "s").encode()).hexdigest()[:16]
        self.assertEqual(ledger.ledger_key("s"), expected)

    def test_env_set_sessions_dir_is_tried_before_the_default(self):
        home = os.path.join(self.root, "agent-home")
        env_dir = os.path.join(self.root, "sessions")
        os.makedirs(env_dir)
        os.makedirs(os.path.join(home, "sessions"))
        env_ledger = self.write(
            os.path.relpath(ledger.ledger_path(home, env_dir), self.root), meta(env_dir) + "\n"
        )
        default_dir = os.path.join(home, "sessions")
        default_ledger = self.write(
            os.path.relpath(ledger.ledger_path(home, default_dir), self.root),
            meta(default_dir) + "\n",
        )
        self.assertEqual(
            ledger.ledger_candidates(home, env_dir, self.root), [env_ledger, default_ledger]
        )

    def test_other_ledgers_count_only_when_their_meta_names_a_dir_of_the_run(self):
        home = os.path.join(self.root, "agent-home")
        mine = self.write("agent-home/rlm-ledger/aaaa.jsonl", meta(self.root + "/x") + "\n")
        self.write("agent-home/rlm-ledger/bbbb.jsonl", meta("/somewhere/else") + "\n")
        self.write("agent-home/rlm-ledger/cccc.jsonl", "not json\n")
        self.assertEqual(ledger.ledger_candidates(home, None, self.root), [mine])


class ParseTest(TempDirTest):
    def codes(self, parsed: ledger.LedgerFile) -> list[str]:
        return [finding.code for finding in parsed.findings]

    def test_well_formed_ledger_has_no_findings(self):
        parsed = self.read(line(), line(op="delete", reason="user", name=None, depth=None))
        self.assertEqual(self.codes(parsed), [])
        self.assertEqual([r.op for r in parsed.records], ["meta", "spawn", "delete"])
        self.assertFalse(parsed.fatal)

    def test_malformed_line_in_the_middle_is_fatal_and_later_spawns_are_suspicious(self):
        parsed = self.read(line(), '{"v":1,', line(childId="sub-0000000b"))
        self.assertEqual(self.codes(parsed), ["malformed_json"])
        self.assertTrue(parsed.fatal)
        self.assertEqual([r.after_fatal for r in parsed.records], [False, False, True])

    def test_values_of_the_wrong_json_type_are_findings_not_errors(self):
        parsed = self.read(
            line(op=["spawn"]),
            line(depth="1"),
            line(name=7),
            line(childId="sub-XYZ"),
            line(v=2),
            line(v=True),
            line(at=None),
            "[]",
            "42",
        )
        self.assertEqual(
            self.codes(parsed),
            [
                "malformed_record",
                "malformed_record",
                "malformed_record",
                "malformed_record",
                "bad_version",
                "bad_version",
                "missing_at",
                "not_an_object",
                "not_an_object",
            ],
        )
        self.assertEqual([r.op for r in parsed.records], ["meta"])

    def test_each_field_rule_of_the_product(self):
        delete = {"op": "delete", "name": None, "depth": None, "parent": None}
        bad = [
            line(name=""),
            line(name="n" * 65),
            line(depth=0),
            line(depth=True),
            line(depth=1.0),
            line(childId="sub-9F89A7EC"),
            line(**delete, reason="because"),
        ]
        good = [line(name="n" * 64), line(**delete, reason="gc"), line(extra=1)]
        parsed = self.read(*bad, *good)
        self.assertEqual(self.codes(parsed), ["malformed_record"] * len(bad))
        self.assertEqual([r.op for r in parsed.records], ["meta", "spawn", "delete", "spawn"])

    def test_unknown_ops_are_skipped_without_rejecting_the_file(self):
        parsed = self.read(line(op="heartbeat"), line())
        self.assertEqual(self.codes(parsed), ["unknown_op"])
        self.assertFalse(parsed.fatal)

    def test_meta_that_does_not_hash_to_the_file_name_is_reported(self):
        path = self.write("0123456789abcdef.jsonl", meta("/elsewhere") + "\n" + line() + "\n")
        self.assertEqual(
            [f.code for f in ledger.read_ledger(path).findings], ["meta_hash_mismatch"]
        )

    def test_a_missing_ledger_is_a_finding(self):
        parsed = ledger.read_ledger(os.path.join(self.root, "none.jsonl"))
        self.assertEqual(self.codes(parsed), ["unreadable"])


class ReplayTest(TempDirTest):
    def replay(self, *lines: str) -> ledger.Replay:
        return ledger.replay([self.read(*lines)])

    def delete(self, at: str = "2026-12-02T11:14:11.000Z", **changes) -> str:
        fields = {"op": "delete", "at": at, "reason": "user", "name": None, "depth": None}
        return line(**{**fields, **changes})

    def test_delete_keeps_a_tombstone_with_its_reason(self):
        (edge,) = self.replay(line(), self.delete(reason="revoked")).edges
        self.assertTrue(edge.deleted)
        self.assertEqual(edge.delete_reason, "revoked")
        self.assertIsNotNone(edge.deleted_at_ms)

    def test_later_spawn_of_the_same_key_resurrects_the_edge(self):
        (edge,) = self.replay(line(), self.delete(), line(name="worker-b")).edges
        self.assertFalse(edge.deleted)
        self.assertEqual(edge.name, "worker-b")

    def test_rename_and_delete_before_their_spawn_are_ignored(self):
        (edge,) = self.replay(
            self.delete(), line(op="rename", name="early", depth=None), line()
        ).edges
        self.assertFalse(edge.deleted)
        self.assertEqual(edge.name, "worker-a")

    def test_rename_applies_to_an_existing_edge(self):
        (edge,) = self.replay(line(), line(op="rename", name="renamed", depth=None)).edges
        self.assertEqual(edge.name, "renamed")

    def test_same_child_id_with_another_child_path_is_another_edge(self):
        edges = self.replay(
            line(), line(child="/r/session-artifacts/parent-id/sub-9f89a7ec/c2.jsonl")
        )
        self.assertEqual(len(edges.edges), 2)

    def test_spawn_records_which_live_sibling_held_its_name(self):
        second = line(childId="sub-0000000b", child="/r/x/sub-0000000b/c.jsonl")
        third = line(childId="sub-0000000c", child="/r/x/sub-0000000c/c.jsonl")
        spawns = self.replay(
            line(),
            second,
            self.delete(childId="sub-9f89a7ec"),
            self.delete(childId="sub-0000000b", child="/r/x/sub-0000000b/c.jsonl"),
            third,
        ).spawns
        self.assertEqual([s.name_held_by for s in spawns], [(), ("sub-9f89a7ec",), ()])


class TimestampTest(unittest.TestCase):
    def test_product_timestamps_and_other_iso_forms_agree_with_datetime(self):
        for text in (
            "2026-12-02T11:14:10.194Z",
            "2024-02-29T23:59:59.999Z",
            "2026-12-02T11:14:10Z",
        ):
            expected = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000
            self.assertEqual(iso_to_ms(text), round(expected), text)

    def test_impossible_or_local_timestamps_have_no_time(self):
        for text in ("2026-02-30T11:14:10.194Z", "2026-12-02T24:00:00.000Z", "2026-12-02", 7, ""):
            self.assertIsNone(iso_to_ms(text), text)

    def test_non_ascii_digits_are_no_time_and_do_not_raise(self):
        # str.isdigit() accepts superscripts, which int() refuses: an agent can
        # write them into a ledger's `at`.
        for text in ("2026-12-02T11:14:10.19\u00b2Z", "2026-12-02T11:14:1\u00b2.194Z"):
            self.assertIsNone(iso_to_ms(text), text)
        arabic = "\u0662\u0660\u0662\u0666-12-02T11:14:10.194Z"
        self.assertIsNone(iso_to_ms(arabic))


class LineTest(TempDirTest):
    def test_a_child_id_with_a_final_newline_is_malformed(self):
        parsed = ledger.read_ledger(
            self.write("l.jsonl", meta("/s") + "\n" + line(childId="sub-9f89a7ec\n") + "\n")
        )
        self.assertIn("malformed_record", [f.code for f in parsed.findings])


if __name__ == "__main__":
    unittest.main()
