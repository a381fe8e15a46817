"""`numbers_in` and `numbers_among` read a text's number tokens as the rule defines them,
on generated texts with numbers in odd places: padded, grouped, signed, inside longer
tokens, beside non-ASCII characters, in other scripts' digits."""

from __future__ import annotations

import random
import unittest

from swarm_fanout.evidence.number_tokens import (
    FEW_NUMBERS,
    MAX_PLACES,
    TOKEN,
    FirstShowings,
    numbers_among,
    numbers_in,
    token_value,
)

CASES = 4000


def by_definition(text: str) -> set[int]:
    """The rule as the module's docstring says it: every maximal token read alone."""
    return {value for token in TOKEN.findall(text) if (value := token_value(token)) is not None}


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
        "".join(chr(0xFF10 + int(d)) for d in digits),  # fullwidth digits: no number
        "".join(chr(0x0660 + int(d)) for d in digits),  # Arabic-Indic digits: no number
        "".join(chr(0x0660 + int(d)) for d in digits[:1]) + digits,
        "e" * rng.randint(60, 300) + digits,
        "\u2014" + digits + "\u2026",  # an em dash and an ellipsis around it
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
    "7" * 4300,  # the longest number token
    "7" * 4301,  # no number: longer than Python reads an integer
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


class NumbersInTest(unittest.TestCase):
    def test_generated_texts_read_as_the_definition_reads_them(self):
        rng = random.Random(22)
        held = 0
        for case in range(CASES):
            interest = generated_interest(rng)
            text = generated_text(rng, interest)
            sought = frozenset(rng.sample(interest, rng.randint(1, len(interest))))
            with self.subTest(case=case, text=text, sought=sought):
                self.assertEqual(numbers_in(text), by_definition(text))
                self.assertEqual(numbers_among(text, sought), by_definition(text) & sought)
            held += bool(by_definition(text) & sought)
        # The agreement is worth something only if hits and misses both occur.
        self.assertGreater(held, CASES // 5)
        self.assertLess(held, CASES - CASES // 5)

    def test_odd_places(self):
        interest = {1234, 5, 0, -77}
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
            "\uff11\uff12\uff13\uff14": set(),  # fullwidth digits are word characters
            "\u0661 1234 \u0661234": {1234},
            "ab_1234": set(),
            "12,34 events-1234 v5 3.5": set(),
            "SHARD-RESULT events-05.jsonl: 5": {5},
            "é1234": set(),
            "—1234… ✓": {1234},
            "x" * 500 + "1234": set(),
            "x" * 500 + " 1234": {1234},
            "\ud800 1234": {1234},
            "\\u0031\\u0032\\u0033\\u0034": set(),  # escapes are the reader's to decode
        }
        for text, expected in cases.items():
            with self.subTest(text=text[:40]):
                self.assertEqual(numbers_in(text) & interest, expected)
                self.assertEqual(numbers_among(text, frozenset(interest)), expected)


class NumbersAmongTest(unittest.TestCase):
    def test_past_the_places_or_numbers_looked_for_every_token_is_read(self):
        crowded = "x5y " * (MAX_PLACES + 1)
        self.assertEqual(numbers_among(crowded + " 5", frozenset({5})), {5})
        self.assertEqual(numbers_among(crowded + " 55", frozenset({5})), set())
        many = frozenset(range(FEW_NUMBERS + 1))
        self.assertEqual(numbers_among("a 3 b 0,008 c 9", many), {3, 8})


class FirstShowingsTest(unittest.TestCase):
    def test_each_result_shows_what_it_shows_first_as_the_definition_reads_it(self):
        """Results that repeat, drop and add lines of the one before, with numbers their
        own calls typed, read as the definition reads each whole."""
        rng = random.Random(31)
        showed = repeated = 0
        for case in range(300):
            interest = generated_interest(rng) + rng.sample(range(50), FEW_NUMBERS)
            sought = frozenset(interest)
            search, unshown, lines = FirstShowings(sought), set(sought), []
            for turn in range(8):
                kept = [line for line in lines if rng.random() < 0.8]
                lines = kept + [generated_text(rng, interest) for _ in range(rng.randint(0, 3))]
                rng.shuffle(lines)
                texts = ["\n".join(lines[:2]), "\n".join(lines[2:])]
                typed = frozenset(rng.sample(interest, rng.randint(0, 3)))
                expected = (by_definition("\n".join(texts)) & unshown) - typed
                with self.subTest(case=case, turn=turn, texts=texts, typed=typed):
                    self.assertEqual(search.shown(texts, typed), expected)
                unshown -= expected
                showed += bool(expected)
                repeated += bool(kept)
        # Worth something only if results show numbers and repeat lines, both often.
        self.assertGreater(showed, 300)
        self.assertGreater(repeated, 1000)

    def test_a_number_a_call_typed_is_shown_by_the_next_that_prints_it_untyped(self):
        search = FirstShowings(frozenset({42, 7}))
        self.assertEqual(search.shown(["total 42"], frozenset({42})), set())
        self.assertEqual(search.shown(["total 42"], frozenset({42})), set())
        self.assertEqual(search.shown(["total 42", "7"], frozenset()), {42, 7})
        self.assertEqual(search.shown(["total 42", "7"], frozenset()), set())


if __name__ == "__main__":
    unittest.main()
