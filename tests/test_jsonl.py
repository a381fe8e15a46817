"""The block reader in jsonl.iter_objects: lines, not blocks, are what it reports.

It reads a file in blocks of whole lines and parses each line in place; these
tests pin that block boundaries, line caps and byte caps never change which
lines it yields or what it finds, by comparing against a plain line-by-line
reference built on json.loads.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import unittest
from unittest import mock

from evidence import jsonl


def reference(data: bytes) -> tuple[list, list]:
    """Each line on its own through json.loads: (number, record, torn) and (line, code)."""
    objects, problems = [], []
    lines = data.split(b"\n")
    last_torn = lines[-1] != b""
    if not last_torn:
        lines.pop()
    for index, raw in enumerate(lines, 1):
        torn = last_torn and index == len(lines)
        body = raw.rstrip(b"\r")
        if not body.strip():
            continue
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            problems.append((index, "invalid_utf8"))
            continue
        try:
            value = json.loads(text)
        except ValueError:
            problems.append((index, "torn_tail" if torn else "malformed_json"))
            continue
        if isinstance(value, dict):
            objects.append((index, value, torn))
        else:
            problems.append((index, "not_an_object"))
    return objects, problems


class BlockReaderTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.path = os.path.join(tmp.name, "f.jsonl")

    def read(self, data: bytes, **options) -> tuple[list, list]:
        with open(self.path, "wb") as handle:
            handle.write(data)
        findings: list[jsonl.Finding] = []
        lines = [tuple(line) for line in jsonl.iter_objects(self.path, findings, **options)]
        return lines, [(finding.line, finding.code) for finding in findings]

    def test_a_value_that_runs_on_past_its_line_is_two_bad_lines(self):
        # `{"a":[1` + newline + `2]}` is one valid JSON text but two bad JSONL lines.
        lines, found = self.read(b'{"a":[1\n2]}\n{"ok":1}\n')
        self.assertEqual(lines, [(3, {"ok": 1}, False)])
        self.assertEqual(found, [(1, "malformed_json"), (2, "malformed_json")])

    def test_two_objects_on_one_line_are_malformed(self):
        lines, found = self.read(b'{"a":1},{"b":2}\n{"c":3} \r\n')
        self.assertEqual(lines, [(2, {"c": 3}, False)])
        self.assertEqual(found, [(1, "malformed_json")])

    def test_a_bad_byte_costs_only_its_own_line(self):
        lines, found = self.read(b'{"a":1}\n{"b":"\xff"}\n\n{"c":"\xe2\x82\xac"}')
        self.assertEqual(lines, [(1, {"a": 1}, False), (4, {"c": "\u20ac"}, True)])
        self.assertEqual(found, [(2, "invalid_utf8")])

    def test_a_line_over_the_cap_is_skipped_whole_and_counted(self):
        data = b'{"a":1}\n{"long":"' + b"x" * 100 + b'"}\n{"b":2}\n'
        lines, found = self.read(data, max_line_bytes=50)
        self.assertEqual([line[0] for line in lines], [1, 3])
        self.assertEqual(found, [(2, "line_too_long")])

    def test_the_byte_cap_keeps_the_line_that_crosses_it(self):
        data = b"".join(b'{"n":%d}\n' % n for n in range(10))  # 8 bytes a line
        lines, found = self.read(data, max_bytes=20)
        self.assertEqual([line[1]["n"] for line in lines], [0, 1, 2])
        self.assertEqual(found, [(3, "byte_cap")])

    def test_random_files_read_alike_for_every_block_size(self):
        pieces = [
            b'{"a":1}',
            b'{"s":"x\xff"}',
            b"[1,2]",
            b"",
            b"  ",
            b'{"a":[1',
            b"2]}",
            b'{"s":"\x00"}',
            b' {"x":2}\t',
            b'{"e":"\xe2\x82\xac"}',
            b'{"big":"' + b"y" * 700 + b'"}',
            b"\xe2\x82",
            b"{}",
            b'"text"',
        ]
        rng = random.Random(7)
        for trial in range(400):
            count = rng.randint(0, 10)
            data = b"".join(rng.choice(pieces) + rng.choice([b"\n", b"\r\n"]) for _ in range(count))
            if data and rng.random() < 0.3:
                data = data[: rng.randint(0, len(data))]
            with mock.patch.object(jsonl, "_CHUNK", rng.randint(1, 64)):
                got = self.read(data)
            self.assertEqual(got, reference(data), f"trial {trial}: {data!r}")


if __name__ == "__main__":
    unittest.main()
