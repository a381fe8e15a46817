"""The fast path (stream lines skipped unread, numbers found without tokenising) and the
plain path (every line parsed, every text tokenised) give the same verdict bytes.

The plain path is forced by `jsonl.PARSE_EVERY_LINE` and the plain tokenizer. Runs are
the captured `main` run with lines put where a byte-level pre-filter could go wrong: a
wanted value spelled with `\\u00XX` escapes, keys repeated or out of the product's order,
markers in a longer token, a marker right after a block boundary, backslashes before an
escape, and numbers of the answer in tool results inside longer tokens, escaped, and
across the reader's block boundary.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import tempfile
import unittest
from unittest import mock

from evidence import artifacts, jsonl, transcripts
from evidence.artifacts import collect, read_stream
from evidence.fixture import load_manifest
from evidence.number_tokens import numbers_in
from scorer import score
from tests.test_real_runs import materialize

SEED = 20261203
CASES = 24
BLOCK = 256 * 1024  # evidence/jsonl.py `_CHUNK`

# Stream lines, valid JSON each; `{n}` is a case-unique number.
STREAM_LINES = (
    # A wanted type spelled with escapes: only the escape test can catch these.
    '{{"type":"message\\u005fend","message":{{"role":"\\u0061ssistant",'
    '"responseId":"resp-esc-{n}","usage":{{"input":{n},"totalTokens":{n}}}}}}}',
    '{{"type":"message\\u005Fend","message":{{"role":"assistant","responseId":"resp-up-{n}"}}}}',
    '{{"type":"tool\\u005fexecution\\u005fstart","toolCallId":"call-esc-{n}"}}',
    '{{"type":"rlm\\u005fchild\\u005fupdate","child":{{"id":"sub-{n:08x}"}}}}',
    # A repeated key, out of the product's order: the last one counts.
    '{{"message":{{"role":"toolResult","role":"assistant","responseId":"resp-dup-{n}"}},'
    '"type":"message_update","type":"message_end"}}',
    # Half-read in the product's layout (evidence/jsonl.py `Layout.heads`): a turn_end's
    # message before tool results, a child update before more keys; and the same with a
    # space after the value, which is read whole.
    '{{"type":"turn_end","message":{{"role":"assistant","responseId":"resp-turn-{n}",'
    '"content":[{{"type":"toolCall","id":"call-turn-{n}"}}]}},"toolResults":[{{"x":"}}"}}]}}',
    '{{"type":"turn_end","message":{{"role":"assistant","responseId":"resp-sp-{n}"}} ,"x":1}}',
    '{{"type":"rlm_child_update","child":{{"id":"sub-{n:08x}","n":[1,{{"a":"}}"}}]}},"more":2}}',
    # Skipped on its first bytes though it names every marker.
    '{{"type":"tool_execution_end","toolCallId":"c","result":"message_end assistant '
    'tool_execution_start turn_end rlm_child_update {n}"}}',
    # The product's key order reversed, and spaces between tokens.
    '{{"message":{{"responseId":"resp-rev-{n}","role":"assistant"}},"type":"message_end"}}',
    '{{ "type" : "tool_execution_start" , "toolCallId" : "call-sp-{n}" }}',
    # Markers inside longer tokens, and an escaped backslash before `u0061`: no escape.
    '{{"type":"message_update","delta":"xmessage_endx assistants tool_y_start"}}',
    '{{"type":"message_update","delta":"\\\\u0061ssistant message_end {n}"}}',
    # Many backslashes, then the escape (past the ones looked at one by one).
    '{{"type":"message_end","pad":"' + "\\\\" * 12 + '","message":{{"role":"\\u0061ssistant",'
    '"responseId":"resp-bs-{n}"}}}}',
    # A tool result's end that names the assistant: read, and not a turn.
    '{{"type":"message_end","message":{{"role":"toolResult","content":"assistant {n}"}}}}',
)


def _padding_line(size: int) -> str:
    return json.dumps({"type": "message_update", "delta": "y" * size}, separators=(",", ":"))


def _tool_call(call_id: str) -> str:
    """The child's call whose result follows: code without a number, so what its result
    shows is the session's own work (docs/rubric.md "Provenance")."""
    record = {
        "type": "message",
        "id": f"call-{call_id}",
        "timestamp": "2026-12-02T11:19:59.000Z",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "toolCall", "id": call_id, "name": "ipython",
                 "arguments": {"code": "print(data)"}},
            ],
            "stopReason": "toolUse",
        },
    }  # fmt: skip
    return json.dumps(record, separators=(",", ":"))


def _tool_result(call_id: str, text: str, escaped: bool) -> str:
    record = {
        "type": "message",
        "id": f"odd-{call_id}",
        "timestamp": "2026-12-02T11:20:00.000Z",
        "message": {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": "ipython",
            "content": [{"type": "text", "text": text}],
            "isError": False,
        },
    }
    line = json.dumps(record, separators=(",", ":"))
    if escaped:
        # Every digit of the text as a `\u00XX` escape: the same JSON string.
        head, _, tail = line.partition('"text":"')
        body, _, rest = tail.partition('"')
        body = "".join(f"\\u{ord(c):04x}" if c.isdigit() else c for c in body)
        line = f'{head}"text":"{body}"{rest}'
    return line


def _mutate_stream(path: str, rng: random.Random) -> None:
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    lines.pop()  # the final newline
    for _ in range(rng.randint(2, 8)):
        template = rng.choice(STREAM_LINES)
        lines.insert(rng.randint(1, len(lines)), template.format(n=rng.randint(1, 99_999)))
    if rng.random() < 0.5:
        # A wanted line starts right at (or just past) the reader's block boundary.
        at = rng.randint(1, len(lines))
        before = sum(len(line) + 1 for line in lines[:at])
        pad = max(0, BLOCK - before - len('{"type":"message_update","delta":""}') - 1)
        lines[at:at] = [_padding_line(pad + rng.choice((0, 1, 7))), STREAM_LINES[0].format(n=7)]
    torn = rng.random() < 0.3
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + ("" if torn else "\n"))


def _mutate_transcript(path: str, numbers: list[int], rng: random.Random) -> None:
    """Tool results with the answer's numbers in odd places, appended to a transcript."""
    with open(path, encoding="utf-8") as handle:
        size = len(handle.read().encode())
    added = []
    for index in range(rng.randint(1, 4)):
        number = rng.choice(numbers)
        spot = rng.choice(
            (
                f"count={number}",
                f"x{number}y",  # inside a longer token: no number
                f"{number:,}.",
                f"v{number}",
                f"0{number}",
                f"({number})",
                f"{number}.5",
                f"-{number}",
            )
        )
        text = rng.choice(("", "z" * rng.randint(0, 300))) + spot
        if rng.random() < 0.3:
            # The number right at the reader's next block boundary.
            text = "w" * max(0, BLOCK - size - 200) + " " + spot
        added.append(_tool_call(f"odd-{index}"))
        added.append(_tool_result(f"odd-{index}", text, escaped=rng.random() < 0.4))
        size += len(added[-2]) + len(added[-1]) + 2
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join(added) + "\n")


def _plain_interest(text: str, interest: frozenset[int]) -> frozenset[int]:
    return frozenset(numbers_in(text) & interest) if interest else frozenset()


def _verdict_and_run(run_dir: str, plain: bool) -> tuple[str, artifacts.RunArtifacts]:
    fixture = load_manifest(run_dir)
    finder = _plain_interest if plain else transcripts.of_interest
    with (
        mock.patch.object(jsonl, "PARSE_EVERY_LINE", plain),
        mock.patch.object(transcripts, "of_interest", finder),
        mock.patch.object(artifacts, "of_interest", finder),
    ):
        run = collect(run_dir, fixture.artifact)
    # `events` counts skipped lines too; every other field must agree.
    run = dataclasses.replace(run, stream=dataclasses.replace(run.stream, events=0))
    return json.dumps(score(fixture, run).to_json()), run


class FastPathAgreesWithPlainPathTest(unittest.TestCase):
    def test_generated_runs_with_hits_in_odd_places_score_alike(self):
        rng = random.Random(SEED)
        changed_stream = derived = 0
        for case in range(CASES):
            with self.subTest(case=case), tempfile.TemporaryDirectory() as tmp:
                run_dir = materialize("main", tmp)
                before = read_stream(os.path.join(run_dir, "stdout.jsonl"))
                _mutate_stream(os.path.join(run_dir, "stdout.jsonl"), rng)
                fixture = load_manifest(run_dir)
                run = collect(run_dir, fixture.artifact)
                numbers = sorted(numbers_in(run.artifact_text or ""))
                self.assertTrue(numbers)
                child = rng.choice(run.children).transcripts[0]
                _mutate_transcript(child.path, numbers, rng)
                fast = _verdict_and_run(run_dir, plain=False)
                plain = _verdict_and_run(run_dir, plain=True)
                self.assertEqual(fast[1].stream, plain[1].stream)
                self.assertEqual(fast[1].parent, plain[1].parent)
                self.assertEqual(fast[1], plain[1])
                self.assertEqual(fast[0], plain[0])
                changed_stream += dataclasses.replace(before, events=0) != plain[1].stream
                after = {t.path: t for c in plain[1].children for t in c.transcripts}[child.path]
                derived += _shown(after) != _shown(child)
        # The inserted lines did change what the stream shows, and a child derived
        # numbers in the odd tool results: the test has teeth.
        self.assertGreater(changed_stream, CASES // 2)
        self.assertGreater(derived, CASES // 2)


def _shown(transcript) -> frozenset[int]:
    """Every number of interest the session's own calls showed (what it could derive)."""
    return frozenset().union(*(call.shown for call in transcript.call_facts))


class SkippedLineTest(unittest.TestCase):
    def lines(self, text: str) -> tuple[list, list]:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "stdout.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            findings: list = []
            read = list(
                jsonl.iter_objects(
                    path, findings, wanted=artifacts.STREAM_WANTED, layout=artifacts.STREAM_LAYOUT
                )
            )
        return read, findings

    def test_escaped_wanted_value_is_read(self):
        read, _ = self.lines('{"type":"session"}\n{"type":"message\\u005fend","x":1}\n')
        self.assertEqual(read[1].record, {"type": "message_end", "x": 1})

    def test_unwanted_line_is_skipped_unread(self):
        read, findings = self.lines('{"type":"session"}\n{"type":"agent_end","x":1}\n')
        self.assertIs(read[1].record, jsonl.UNREAD)
        self.assertEqual(findings, [])

    def test_garbage_nul_bytes_and_torn_tail_are_still_findings(self):
        _, findings = self.lines('{"type":"session"}\n\x00\x00\nnot json\n{"type":"agent_e')
        self.assertEqual(
            [(f.line, f.code) for f in findings],
            [(2, "malformed_json"), (3, "malformed_json"), (4, "torn_tail")],
        )

    def test_first_key_decides_in_the_products_layout(self):
        # The documented limit of `Layout` (evidence/jsonl.py `_wanted_lines`): a line that
        # starts as a type never needed is skipped, though a later duplicate `type` key
        # (which the product never writes) would make json.loads read another type.
        text = '{"type":"session"}\n{"type":"agent_end","type":"message_end"}\n'
        read, _ = self.lines(text)
        self.assertIs(read[1].record, jsonl.UNREAD)
        with mock.patch.object(jsonl, "PARSE_EVERY_LINE", True):
            plain, _ = self.lines(text)
        self.assertEqual(plain[1].record, {"type": "message_end"})

    def test_half_read_line_holds_its_heads_value_only(self):
        text = (
            '{"type":"session"}\n'
            '{"type":"turn_end","message":{"role":"assistant","k":"},"},"toolResults":[7]}\n'
            '{"type":"turn_end","message":{"role":"assistant"}  }\n'
        )
        read, findings = self.lines(text)
        self.assertEqual(
            read[1].record, {"type": "turn_end", "message": {"role": "assistant", "k": "},"}}
        )
        # What follows the value is no `,` or `}`: the line is read whole.
        self.assertEqual(read[2].record, {"type": "turn_end", "message": {"role": "assistant"}})
        self.assertEqual(findings, [])

    def test_malformed_line_that_looks_like_an_unwanted_object_is_not_checked(self):
        # The documented cost of skipping (docs/rubric.md "Findings"): not a finding.
        _, findings = self.lines('{"type":"session"}\n{"type":"agent_end",oops}\n')
        self.assertEqual(findings, [])
        with mock.patch.object(jsonl, "PARSE_EVERY_LINE", True):
            _, plain = self.lines('{"type":"session"}\n{"type":"agent_end",oops}\n')
        self.assertEqual([f.code for f in plain], ["malformed_json"])


def _result_line(text: str, call_id: str = "c1", **extra) -> str:
    message = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "ipython",
        "content": [{"type": "text", "text": text}],
        "details": {"status": "ok", "stdout": text, "stderr": ""},
        "isError": False,
    }
    message.update(extra)
    record = {"type": "message", "id": "r1", "parentId": None,
              "timestamp": "2026-12-02T11:20:00.000Z", "message": message}  # fmt: skip
    return json.dumps(record, separators=(",", ":"))


class SparseToolResultTest(unittest.TestCase):
    """A long toolResult line read with its output left out (evidence/transcripts.py
    `sparse_tool_result`) yields what the plain parse does, or is parsed whole."""

    LONG = "y" * 20_000

    def sparse(self, line: str):
        return transcripts.sparse_tool_result(line, 0, len(line), 2)

    def test_output_is_left_out_and_its_source_kept(self):
        text = self.LONG + ' 4821 \\"quoted\\" \\\\'
        line = _result_line(text)
        record = self.sparse(line)
        self.assertIsNotNone(record)
        plain = json.loads(line)
        self.assertEqual(record["message"]["toolCallId"], "c1")
        self.assertEqual(record["timestamp"], plain["timestamp"])
        source, start, end = record.body(record["message"]["content"][0]["text"])
        self.assertEqual(json.loads('"' + source[start:end] + '"'), text)
        self.assertEqual(
            transcripts.of_interest_json(source, start, end, frozenset({4821, 7})),
            frozenset({4821}),
        )

    def test_lines_it_must_leave_to_the_plain_parse(self):
        cases = {
            "short": _result_line("y" * 100),
            "an error result": _result_line(self.LONG, isError=True),
            "a long call id": _result_line(self.LONG, call_id="c" * 5000),
            "a long sent message": _result_line(
                self.LONG, details={"sentAgentMessages": [{"id": "m", "message": self.LONG}]}
            ),
            "a NUL escape of its own": _result_line(self.LONG, toolName="\u0000"),
            "many escaped quotes": _result_line('"' * 300 + self.LONG),
            "not JSON": _result_line(self.LONG)[:-1] + ",}",
            "an assistant message": _result_line(self.LONG).replace("toolResult", "assistant"),
        }
        for name, line in cases.items():
            with self.subTest(name):
                self.assertIsNone(self.sparse(line))

    def test_a_duplicate_key_that_drops_a_left_out_string_reads_the_line_whole(self):
        line = _result_line(self.LONG).replace('"stderr":""', '"stdout":"short"')
        self.assertIsNone(self.sparse(line))

    def test_transcripts_read_alike_either_way(self):
        rng = random.Random(SEED)
        interest = frozenset({4821, 77, 1034})
        shown = 0
        for case in range(12):
            with self.subTest(case=case), tempfile.TemporaryDirectory() as tmp:
                lines = [
                    '{"type":"session","version":3,"id":"s1","timestamp":'
                    '"2026-12-02T11:00:00.000Z","cwd":"/w"}'
                ]
                for index in range(4):
                    number = rng.choice(sorted(interest))
                    spot = rng.choice((f"{number}", f"x{number}", f"{number:,}", f"\n{number}"))
                    text = "z" * rng.randint(0, 20_000) + " " + spot
                    text += rng.choice(('"', "\\", "é", " ")) + " " + "z" * 9000
                    line = _result_line(text, call_id=f"c{index}")
                    if rng.random() < 0.3:
                        # The number's first digit as a `\u00XX` escape: the same string.
                        digit = str(number)[0]
                        line = line.replace(str(number), f"\\u003{digit}{str(number)[1:]}")
                    lines += [_tool_call(f"c{index}"), line]
                path = os.path.join(tmp, "t.jsonl")
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write("\n".join(lines) + "\n")
                fast = transcripts.read_transcript(path, interest=interest)
                with mock.patch.object(jsonl, "PARSE_EVERY_LINE", True):
                    plain = transcripts.read_transcript(path, interest=interest)
                self.assertEqual(fast, plain)
                shown += any(call.shown for call in plain.call_facts)
        # Numbers were shown in most cases: the comparison had something to compare.
        self.assertGreater(shown, 6)


class CollectorStateTest(unittest.TestCase):
    def test_collect_leaves_the_cyclic_collector_as_it_found_it(self):
        # collect() turns it off while it reads (evidence/artifacts.py): a caller's own
        # setting comes back either way.
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = materialize("main", tmp)
            fixture = load_manifest(run_dir)
            self.assertTrue(gc.isenabled())
            collect(run_dir, fixture.artifact)
            self.assertTrue(gc.isenabled())
            gc.disable()
            try:
                collect(run_dir, fixture.artifact)
                self.assertFalse(gc.isenabled())
            finally:
                gc.enable()


if __name__ == "__main__":
    unittest.main()
