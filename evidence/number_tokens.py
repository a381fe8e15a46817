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

_ASCII_TOKEN_BYTES = frozenset(
    byte for byte in range(128) if chr(byte).isalnum() or chr(byte) in "_.,+-"
)
# Every ASCII byte that is no token character becomes a space; the token characters and
# every byte of a non-ASCII character stay. Split, a text's UTF-8 bytes give its pieces:
# maximal runs of ASCII token characters and non-ASCII characters. A token never spans
# two pieces, and a piece of ASCII bytes alone is one whole token.
_PIECE_BYTES = bytes(
    byte if byte >= 0x80 or byte in _ASCII_TOKEN_BYTES else 0x20 for byte in range(256)
)
_DIGITS = frozenset(b"0123456789")


def token_value(token: str) -> int | None:
    """The integer a token (a whole `TOKEN` match) is, or None."""
    token = token.rstrip(".,")
    return int(token.replace(",", "")) if INTEGER.match(token) else None


def numbers_in(text: str) -> set[int]:
    """Every number token of `text`, as integers: each distinct piece of the text is read
    once, however often it occurs."""
    numbers = set()
    pieces = set(text.encode("utf-8", "surrogatepass").translate(_PIECE_BYTES).split())
    for piece in pieces:
        if piece.isdigit():  # ASCII digits alone: the integer they spell
            numbers.add(int(piece))
        elif piece.isascii():
            if _DIGITS.isdisjoint(piece):
                continue
            value = token_value(piece.decode())
            if value is not None:
                numbers.add(value)
        else:
            for token in TOKEN.findall(piece.decode("utf-8", "surrogatepass")):
                value = token_value(token)
                if value is not None:
                    numbers.add(value)
    return numbers
