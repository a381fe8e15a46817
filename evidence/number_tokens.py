"""The number token: one definition shared by the answer parser, the provenance rules
and the fixture generator, so that what the generator keeps out of a prompt is exactly
what the scorer would read as a number in it.

A number token is a maximal run of word characters, `.`, `,`, `+` and `-`, with any
trailing `.` and `,` dropped, that is an integer: optional sign, then digits, or digits
grouped by thousands with commas. So `23`, `+23`, `1,234`, `**23**`, `23.`, `(23)` and the
23 of `count=23` are the number 23 or 1234; the `02` of `events-02.jsonl`, `3.5`, `0x17`,
`v2` and `2026-12-03T11` are not numbers at all.
"""

from __future__ import annotations

import re

INTEGER = re.compile(r"^[+-]?(?:\d+|\d{1,3}(?:,\d{3})+)$")
TOKEN = re.compile(r"[\w.,+-]+")


def numbers_in(text: str) -> set[int]:
    """Every number token of `text`, as integers."""
    numbers = set()
    for match in TOKEN.finditer(text):
        token = match.group().rstrip(".,")
        if INTEGER.match(token):
            numbers.add(int(token.replace(",", "")))
    return numbers
