"""The fast test for the numbers of interest (`Interest.numbers_in`) finds exactly what the
plain token rule (`numbers_in`) finds, on generated texts with hits in odd places, and a
run read with it is collected and scored byte for byte as with the plain rule: speed
cannot buy a wrong verdict."""

from __future__ import annotations

import json
import os
import random
import tempfile
import unittest
from unittest import mock

from evidence import jsonl, transcripts
from evidence.artifacts import collect
from evidence.fixture import load_manifest
from evidence.number_tokens import Interest, numbers_in
from scorer import score
from tests import bench, builders

CASES = 4000


class PlainInterest:
    """The plain rule behind `Interest`'s interface: every token read."""

    def __init__(self, numbers: frozenset[int]):
        self.numbers = numbers

    def numbers_in(self, text: str) -> frozenset[int]:
        return frozenset(numbers_in(text) & self.numbers)


def forms(number: int, rng: random.Random) -> list[str]:
    """Ways a text can spell `number`, or nearly: plain, grouped, padded, signed, inside
    a longer token, with a decimal part, in non-ASCII digits."""
    digits = str(abs(number))
    grouped = f"{abs(number):,}"
    sign = "-" if number < 0 else rng.choice(["", "", "+"])
    return [
        sign + digits,
        sign + grouped,
        sign + "0" * rng.randint(1, 3) + digits,
        "0," + "0" * (3 - len(digits) % 3 if len(digits) % 3 else 0) + digits[:3] + digits[3:],
        "x" + digits + "y",
        digits + rng.choice("0123456789"),
        rng.choice("0123456789") + digits,
        digits + ".0",
        digits + ".",
        digits + ",",
        "(" + digits + ")",
        "**" + grouped + "**",
        "-" + digits,
        digits[:-1] + "," + digits[-1:],
        "".join(chr(0xFF10 + int(d)) for d in digits),  # fullwidth digits: int() reads them
        "".join(chr(0x0660 + int(d)) for d in digits),  # Arabic-Indic digits
        "e" * rng.randint(60, 300) + digits,  # past the backwards window
        digits + "_" + digits,
    ]


FILLER = [
    "",
    " ",
    "\n",
    "=",
    ":",
    ",",
    ".",
    "-",
    "+",
    "_",
    "é",
    "\ud800",
    "\x00",
    "x",
    "07",
    "2026-12-03T11:00:00Z",
    "3.5",
    "v2",
    "\\u0031",
]


def generated_text(rng: random.Random, interest: list[int]) -> str:
    pieces = []
    for _ in range(rng.randint(0, 12)):
        if rng.random() < 0.5:
            pieces.append(rng.choice(forms(rng.choice(interest), rng)))
        else:
            pieces.append(rng.choice(FILLER) * rng.randint(1, 3))
        pieces.append(rng.choice(FILLER))
    return "".join(pieces)


def generated_interest(rng: random.Random) -> list[int]:
    pool = [0, 5, 12, 23, 100, 999, 1000, 1034, 1234, 4821, 12345, 1234567, -4, -1234]
    return [*rng.sample(pool, rng.randint(1, 5)), rng.randint(-(10**7), 10**7)]


class InterestTest(unittest.TestCase):
    def test_the_fast_test_finds_what_the_token_rule_finds_on_generated_texts(self):
        rng = random.Random(22)
        for case in range(CASES):
            interest = generated_interest(rng)
            text = generated_text(rng, interest)
            numbers = frozenset(interest)
            with self.subTest(case=case, text=text, interest=interest):
                self.assertEqual(
                    Interest(numbers).numbers_in(text), frozenset(numbers_in(text) & numbers)
                )

    def test_the_generated_texts_hold_the_numbers_often_and_not_always(self):
        # The agreement above is worth something only if hits and misses both occur.
        rng = random.Random(22)
        held = 0
        for _ in range(CASES):
            interest = generated_interest(rng)
            held += bool(numbers_in(generated_text(rng, interest)) & set(interest))
        self.assertGreater(held, CASES // 4)
        self.assertLess(held, CASES - CASES // 4)

    def test_odd_places(self):
        interest = Interest(frozenset({1234, 5, 0, -77}))
        cases = {
            "x1234y": set(),
            "12345": set(),
            "113.0 1234.0": set(),
            "1,234.": {1234},
            "01234 and 0,001,234": {1234},
            "0,005": {5},
            "000": {0},
            "-77 and 77": {-77},
            "+5": {5},
            "\uff11\uff12\uff13\uff14": {1234},  # fullwidth digits
            "ab_1234": set(),
            "é1234": set(),
            "x" * 500 + "1234": set(),
            "x" * 500 + " 1234": {1234},
            "\ud800 1234": {1234},
            "\\u0031\\u0032\\u0033\\u0034": set(),  # escapes are the reader's to decode
        }
        for text, expected in cases.items():
            with self.subTest(text=text[:40]):
                self.assertEqual(interest.numbers_in(text), frozenset(expected))
                self.assertEqual(
                    frozenset(numbers_in(text)) & interest.numbers, frozenset(expected)
                )


class JsonSourceTest(unittest.TestCase):
    """`numbers_in_json` reads a JSON string's source as the decoded text would read."""

    def test_escapes_read_as_their_decoded_characters(self):
        interest = Interest(frozenset({4821, 7, 0}))
        sources = [
            "\\n4821",  # a newline, then the number
            "\\\\n4821",  # an escaped backslash, then the token n4821: no number
            "\\\\\\n4821",  # an escaped backslash, a newline, the number
            'a\\"4821\\"',
            "\\t4,821.",
            "x\\/4821",
            "\\u00344821",  # \u0034 is 4: 44821
            "\\u0034821",  # 4821
            "0004821 -0 +0,007 7..,",
            "4821" + "." * 9,  # more trailing dots than are stripped in one go
            "v4821 4821x 48.21",
        ]
        for source in sources:
            with self.subTest(source=source):
                text = json.loads(f'"{source}"')
                # The string as it stands in a line: its quotes around it.
                line = '{"text":"' + source + '","n":1}'
                start = len('{"text":"')
                self.assertEqual(
                    interest.numbers_in_json(line, start, start + len(source)),
                    frozenset(numbers_in(text)) & interest.numbers,
                )


class FastAndPlainRunsAgreeTest(unittest.TestCase):
    """Whole runs: collected and scored with the fast test and with the plain rule."""

    def test_a_run_with_answers_in_odd_places_scores_alike_either_way(self):
        rng = random.Random(7)
        read_sparsely = 0
        for case in range(6):
            with self.subTest(case=case), tempfile.TemporaryDirectory() as tmp:
                run_dir = os.path.join(tmp, "run")
                answers = [rng.choice([1034, 4821, 12345, 999_999]) + i for i in range(3)]
                outputs = []
                for answer in answers:
                    spelled = rng.choice(forms(answer, rng))
                    # A JSON string escape, a long token, a chunk-sized line around it.
                    outputs.append(
                        rng.choice(["", "y" * 300_000, json.dumps(str(answer))[1:-1]])
                        + f" {spelled} "
                        + "".join(f"\\u00{ord(c):x}" for c in str(answer))
                    )
                manifest = self.honest_run(run_dir, answers, outputs)
                fixture = load_manifest(manifest)
                sparse = []

                def counted(*args, real=transcripts.sparse_tool_result, kept=sparse):
                    kept.append(real(*args))
                    return kept[-1]

                with mock.patch.object(transcripts, "sparse_tool_result", counted):
                    fast = collect(run_dir, fixture.artifact)
                read_sparsely += any(record is not None for record in sparse)
                # The plain way: every line parsed whole (no tool result read sparsely),
                # every text tokenised.
                with (
                    mock.patch.object(transcripts, "_interest", PlainInterest),
                    mock.patch.object(jsonl, "PARSE_EVERY_LINE", True),
                ):
                    plain = collect(run_dir, fixture.artifact)
                self.assertEqual(fast, plain)
                self.assertEqual(
                    json.dumps(score(fixture, fast).to_json()),
                    json.dumps(score(fixture, plain).to_json()),
                )
                # Some call showed a number of interest: the case exercised the finder.
                self.assertTrue(
                    any(call.shown for call in fast.parent.call_facts)
                    or any(call.shown for c in fast.children for t in c.transcripts
                           for call in t.call_facts)
                )  # fmt: skip
        # Long tool results were read sparsely (evidence/transcripts.py) in some cases.
        self.assertGreater(read_sparsely, 0)

    def honest_run(self, run_dir: str, answers: list[int], outputs: list[str]) -> str:
        build = builders.RunBuilder(run_dir, stream=True)
        with build.cell(bench.SPAWN_CODE):
            spawned = [build.spawn(bench.worker(i)) for i in range(len(answers))]
        shards = []
        for index, (answer, output) in enumerate(zip(answers, outputs, strict=True)):
            shard = {
                "file": f"s{index}.jsonl",
                "worker": bench.worker(index),
                "question": "q",
                "expected": answer,
            }
            shards.append(shard)
            build.assistant("poll", code=bench.POLL_CODE)
            build.tool_result(output)
            build.reply(spawned[index], f"{shard['file']}: {answer}", output=output)
            build.child_turn(spawned[index])
        build.finish()
        build.write_index([f"- {shard['file']}: {shard['expected']}" for shard in shards])
        manifest = os.path.join(build.paths.root, "fixture.json")
        with open(manifest, "w", encoding="utf-8") as handle:
            json.dump({"name": "agree", "artifact": "combined-index.md", "shards": shards}, handle)
        return manifest


if __name__ == "__main__":
    unittest.main()
