"""jsonl.iter_objects: every line of a JSONL file is an object or a named finding."""

from __future__ import annotations

import os
import unittest
from unittest import mock

from swarm_fanout.evidence import jsonl
from tests import temp_dir


class LineReaderTest(unittest.TestCase):
    def setUp(self) -> None:
        self.path = os.path.join(temp_dir(self), "f.jsonl")

    def read(self, data: bytes, **options) -> tuple[list, list]:
        with open(self.path, "wb") as handle:
            handle.write(data)
        findings: list[jsonl.Finding] = []
        lines = [tuple(line) for line in jsonl.iter_objects(self.path, findings, **options)]
        return lines, [(finding.line, finding.code) for finding in findings]

    def test_a_value_that_runs_on_past_its_line_is_two_bad_lines(self):
        # `{"a":[1` + newline + `2]}` is one valid JSON text but two bad JSONL lines.
        lines, found = self.read(b'{"a":[1\n2]}\n{"ok":1}\n')
        self.assertEqual(lines, [(3, {"ok": 1})])
        self.assertEqual(found, [(1, "malformed_json"), (2, "malformed_json")])

    def test_two_objects_on_one_line_are_malformed(self):
        lines, found = self.read(b'{"a":1},{"b":2}\n{"c":3} \r\n')
        self.assertEqual(lines, [(2, {"c": 3})])
        self.assertEqual(found, [(1, "malformed_json")])

    def test_a_bad_byte_costs_only_its_own_line(self):
        lines, found = self.read(b'{"a":1}\n{"b":"\xff"}\n\n{"c":"\xe2\x82\xac"}')
        self.assertEqual(lines, [(1, {"a": 1}), (4, {"c": "\u20ac"})])
        self.assertEqual(found, [(2, "invalid_utf8")])

    def test_a_line_over_the_cap_is_skipped_whole_and_counted(self):
        data = b'{"a":1}\n{"long":"' + b"x" * 100 + b'"}\n{"b":2}\n'
        with mock.patch.object(jsonl, "MAX_LINE_BYTES", 50):
            lines, found = self.read(data)
        self.assertEqual([line[0] for line in lines], [1, 3])
        self.assertEqual(found, [(2, "line_too_long")])

    def test_the_byte_cap_keeps_the_line_that_crosses_it(self):
        data = b"".join(b'{"n":%d}\n' % n for n in range(10))  # 8 bytes a line
        lines, found = self.read(data, max_bytes=20)
        self.assertEqual([line[1]["n"] for line in lines], [0, 1, 2])
        self.assertEqual(found, [(3, "byte_cap")])

    def test_whole_lines_that_start_as_skipped_are_passed_over_and_keep_their_numbers(self):
        data = b'{"type":"update","x":\xff}\n{"type":"updates"}\n{"type":"end"}\n{"type":"update"'
        lines, found = self.read(data, skip=(b'{"type":"update"',))
        # Line 1 is bad but never read; line 2 only starts alike; the torn line 4 is read.
        self.assertEqual(lines, [(2, {"type": "updates"}), (3, {"type": "end"})])
        self.assertEqual(found, [(4, "torn_tail")])

    def test_a_torn_last_line_is_a_record_when_whole_and_a_finding_when_cut(self):
        lines, found = self.read(b'{"a":1}\n{"b":2}')
        self.assertEqual(lines, [(1, {"a": 1}), (2, {"b": 2})])
        self.assertEqual(found, [])
        lines, found = self.read(b'{"a":1}\n{"b":')
        self.assertEqual(lines, [(1, {"a": 1})])
        self.assertEqual(found, [(2, "torn_tail")])

    def test_blank_lines_nul_bytes_and_non_objects(self):
        lines, found = self.read(b'\n  \r\n{"s":"\x00"}\n[1,2]\n"text"\n{}\n')
        self.assertEqual(lines, [(6, {})])
        self.assertEqual(found, [(3, "malformed_json"), (4, "not_an_object"), (5, "not_an_object")])


if __name__ == "__main__":
    unittest.main()
