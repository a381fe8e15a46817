"""The number token: one definition shared by the answer parser, the provenance rules
and the fixture generator, so that what the generator keeps out of a prompt is exactly
what the scorer would read as a number in it (the definition, with examples both ways:
docs/rubric.md "Number tokens").
"""

from __future__ import annotations

import itertools
import re

INTEGER = re.compile(r"^[+-]?(?:[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+)$")
TOKEN = re.compile(r"[\w.,+-]+")
_TOKEN_RUN = re.compile(r"[\w.,+-]*")

# Every ASCII byte that is no token character becomes a space; the token characters and
# every byte of a non-ASCII character stay. Split, a text's UTF-8 bytes give its pieces:
# maximal runs of ASCII token characters and non-ASCII characters. A token never spans
# two pieces, and a piece of ASCII bytes alone is one whole token.
_PIECE_BYTES = bytes(
    byte if byte >= 0x80 or chr(byte).isalnum() or chr(byte) in "_.,+-" else 0x20
    for byte in range(256)
)
# A piece of ASCII bytes that is a number token with a sign, commas or trailing dots.
_SIGNED_OR_GROUPED = re.compile(rb"[+-]?(?:[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+)[.,]*")
# Up to this many numbers are looked for where their digits occur (`numbers_among`), and at
# up to this many places each; past either, every token of the text is read once.
FEW_NUMBERS = 8
MAX_PLACES = 64
# Python reads no integer of more digits (sys.get_int_max_str_digits): a longer token is no
# number, whatever the interpreter's setting.
MAX_TOKEN_CHARS = 4300


def token_value(token: str) -> int | None:
    """The integer a token (a whole `TOKEN` match) is, or None."""
    if len(token) > MAX_TOKEN_CHARS:
        return None
    token = token.rstrip(".,")
    return int(token.replace(",", "")) if INTEGER.match(token) else None


def numbers_in(text: str) -> set[int]:
    """Every number token of `text`, as integers: each distinct piece of the text is read
    once, however often it occurs, and pieces of digits alone, in C."""
    pieces = set(text.encode("utf-8", "surrogatepass").translate(_PIECE_BYTES).split())
    if max(map(len, pieces), default=0) > MAX_TOKEN_CHARS:
        pieces = {piece for piece in pieces if len(piece) <= MAX_TOKEN_CHARS or not piece.isascii()}
    numbers = set(map(int, filter(bytes.isdigit, pieces)))
    for piece in filter(_SIGNED_OR_GROUPED.fullmatch, itertools.filterfalse(bytes.isdigit, pieces)):
        numbers.add(int(piece.rstrip(b".,").replace(b",", b"")))
    for piece in itertools.filterfalse(bytes.isascii, pieces):
        for token in TOKEN.findall(piece.decode("utf-8", "surrogatepass")):
            value = token_value(token)
            if value is not None:
                numbers.add(value)
    return numbers


def numbers_among(text: str, sought: frozenset[int]) -> frozenset[int]:
    """`numbers_in(text) & sought`. For a few numbers, only the tokens around the places
    where each one's last three digits occur are read: every spelling of a number holds
    them (`0,012` the 12, `1,234` the 234)."""
    if len(sought) > FEW_NUMBERS:
        return frozenset(numbers_in(text) & sought)
    found = set()
    backwards = None
    for number in sought:
        key = str(abs(number))[-3:]
        at, places = text.find(key), 0
        while at >= 0:
            places += 1
            if places > MAX_PLACES:
                return frozenset(numbers_in(text) & sought)
            if backwards is None:
                backwards = text[::-1]
            before = len(text) - at  # where the text before `at` starts, read backwards
            start = at - (_TOKEN_RUN.match(backwards, before).end() - before)
            end = _TOKEN_RUN.match(text, at).end()
            if token_value(text[start:end]) == number:
                found.add(number)
                break
            at = text.find(key, end)
    return frozenset(found)


class FirstShowings:
    """Searches a session's tool results, in order, for the numbers of `sought` that no result
    before showed: for the parent, of which the rules ask only whether it had a number by a
    line (rules/knowledge.py `knew`). A line the result before also held is read only for what
    that result held back (numbers its call's own arguments typed): no token spans a line."""

    def __init__(self, sought: frozenset[int]):
        self.unshown = sought
        self.lines: set[str] = set()
        self.held: frozenset[int] = frozenset()

    def shown(self, texts: list[str], typed: frozenset[int]) -> frozenset[int]:
        """What the result of these texts showed first, less what its arguments typed."""
        lines = set().union(*(text.split("\n") for text in texts))
        found = numbers_among("\n".join(lines - self.lines), self.unshown)
        if self.held - typed:
            found |= numbers_among("\n".join(lines & self.lines), self.held - typed)
        shown = found - typed
        self.unshown, self.lines = self.unshown - shown, lines
        self.held = (found | self.held) & typed  # what these lines may hold that they did not show
        return shown
