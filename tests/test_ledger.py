"""The product's ledger contract: path rule, candidates, tolerant parsing, replay."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import tempfile
import unittest
from datetime import datetime
from unittest import mock

import ledger
from evidence import jsonl
from evidence.jsonl import iso_to_ms

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
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.root = os.path.realpath(tmp.name)

    def write(self, name: str, text: str | bytes) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(text.encode() if isinstance(text, str) else text)
        return path


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
    def read(self, *lines: str, torn: str = "") -> ledger.LedgerFile:
        sessions = os.path.join(self.root, "s")
        body = "".join(text + "\n" for text in (meta(sessions), *lines)) + torn
        name = ledger.ledger_key(sessions) + ".jsonl"
        return ledger.read_ledger(self.write(name, body))

    def codes(self, parsed: ledger.LedgerFile) -> list[str]:
        return [finding.code for finding in parsed.findings]

    def test_well_formed_ledger_has_no_findings(self):
        parsed = self.read(line(), line(op="delete", reason="user", name=None, depth=None))
        self.assertEqual(self.codes(parsed), [])
        self.assertEqual([r.op for r in parsed.records], ["meta", "spawn", "delete"])
        self.assertFalse(parsed.fatal)

    def test_torn_final_line_is_tolerated_as_the_product_does(self):
        parsed = self.read(line(), torn='{"v":1,"op":"spa')
        self.assertEqual(self.codes(parsed), ["torn_tail"])
        self.assertFalse(parsed.fatal)
        self.assertEqual(len(parsed.records), 2)

    def test_complete_final_line_without_newline_is_kept(self):
        parsed = self.read(torn=line())
        self.assertEqual(self.codes(parsed), [])
        self.assertEqual(parsed.records[-1].op, "spawn")

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

    def test_unknown_ops_are_skipped_without_rejecting_the_file(self):
        parsed = self.read(line(op="heartbeat"), line())
        self.assertEqual(self.codes(parsed), ["unknown_op"])
        self.assertFalse(parsed.fatal)

    def test_invalid_utf8_and_nul_bytes_are_findings(self):
        path = self.write("x.jsonl", b'{"v":1,"op":"meta","at":"x","sessionsDir":"\xff"}\n\x00\n')
        parsed = ledger.read_ledger(path)
        self.assertEqual([f.code for f in parsed.findings], ["invalid_utf8", "malformed_json"])

    def test_meta_that_does_not_hash_to_the_file_name_is_reported(self):
        path = self.write("0123456789abcdef.jsonl", meta("/elsewhere") + "\n" + line() + "\n")
        self.assertEqual(
            [f.code for f in ledger.read_ledger(path).findings], ["meta_hash_mismatch"]
        )

    def test_more_records_than_the_product_reads_is_reported(self):
        sessions = os.path.join(self.root, "s")
        body = meta(sessions) + "\n" + '{"v":1,"op":"x","at":"a"}\n' * ledger.PRODUCT_MAX_RECORDS
        path = self.write(ledger.ledger_key(sessions) + ".jsonl", body)
        parsed = ledger.read_ledger(path)
        self.assertIn("over_record_limit", self.codes(parsed))
        self.assertTrue(parsed.fatal)

    def test_a_missing_ledger_is_a_finding(self):
        parsed = ledger.read_ledger(os.path.join(self.root, "none.jsonl"))
        self.assertEqual(self.codes(parsed), ["unreadable"])


class ReplayTest(TempDirTest):
    def replay(self, *lines: str) -> ledger.Replay:
        sessions = os.path.join(self.root, "s")
        body = "".join(text + "\n" for text in (meta(sessions), *lines))
        path = self.write(ledger.ledger_key(sessions) + ".jsonl", body)
        return ledger.replay([ledger.read_ledger(path)])

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


class CanonTest(TempDirTest):
    """`Canon` caches resolved dirs; it must agree with the uncached rules exactly."""

    def test_agrees_with_realpath_and_canonical_file_through_links(self):
        root = tmp = tempfile.mkdtemp(dir=self.root, prefix="not-real-")
        self.write(os.path.join(tmp, "real", "sub", "t.jsonl"), "{}\n")
        os.makedirs(os.path.join(root, "elsewhere"))
        os.symlink(os.path.join(root, "real"), os.path.join(root, "linked"))
        os.symlink("sub/t.jsonl", os.path.join(root, "real", "alias.jsonl"))
        os.symlink("nowhere.jsonl", os.path.join(root, "real", "dangling.jsonl"))
        os.symlink("loop-b", os.path.join(root, "loop-a"))
        os.symlink("loop-a", os.path.join(root, "loop-b"))
        os.symlink("../elsewhere", os.path.join(root, "real", "up"))
        paths = [
            os.path.join(root, *parts)
            for parts in (
                ("real", "sub", "t.jsonl"),
                ("linked", "sub", "t.jsonl"),
                ("linked", "alias.jsonl"),
                ("real", "dangling.jsonl"),
                ("linked", "dangling.jsonl"),
                ("linked", "missing", "x.jsonl"),
                ("loop-a", "x.jsonl"),
                ("loop-a",),
                ("linked", "up", "y.jsonl"),
                ("linked", "..", "real", "sub", "t.jsonl"),
                ("real", ".", "sub", "t.jsonl"),
                ("real", "sub", "t.jsonl", "not-a-dir.jsonl"),
            )
        ]
        paths += [
            "relative/t.jsonl",
            "/",
            "//x/y.jsonl",
            "/a\0b/c.jsonl",
            root + "//real/sub/t.jsonl",
        ]
        canon = ledger.Canon()
        for _ in range(2):  # the second round answers from the cache
            for path in paths:
                self.assertEqual(canon.file(path), ledger.canonical_file(path), path)
                if "\0" not in path:
                    self.assertEqual(canon.dir(path), os.path.realpath(path), path)

    def test_a_link_found_deep_in_the_tree_is_followed(self):
        self.write("a/b/c/d/t.jsonl", "{}\n")
        os.symlink(os.path.join(self.root, "a", "b"), os.path.join(self.root, "a", "short"))
        path = os.path.join(self.root, "a", "short", "c", "d", "t.jsonl")
        expected = os.path.join(self.root, "a", "b", "c", "d", "t.jsonl")
        self.assertEqual(ledger.Canon().file(path), expected)


class ProductLayoutTest(TempDirTest):
    """Lines in the product's own layout take a regex shortcut past the JSON parser;
    whatever the shortcut admits must read exactly as the general path reads it."""

    def general(self, path: str, text: str) -> tuple[list, list]:
        """Each line through json.loads and `_parse_record`, no shortcut."""
        findings: list = []
        records = []
        strings: dict = {}
        fatal = False
        for number, raw in enumerate(text.split("\n")[:-1], 1):
            try:
                value = json.loads(raw)
            except ValueError:
                fatal = True
                continue
            record = ledger._parse_record(path, number, value, findings, fatal, strings, set())
            if record is not None:
                records.append(record)
            fatal = fatal or any(f.code in ledger.FATAL_CODES for f in findings)
        return records, [(f.line, f.code) for f in findings]

    def assert_read_alike(self, name: str, text: str) -> ledger.LedgerFile:
        path = self.write(name, text)
        parsed = ledger.read_ledger(path)
        records, findings = self.general(path, text)
        self.assertEqual(list(parsed.records), records, text)
        # The reference skips bad JSON silently and never checks the meta's hash.
        skipped = ("malformed_json", "meta_hash_mismatch")
        own = [(f.line, f.code) for f in parsed.findings if f.code not in skipped]
        self.assertEqual(own, findings, text)
        return parsed

    def test_shortcut_and_general_path_agree_on_every_variant(self):
        spawn = SPAWN | {"child": "/r/s/p/sub-9f89a7ec/c.jsonl"}
        rename = {k: spawn[k] for k in ("v", "op", "at", "childId", "child", "name")}
        rename["op"] = "rename"
        delete = {k: spawn[k] for k in ("v", "op", "at", "childId", "child")}
        delete.update(op="delete", reason="parent-teardown")
        variants = [
            {},
            {"name": "x" * 64},
            {"name": "x" * 65},
            {"name": ""},
            {"name": "w\u00e9\u2028\U0001f600\x7f"},
            {"name": "tab\there"},
            {"name": 'quote"d'},
            {"childId": "sub-9F89A7EC"},
            {"childId": "sub-9f89a7ec\n"},
            {"depth": 0},
            {"depth": 10**12},
            {"depth": True},
            {"depth": 1.0},
            {"child": ""},
            {"child": "back\\slash"},
            {"at": "not a time"},
            {"at": "2026-13-02T11:14:10.194Z"},
            {"at": "2026-12-02T11:14:10.1942Z"},
            {"at": "2026-12-02T11:14:10Z"},
            {"at": "2026-12-02T11:14:10.194+00:00"},
            {"at": "2026-12-02T11:14:1\u0669.194Z"},
            {"reason": "gc"},
            {"reason": "because"},
            {"v": 2},
            {"extra": 1},
        ]
        lines = [meta(os.path.join(self.root, "s"))]
        for base in (spawn, rename, delete):
            for change in variants:
                record = dict(base)
                record.update(change)
                if "reason" in change and base is not delete:
                    continue
                lines.append(json.dumps(record, separators=(",", ":"), ensure_ascii=False))
            # A different key order is still a valid record, just not the shortcut's.
            lines.append(json.dumps(dict(reversed(list(base.items()))), separators=(",", ":")))
            # A raw control character in a string is not JSON.
            for char in "\x00\t\x1f":
                lines.append(json.dumps(base, separators=(",", ":")).replace("/r/", f"/r{char}/"))
        lines.append('{"v":1,"op":"spawn"')  # fatal: later spawns are suspicious
        lines.append(json.dumps(spawn, separators=(",", ":")))
        shortcut_lines = sum(1 for item in lines if ledger._PRODUCT_LINE.fullmatch(item))
        self.assertGreaterEqual(shortcut_lines, 15)  # the shortcut is really exercised
        # All in one file, read as one block that holds escapes and control characters.
        parsed = self.assert_read_alike("ledger.jsonl", "".join(item + "\n" for item in lines))
        self.assertTrue(parsed.records[-1].after_fatal)
        # Each line in a file of its own, a block as clean as the line itself.
        for number, item in enumerate(lines[1:]):
            self.assert_read_alike(f"ledger-{number}.jsonl", f"{lines[0]}\n{item}\n")

    def test_random_edits_of_captured_ledger_lines_read_alike(self):
        lines = []
        for path in sorted(glob.glob(os.path.join(CAPTURED, "*", "agent-home", "rlm-ledger", "*"))):
            with open(path, encoding="utf-8") as handle:
                lines += [item for item in handle.read().splitlines() if '"op":"meta"' not in item]
        # Characters that end a string, escape, break JSON, or are merely unusual.
        alphabet = '\\"\x00\t\x1f\x7f0a9é\u2028\U0001f600{}[],: '
        rng = random.Random(20261202)
        for case in range(400):
            chars = list(rng.choice(lines))
            for _ in range(rng.randrange(1, 4)):
                at = rng.randrange(len(chars))
                edit = rng.randrange(3)
                if edit == 0:
                    chars[at] = rng.choice(alphabet)
                elif edit == 1:
                    chars.insert(at, rng.choice(alphabet))
                else:
                    del chars[at]
            text = f"{meta(self.root)}\n{''.join(chars)}\n"
            self.assert_read_alike(f"edit-{case}.jsonl", text)

    def assert_batch_reads_as_plain(self, name: str, text: str) -> ledger.LedgerFile:
        """The whole reader with its batch and shortcut, against the same reader with every
        line parsed by the JSON scanner (`jsonl.PARSE_EVERY_LINE`): records, findings and
        counts alike, torn tails and after-fatal marks included."""
        path = self.write(name, text)
        fast = ledger.read_ledger(path)
        with mock.patch.object(jsonl, "PARSE_EVERY_LINE", True):
            plain = ledger.read_ledger(path)
        self.assertEqual(fast, plain)
        self.assertEqual(
            [record.after_fatal for record in fast.records],
            [record.after_fatal for record in plain.records],
        )
        return fast

    def odd_lines(self) -> list[str]:
        """Ledger lines in shapes the product does not write, each still JSON or nearly."""
        spawn = SPAWN | {"child": "/r/s/p/sub-9f89a7ec/c.jsonl"}
        compact = json.dumps(spawn, separators=(",", ":"))
        rename = json.dumps(
            {k: spawn[k] for k in ("v", "op", "at", "childId", "child", "name")} | {"op": "rename"},
            separators=(",", ":"),
        )
        return [
            json.dumps(dict(reversed(list(spawn.items()))), separators=(",", ":")),  # reordered
            json.dumps(spawn),  # spaces after separators
            compact.replace('"depth":1', '"depth" : 1'),
            compact + " ",  # a blank after the object
            compact + "\r",
            " " + compact,  # a blank before it
            compact.replace("/r/s/", "\\/r\\/s\\/"),  # escaped solidus: the same path
            compact.replace('"spawn"', '"sp\\u0061wn"'),  # an escaped letter in the op
            compact.replace('"worker-a"', '"w\\u00e9"'),
            compact.replace('"worker-a"', '"worker-a","name":"worker-b"'),  # a duplicate key
            compact.replace('{"v":1,', '{"v":1,"depth":7,'),  # duplicate, the last one wins
            compact.replace('"v":1', '"v":1.0'),
            compact.replace('"v":1', '"v":"1"'),
            compact.replace('"depth":1', '"depth":1.0'),
            compact.replace('"depth":1', '"depth":"1"'),
            compact.replace('"depth":1', '"depth":1e0'),
            compact.replace('"depth":1', '"depth":01'),
            compact.replace('"depth":1', '"depth":-1'),
            compact.replace(".194Z", ".194+00:00"),
            compact.replace(".194Z", "Z"),
            compact.replace("2026-12-02", "2026-02-30"),
            compact.replace("T11:", "T24:"),
            compact.replace("2026", "\u0662026"),
            compact.replace('"sub-9f89a7ec"', '"sub-9f89a7eg"'),
            rename.replace('"worker-a"', '"' + "n" * 65 + '"'),
            rename[:-1],  # not closed
            rename + rename,  # two objects on a line
            '{"v":1,"op":"delete","at":"2026-12-02T11:14:10.194Z","childId":"sub-9f89a7ec",'
            '"child":"/r/s/p/sub-9f89a7ec/c.jsonl","reason":"because"}',
            "",
            "[]",
        ]

    def test_batch_and_plain_path_agree_on_odd_lines_between_product_lines(self):
        good = [
            line(
                childId=f"sub-{index:08x}",
                name=f"w-{index}",
                at=f"2026-12-02T11:14:{index % 60:02}.{index:03}Z",
            )
            for index in range(40)
        ]
        odd = self.odd_lines()
        lines = [meta(os.path.join(self.root, "s"))]
        for index, item in enumerate(odd):
            lines += [*good[index % 40 : index % 40 + 3], item]
        lines += good
        text = "".join(item + "\n" for item in lines)
        self.assert_batch_reads_as_plain("odd.jsonl", text)
        # Torn last lines: complete (a record) and cut (tolerated).
        self.assert_batch_reads_as_plain("torn-whole.jsonl", text + good[5])
        torn = self.assert_batch_reads_as_plain("torn-cut.jsonl", text + good[5][:-9])
        self.assertIn("torn_tail", [f.code for f in torn.findings])
        # Each odd line alone after the meta, as the only line of its block but one.
        for number, item in enumerate(odd):
            self.assert_batch_reads_as_plain(f"odd-{number}.jsonl", f"{lines[0]}\n{item}\n")
        # After a fatal line, the records of a run of product lines are suspicious too.
        fatal = self.assert_batch_reads_as_plain(
            "fatal.jsonl", "".join(item + "\n" for item in [lines[0], *good[:3], "{oops", *good])
        )
        self.assertEqual([r.after_fatal for r in fatal.records][-40:], [True] * 40)
        self.assertFalse(any(r.after_fatal for r in fatal.records[:4]))

    def test_a_string_broken_across_two_lines_is_two_bad_lines_not_one_record(self):
        # A block with no backslash is matched with the looser regex, whose strings may
        # hold a newline: two halves of a line must not read as one record.
        whole = line(childId="sub-9f89a7ec")
        cut = whole.index("/session-artifacts/")
        text = f"{meta(self.root)}\n{line()}\n{whole[:cut]}\n{whole[cut:]}\n{line()}\n"
        parsed = self.assert_batch_reads_as_plain("broken.jsonl", text)
        self.assertEqual([r.line for r in parsed.records], [1, 2, 5])
        self.assertEqual(
            [(f.line, f.code) for f in parsed.findings][:2],
            [(3, "malformed_json"), (4, "malformed_json")],
        )

    def test_a_ledger_of_many_blocks_reads_as_plain_with_odd_lines_at_block_ends(self):
        # Over a megabyte: lines cross the reader's 256 KiB blocks, odd ones scattered.
        rng = random.Random(20261203)
        odd = self.odd_lines()
        lines = [meta(os.path.join(self.root, "s"))]
        for index in range(4000):
            lines.append(
                line(
                    childId=f"sub-{index:08x}",
                    child=f"/r/session-artifacts/p/sub-{index:08x}/" + "c" * rng.randrange(200),
                    at=f"2026-12-02T11:{index // 60 % 60:02}:{index % 60:02}.{index % 1000:03}Z",
                )
            )
            if rng.random() < 0.02:
                lines.append(rng.choice(odd))
        parsed = self.assert_batch_reads_as_plain("big.jsonl", "".join(x + "\n" for x in lines))
        self.assertGreater(parsed.size, 4 * jsonl._CHUNK)
        self.assertGreaterEqual(len(parsed.records), 4001)

    def test_a_child_id_with_a_final_newline_is_malformed(self):
        parsed = ledger.read_ledger(
            self.write("l.jsonl", meta("/s") + "\n" + line(childId="sub-9f89a7ec\n") + "\n")
        )
        self.assertIn("malformed_record", [f.code for f in parsed.findings])


if __name__ == "__main__":
    unittest.main()
