"""The files a tool call names, and those it writes, read from its code (an ipython cell,
docs/product-contract.md §9) one line at a time for the provenance rules (docs/rubric.md).

A *path* is a string literal of the code (or a word of one, for a shell command inside a
string or on a `!` line) with no space in it that holds a `/` or ends in a file extension:
`'combined-index.md'`, `"/tmp/answers.json"`, `f"{REPO}/combined-index.md"`. A line *writes*
the paths it names, directly or through a variable an earlier line of the session bound to
them, when it holds a writing call (PYTHON_WRITE, OPEN_MODE, SHELL_WRITE). So
`INDEX = Path('combined-index.md')` binds INDEX, a later `INDEX.write_text(text)` writes the
index, `print(INDEX.read_text())` only names it, and `data = json.load(open(path))` binds
nothing (data holds no path). A path built at run time from parts none of which is a path is
not seen at all.
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_PATHS_PER_CALL = 64
MAX_PATH_CHARS = 1024
LITERAL = re.compile(r"""(['"])((?:\\.|(?!\1)[^\\\n])*)\1""")
EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
ASSIGNMENT = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# A variable holds a path, not what was read from it: `data = json.load(open(p))` binds none.
READS = re.compile(r"read|load|open\(")
# Writing calls of Python, with the line's string literals blanked out first.
PYTHON_WRITE = re.compile(
    r"write_text|write_bytes|\.write\(|\.writelines\(|\bdump\(|\.to_csv\(|\.to_json\("
    r"|\.touch\(|shutil\.(?:copy\w*|move)|os\.(?:rename|replace)|\.rename\("
)
# `open(x, 'w')`, `open(x, mode='a')`, `p.open('w')`: the mode literal is the marker.
OPEN_MODE = re.compile(
    r"""(?:open\([^#]*?,\s*(?:mode\s*=\s*)?|\.open\(\s*)['"][wax]\+?b?['"]\s*[,)]"""
)
# Inside a string (a shell command): a redirect, `tee`, `cp`, `mv`.
SHELL_WRITE = re.compile(r">|\btee\b|\bcp\b|\bmv\b")
SHELL_WORD = re.compile(r"[^\s'\"<>|;&()]+")


class CellPaths(NamedTuple):
    """The paths one call names and the paths it writes, as typed (resolved by the reader
    of the record against the session's cwd)."""

    named: frozenset[str]
    written: frozenset[str]


def _is_path(word: str) -> bool:
    return (
        0 < len(word) <= MAX_PATH_CHARS
        and not word.startswith(("http:", "https:"))
        and ("/" in word or EXTENSION.search(word) is not None)
    )


def _line_paths(line: str) -> tuple[list[str], bool]:
    """The paths a line's literals (and a `!` line's words) name, and whether a shell command
    among them writes."""
    paths: list[str] = []
    shell_writes = False
    literals = [match.group(2) for match in LITERAL.finditer(line)]
    if line.lstrip().startswith("!"):
        literals.append(line.lstrip()[1:])
    for literal in literals:
        if _is_path(literal) and not any(ch.isspace() for ch in literal):
            paths.append(literal)
            continue
        words = [word for word in SHELL_WORD.findall(literal) if _is_path(word)]
        if words:
            paths.extend(words)
            shell_writes = shell_writes or SHELL_WRITE.search(literal) is not None
    return paths, shell_writes


def cell_paths(code: str, bound: dict[str, frozenset[str]]) -> CellPaths:
    """The paths `code` names and writes; `bound` (variable -> the paths it holds) is the
    session's, updated in place as the code's assignments bind and rebind variables."""
    named: set[str] = set()
    written: set[str] = set()
    for line in code.splitlines():
        if not bound and "'" not in line and '"' not in line and "!" not in line:
            continue  # no literal and no variable that holds a path: most lines of most cells
        paths, shell_writes = _line_paths(line)
        bare = LITERAL.sub("''", line)
        refs = set(paths)
        for name in IDENTIFIER.findall(bare):
            refs |= bound.get(name, frozenset())
        assigned = ASSIGNMENT.match(line)
        if assigned:
            if refs and not READS.search(bare[assigned.end() :]):
                bound[assigned.group(1)] = frozenset(refs)
            else:
                bound.pop(assigned.group(1), None)
        if not refs:
            continue
        named |= refs
        if shell_writes or PYTHON_WRITE.search(bare) or OPEN_MODE.search(line):
            written |= refs
        if len(named) >= MAX_PATHS_PER_CALL:
            break
    return CellPaths(frozenset(named), frozenset(written))
