"""What a tool call's result may have been worked out from, read from the text of its
arguments: the *sources* of the call (docs/rubric.md "Provenance"), the positive evidence
that a child computed its answer from its own shard.

A call draws on the paths its code names (evidence/cell_paths.py), on what every variable
it uses drew on when an earlier call of the session bound it, on what an earlier call drew on
when it wrote a file this call names, on the channels its code opens that are no file
(`<channel>`, CHANNELS), and on `<shards_dir>` when it names the shards' dir.

The granularity is the call: every variable a call binds draws on everything that call drew
on. So `rows = load('shards/a.jsonl')` in one cell and `print(len(rows))` in the next make
the second draw on `shards/a.jsonl`, while a cell that names no file and uses no variable
bound from one draws on nothing.
"""

from __future__ import annotations

import os
import re

from evidence.cell_paths import IDENTIFIER, LITERAL
from evidence.fixture import SHARDS_DIR

# Channels a cell can learn a number through without naming a file, by the marks of their use.
CHANNELS = (
    (
        "network",
        re.compile(
            r"\bsocket\b|urllib|urlopen|http\.client|\brequests\.(?:get|post|Session)\b"
            r"|/dev/tcp/|\bcurl\b|\bwget\b"
        ),
    ),
    ("listing", re.compile(r"\bglob\b|os\.walk|listdir|scandir|iterdir|\bfind\s+\S*/|!\s*ls\b")),
    ("environment", re.compile(r"\benviron\b|getenv|\$\{?[A-Z_]{2,}")),
    ("joined_path", re.compile(r"path\.join|joinpath|\bchr\(|fromhex|b64decode")),
    ("code_from_text", re.compile(r"\beval\(|\bexec\(|\bcompile\(")),
)
# The shards' dir named (`Path('shards') / name`, `f'shards/{name}'`, `cd shards`): a bare
# shard name beside it is a path to the shard, where alone it may be a key searched for in a
# text.
SHARDS_DIR_NAMED = re.compile(
    rf"""['"](?:\./)?{SHARDS_DIR}(?:['"]|/)|\bcd\s+(?:\./)?{SHARDS_DIR}\b"""
)
# What a statement binds, over a whole cell: an assignment's targets (`a, b = …`,
# `d[k] += …`), a `for` target, a `with … as` (not an import's alias: a module holds no data
# the session read), a `def`, a walrus; and a value changed in place (`rows.append(…)`).
TARGETS = re.compile(
    r"^[ \t]*([A-Za-z_][\w.\[\]']*(?:[ \t]*,[ \t]*[A-Za-z_][\w.\[\]']*)*)[ \t]*"
    r"(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=(?!=)",
    re.MULTILINE,
)
FOR_TARGET = re.compile(r"\bfor[ \t]+([\w \t,()]{1,80}?)[ \t]+in\b")
AS_TARGET = re.compile(r"^(?![ \t]*(?:import|from)\s)[^\n]*?\bas[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
DEF_NAME = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
WALRUS = re.compile(r"(?<!\w)([A-Za-z_]\w*)[ \t]*:=")
MUTATED = re.compile(r"^[ \t]*([A-Za-z_]\w*)[ \t]*(?:\.\w+\(|\[)", re.MULTILINE)


def channel(source: str) -> str | None:
    """The channel a source names (`<network>` -> network), None for a path."""
    return source[1:-1] if source.startswith("<") and source.endswith(">") else None


def _bound_names(code: str, flows: dict[str, frozenset[str]]) -> set[str]:
    names: set[str] = set()
    for targets in TARGETS.finditer(code):
        names |= {IDENTIFIER.match(part.strip()).group() for part in targets.group(1).split(",")}
    for pattern in (FOR_TARGET, AS_TARGET, DEF_NAME, WALRUS):
        for match in pattern.finditer(code):
            names |= set(IDENTIFIER.findall(match.group(1)))
    # A variable changed in place, not a module: `json.dump(…)` binds nothing.
    names |= {match.group(1) for match in MUTATED.finditer(code) if match.group(1) in flows}
    return names


def cell_sources(
    code: str, named: frozenset[str], written: frozenset[str], flows: dict[str, frozenset[str]]
) -> frozenset[str]:
    """The sources of the call whose code is `code` and which names and writes the paths
    `named` and `written` (evidence/cell_paths.py). `flows` is the session's: what each
    variable (by name) and each file it wrote (`/` + its typed path, normalised) drew on,
    updated in place with what this call binds and writes."""
    sources = set(named)
    for path in named:
        sources |= flows.get("/" + os.path.normpath(path), frozenset())
    sources |= {f"<{name}>" for name, pattern in CHANNELS if pattern.search(code)}
    if SHARDS_DIR_NAMED.search(code):
        sources.add(f"<{SHARDS_DIR}_dir>")
    bare = LITERAL.sub("''", code)
    for name in set(IDENTIFIER.findall(bare)):
        sources |= flows.get(name, frozenset())
    drawn = frozenset(sources)
    for name in _bound_names(bare, flows):
        flows[name] = drawn
    for path in written:
        flows["/" + os.path.normpath(path)] = drawn
    return drawn
