"""The number token: one definition shared by the answer parser, the provenance rules
and the fixture generator, so that what the generator keeps out of a prompt is exactly
what the scorer would read as a number in it.

A number token is a maximal run of word characters, `.`, `,`, `+` and `-`, with any
trailing `.` and `,` dropped, that is an integer: optional sign, then digits, or digits
grouped by thousands with commas. So `23`, `+23`, `1,234`, `**23**`, `23.`, `(23)` and the
23 of `count=23` are the number 23 or 1234; the `02` of `events-02.jsonl`, `3.5`, `0x17`,
`v2` and `2026-12-03T11` are not numbers at all.

`numbers_in` reads every token of a text. The scorer only asks whether a text holds one
of a few numbers (those the answer file holds), over every tool result of a run:
`Interest.numbers_in` answers that without reading each token with a regex: an ASCII text's
distinct tokens are cut at C speed and met with every spelling of the numbers, and any
other text has only the tokens around a possible hit read by `token_value`, the same rule
(tests/test_number_tokens.py holds the two to agreement).
"""

from __future__ import annotations

import re
from json.decoder import scanstring

INTEGER = re.compile(r"^[+-]?(?:\d+|\d{1,3}(?:,\d{3})+)$")
TOKEN = re.compile(r"[\w.,+-]+")


def token_value(token: str) -> int | None:
    """The integer a token (a whole `TOKEN` match) is, or None."""
    token = token.rstrip(".,")
    return int(token.replace(",", "")) if INTEGER.match(token) else None


def numbers_in(text: str) -> set[int]:
    """Every number token of `text`, as integers."""
    numbers = set()
    for match in TOKEN.finditer(text):
        value = token_value(match.group())
        if value is not None:
            numbers.add(value)
    return numbers


# Every byte but an ASCII digit becomes a space: what is left, split, is the text's runs
# of ASCII digits (bytes.translate and split run at memory speed, a regex does not).
_DIGIT_RUNS = bytes(byte if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
# Every byte that is no ASCII token character (`TOKEN`: a letter, a digit, `_`, `.`, `,`,
# `+`, `-`) becomes a space: what is left, split, is an ASCII text's tokens.
_TOKEN_BYTES = bytes(
    byte if chr(byte).isascii() and (chr(byte).isalnum() or chr(byte) in "_.,+-") else 0x20
    for byte in range(256)
)
# How many trailing dots and commas `_ascii_tokens` strips (one a pass) before it leaves a
# text to the reading at each place.
_TRAILING_PASSES = 4
# A decimal digit outside ASCII (`\d` and `int` take them): a text with one is read whole.
_OTHER_DIGIT = re.compile(r"[^\D0-9]")
_ASCII_DIGITS = "0123456789"
_TOKEN_BACKWARDS = re.compile(r"[\w.,+-]*")


class Interest:
    """The numbers whose provenance the scorer traces, and a fast test for them in a text.

    Why it is exact: a token whose value is one of them, `n`, is `[+-]` at most, then
    `0`s and commas, then `n`'s digits either plain or grouped by thousands, then `.`s and
    commas. So its last run of digits, less leading zeros, is `n` plain, or `n`'s last
    three digits (a grouped form ends in them, padded). A text with no such run of ASCII
    digits (and no digit outside ASCII) holds none of the numbers; in one with such a run,
    every token around each place the run occurs is read by `token_value`. An ASCII text
    is read by its distinct tokens instead (`_ascii_tokens`): in digit-rich output a run
    occurs thousands of times.
    """

    def __init__(self, numbers: frozenset[int]):
        self.numbers = frozenset(numbers)
        keys = set()
        for number in self.numbers:
            digits = str(abs(number))
            keys.add(digits)
            keys.add(digits[-3:])
        self._keys = frozenset(key.encode() for key in keys)
        # Every token without a leading zero whose value is one of the numbers: signed or
        # not, plain or grouped by thousands (INTEGER), to its value.
        self._forms: dict[bytes, int] = {}
        for number in self.numbers:
            spellings = {str(abs(number)), f"{abs(number):,}"}
            signs = ("-",) if number < 0 else ("", "+", "-") if number == 0 else ("", "+")
            for sign in signs:
                for spelling in spellings:
                    self._forms[(sign + spelling).encode()] = number
        self._form_set = frozenset(self._forms)
        # A run of zeros alone stripped of them is empty: the number 0.
        self._stripped_keys = self._keys | ({b""} if 0 in self.numbers else set())

    def __bool__(self) -> bool:
        return bool(self.numbers)

    def numbers_in(self, text: str) -> frozenset[int]:
        """`numbers_in(text) & self.numbers`, without a regex over every token."""
        if not self.numbers or not text:
            return frozenset()
        if text.isascii():
            # Most of a run's text is tool output, often with no digit at all: ten
            # memchr passes say so at memory speed, before any copy of the text.
            if not any(digit in text for digit in _ASCII_DIGITS):
                return frozenset()
        elif _OTHER_DIGIT.search(text):
            return frozenset(numbers_in(text) & self.numbers)
        data = text.encode("utf-8", "surrogatepass")
        if text.isascii():
            tokens = self._ascii_tokens(data)
            if tokens is not None:
                return tokens
        hits = self._hits(set(data.translate(_DIGIT_RUNS).split()))
        if not hits:
            return frozenset()
        found = set()
        read: set[int] = set()  # start of every token read
        for hit in hits:
            key = hit.decode()
            at = text.find(key)
            while at >= 0:
                start = _token_start(text, at)
                if start not in read:
                    read.add(start)
                    value = token_value(TOKEN.match(text, start).group())
                    if value in self.numbers:
                        found.add(value)
                at = text.find(key, at + 1)
        return frozenset(found)

    def numbers_in_json(self, source: str, start: int, end: int) -> frozenset[int]:
        """`numbers_in` of the JSON string whose source between its quotes is
        `source[start:end]` (so `source[start - 1]` is its opening quote): an ASCII
        source with no digit holds none of the numbers (an escape is a backslash and a
        letter, a sign or four hex digits after `\\u`, which is decoded); one with no
        backslash is its own text; any other is decoded (or, failing that, a line written
        by no JSON encoder, read as it stands)."""
        if not self.numbers or start >= end:
            return frozenset()
        find = source.find
        # str.isascii is a flag of the string, not a scan.
        if source.isascii() and find("\\u", start, end) < 0:
            for digit in _ASCII_DIGITS:
                if find(digit, start, end) >= 0:
                    break
            else:
                return frozenset()
            if find("\\", start, end) < 0:
                tokens = self._ascii_tokens(source[start:end].encode())
                if tokens is not None:
                    return tokens
        try:
            text = scanstring(source, start)[0]
        except ValueError:
            text = source[start:end]
        return self.numbers_in(text)

    def _ascii_tokens(self, data: bytes) -> frozenset[int] | None:
        """The numbers of interest an ASCII text holds, read from its distinct tokens; None
        when a token ends in more dots and commas than are stripped here (read otherwise).

        In digit-rich output a hit occurs thousands of times; each token is not read at
        its place. The text's tokens are cut by byte translation (an ASCII `\\w` is a
        letter, a digit or `_`), their trailing dots and commas dropped by replacement, and
        their set met with `_forms`, every spelling of each number without leading zeros;
        a token with a leading zero (after its sign) is read by `token_value`.
        """
        spaced = b" " + data.translate(_TOKEN_BYTES) + b" "
        for _ in range(_TRAILING_PASSES):
            if b". " not in spaced and b", " not in spaced:
                break
            spaced = spaced.replace(b". ", b"  ").replace(b", ", b"  ")
        else:
            if b". " in spaced or b", " in spaced:
                return None
        forms = self._forms
        found = {forms[token] for token in self._form_set.intersection(spaced.split())}
        for zero in (b" 0", b" +0", b" -0"):
            at = spaced.find(zero)
            while at >= 0:
                end = spaced.find(b" ", at + 1)
                if end - at > len(zero):  # not 0 itself, which `_forms` holds
                    value = token_value(spaced[at + 1 : end].decode())
                    if value in self.numbers:
                        found.add(value)
                at = spaced.find(zero, end)
        return frozenset(found)

    def _hits(self, runs: set[bytes]) -> set[bytes]:
        """The runs of digits that may be one of the numbers (see the class)."""
        hits = set(self._keys.intersection(runs))
        for run in runs:
            if run[:1] == b"0" and run.lstrip(b"0") in self._stripped_keys:
                hits.add(run)
        return hits


def _token_start(text: str, at: int) -> int:
    """Where the token holding `text[at]` (a digit) starts: the run of token characters
    read backwards, over a window that doubles until the run ends inside it."""
    window = 64
    while True:
        low = max(0, at - window)
        behind = _TOKEN_BACKWARDS.match(text[low:at][::-1]).end()
        if behind < at - low or low == 0:
            return at - behind
        window *= 2
