"""The product's RLM spawn ledger: where it lives, how a line parses, how edges replay.

This module is the only place in the harness that knows these rules
(docs/product-contract.md §4). The ledger is the product's own record of every child
it admitted; it is the backbone of delegation evidence.

    python ledger.py LEDGER [LEDGER ...]

prints, as JSON, the edges the product would replay from those ledger files (deleted ones
kept as tombstones) and every finding of the parse: what a run's ledger says, on its own.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
from typing import NamedTuple

from swarm_fanout.evidence.jsonl import Finding, iso_to_ms, iter_objects, text_field

# The product rejects a ledger over these limits (§4 "Strictness"); the harness
# keeps reading up to twice the size so it can still report what is there.
PRODUCT_MAX_BYTES = 32 * 1024 * 1024
PRODUCT_MAX_RECORDS = 100_000
READ_CAP_BYTES = 2 * PRODUCT_MAX_BYTES

LEDGER_DIR = "rlm-ledger"  # under the agent dir (§4 "Path")
CHILD_ID = re.compile(r"^sub-[0-9a-f]{8}\Z")  # \Z: `$` would admit a final newline
DELETE_REASONS = ("user", "parent-teardown", "revoked", "gc")

# Findings that make the product reject the whole file (§4 "Strictness"). A torn final line
# is tolerated by the product, and so are unknown ops.
FATAL_CODES = frozenset(
    {"malformed_json", "not_an_object", "invalid_utf8", "line_too_long"}  # a line it cannot read
    | {"bad_version", "missing_at", "malformed_record"}  # a record it refuses
    | {"over_size_limit", "over_record_limit"}  # a file too large
)


def canonical_dir(path: str) -> str:
    """`path.resolve` then realpath when the dir exists (§4 "Path")."""
    absolute = os.path.abspath(path)
    return os.path.realpath(absolute) if os.path.exists(absolute) else absolute


def canonical_file(path: str) -> str:
    """realpath(file), falling back to realpath(dirname)/basename (§4 "Path")."""
    try:
        if os.path.exists(path):
            return os.path.realpath(path)
        return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    except ValueError:  # a NUL byte, written by hand: it names no file
        return path


class Canon:
    """`canonical_file` (`file`) and `os.path.realpath` of a dir (`dir`), each path resolved
    once: a ledger names the same few paths in up to 100 000 records. One instance serves one
    reading of a run: it trusts that nothing on disk changes meanwhile."""

    def __init__(self) -> None:
        self.file = functools.lru_cache(maxsize=None)(canonical_file)
        self.dir = functools.lru_cache(maxsize=None)(os.path.realpath)


def ledger_key(sessions_dir: str) -> str:
    """First 16 hex of sha256 over the canonical sessions dir (§4 "Path")."""
    return _key_of(canonical_dir(sessions_dir))


def _key_of(canonical_sessions_dir: str) -> str:
    return hashlib.sha256(canonical_sessions_dir.encode("utf-8")).hexdigest()[:16]


def ledger_path(agent_home: str, sessions_dir: str) -> str:
    """`<agent home>/rlm-ledger/<key>.jsonl`, keyed on the daemon's sessions dir (env >
    settings > `<agent home>/sessions`), not the CLI's `--session-dir` (§1 fact 1)."""
    return os.path.join(agent_home, LEDGER_DIR, ledger_key(sessions_dir) + ".jsonl")


def ledger_candidates(
    agent_home: str, env_sessions_dir: str | None, run_dir: str, canon: Canon | None = None
) -> list[str]:
    """Existing ledger files a run may have written, most specific first.

    1. the ledger of the env-set sessions dir (`PRIME_AGENT_SESSION_DIR`);
    2. the ledger of the default `<agent home>/sessions`;
    3. any other `rlm-ledger/*.jsonl` whose meta names a dir inside the run
       (a resident daemon started with another env, say).
    """
    canon = canon or Canon()
    paths = [ledger_path(agent_home, os.path.join(agent_home, "sessions"))]
    if env_sessions_dir:
        paths.insert(0, ledger_path(agent_home, env_sessions_dir))
    named = len(paths)
    paths += sorted(glob.glob(os.path.join(glob.escape(agent_home), LEDGER_DIR, "*.jsonl")))
    run_root = canonical_dir(run_dir)
    found: dict[str, str] = {}  # canonical path -> the path as named or listed
    for index, path in enumerate(paths):
        key = canon.file(os.path.abspath(path))
        if key in found or not os.path.isfile(path):
            continue
        if index >= named:
            sessions_dir = _meta_sessions_dir(path)
            if not sessions_dir or not _is_inside(canonical_dir(sessions_dir), run_root):
                continue
        found[key] = path
    return list(found.values())


def _is_inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _meta_sessions_dir(path: str) -> str | None:
    for line in iter_objects(path, [], max_bytes=64 * 1024):
        if line.record.get("op") == "meta":
            return text_field(line.record, "sessionsDir")
        return None
    return None


class LedgerRecord(NamedTuple):
    """One well-formed ledger line (§4 "Records"); a named tuple, as a ledger holds 100 000."""

    ledger: str
    line: int
    op: str
    at: str
    at_ms: int | None
    child_id: str | None = None
    parent: str | None = None
    child: str | None = None
    depth: int | None = None
    name: str | None = None
    reason: str | None = None
    sessions_dir: str | None = None
    # Written after a line that makes the product reject the file: the product
    # could not have read past it, so such records are suspicious.
    after_fatal: bool = False


class LedgerFile(NamedTuple):
    path: str
    records: tuple[LedgerRecord, ...]
    findings: tuple[Finding, ...]
    fatal: bool
    lines: int


def read_ledger(path: str) -> LedgerFile:
    """Parse a ledger tolerantly: every bad line is a finding, nothing raises."""
    findings: list[Finding] = []
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    if size > PRODUCT_MAX_BYTES:
        findings.append(Finding(path, 0, "over_size_limit", f"{size} bytes > {PRODUCT_MAX_BYTES}"))
    records: list[LedgerRecord] = []
    lines = 0
    fatal = False
    checked = 0  # how many findings were looked at for a fatal one
    strings: dict[str, str] = {}
    for number, raw in iter_objects(path, findings, max_bytes=READ_CAP_BYTES):
        lines = number
        if not fatal and len(findings) > checked:
            fatal = any(finding.code in FATAL_CODES for finding in findings[checked:])
            checked = len(findings)
        parsed = _parse_record(path, number, raw, fatal, strings)
        if parsed.__class__ is LedgerRecord:
            records.append(parsed)
        else:
            findings.append(Finding(path, number, *parsed))
    lines = max([lines] + [f.line for f in findings])
    if lines > PRODUCT_MAX_RECORDS:
        findings.append(
            Finding(path, lines, "over_record_limit", f"{lines} lines > {PRODUCT_MAX_RECORDS}")
        )
    _check_meta(path, records, findings)
    return LedgerFile(
        path=path,
        records=tuple(records),
        findings=tuple(findings),
        fatal=any(f.code in FATAL_CODES for f in findings),
        lines=lines,
    )


# The JSON keys of the fields a record may carry, in LedgerRecord's order; per known op, the
# indexes of those it must carry (§4).
FIELD_KEYS = ("childId", "parent", "child", "depth", "name", "reason", "sessionsDir")
REQUIRED = {"meta": (6,), "spawn": (0, 1, 2, 3, 4), "rename": (0, 2, 4), "delete": (0, 2, 5)}


def _parse_record(
    path: str, number: int, raw: dict, after_fatal: bool, strings: dict[str, str]
) -> LedgerRecord | tuple[str, str]:
    """The record of one line's object, or the code and detail of what is wrong with it.
    `strings` keeps one copy of each string: 100 000 records name the same few paths and
    names again and again."""
    get = raw.get
    version, at, op = get("v"), get("at"), get("op")
    if version.__class__ is not int or version != 1:
        return "bad_version", f"v is {version!r}, not 1"
    if at.__class__ is not str:
        return "missing_at", "no string `at`"
    if op.__class__ is not str:
        return "malformed_record", f"op is {type(op).__name__}, not a string"
    if op not in REQUIRED:
        return "unknown_op", f"op {op!r} skipped"
    # A field is kept only when it has the JSON type it needs (a bool is no int).
    intern = strings.setdefault
    child_id, parent, child = get("childId"), get("parent"), get("child")
    depth, name, reason, sessions_dir = get("depth"), get("name"), get("reason"), get("sessionsDir")
    fields = (
        intern(child_id, child_id) if child_id.__class__ is str else None,
        intern(parent, parent) if parent.__class__ is str else None,
        intern(child, child) if child.__class__ is str else None,
        depth if depth.__class__ is int else None,
        intern(name, name) if name.__class__ is str else None,
        intern(reason, reason) if reason.__class__ is str else None,
        sessions_dir if sessions_dir.__class__ is str else None,
    )
    problem = _malformed(op, fields)
    if problem is None:
        return LedgerRecord(path, number, intern(op, op), at, iso_to_ms(at), *fields, after_fatal)
    return "malformed_record", f"{op}: {problem}"


def _malformed(op: str, fields: tuple) -> str | None:
    """What breaks the product's rules for the fields of a record of `op` (§4), or None."""
    for index in REQUIRED[op]:
        if fields[index] is None:
            missing = [FIELD_KEYS[i] for i in REQUIRED[op] if fields[i] is None]
            return "missing or mistyped " + ", ".join(missing)
    child_id, _, _, depth, name, reason, _ = fields
    if op != "meta" and not CHILD_ID.match(child_id):
        return f"childId {child_id!r} is not sub-<8 hex>"
    if op == "spawn" and depth < 1:
        return f"depth {depth} < 1"
    if name is not None and not 1 <= len(name) <= 64:
        return "name is not 1-64 chars"
    if op == "delete" and reason not in DELETE_REASONS:
        return f"reason {reason!r} unknown"
    return None


def _check_meta(path: str, records: list[LedgerRecord], findings: list[Finding]) -> None:
    if not records:
        return
    first = records[0]
    if first.op != "meta" or first.line != 1:
        findings.append(Finding(path, first.line, "meta_not_first", "line 1 is not a meta record"))
        return
    stem = os.path.splitext(os.path.basename(path))[0]
    # The meta names the dir the key was computed from, already canonical (§4).
    digest = _key_of(first.sessions_dir)
    if digest != stem:
        findings.append(
            Finding(path, 1, "meta_hash_mismatch", f"sha256(sessionsDir)[:16] is {digest}")
        )


class Edge(NamedTuple):
    """A parent→child edge after replay; deleted edges are kept as tombstones."""

    child_id: str
    child: str
    parent: str
    depth: int
    name: str
    spawned_at_ms: int | None
    ledger: str
    spawn_line: int
    deleted: bool = False
    delete_reason: str | None = None
    deleted_at_ms: int | None = None
    suspicious: bool = False


class Spawn(NamedTuple):
    """One admitted spawn, with the live same-name siblings it found (for dedup)."""

    child_id: str
    name: str
    parent: str
    depth: int
    at_ms: int | None
    ledger: str
    line: int
    name_held_by: tuple[str, ...]


class Replay(NamedTuple):
    edges: tuple[Edge, ...]
    spawns: tuple[Spawn, ...]
    # childId -> every name a spawn or rename record gave it, edge or not.
    names: dict[str, frozenset[str]]


def replay(ledgers: list[LedgerFile], canon: Canon | None = None) -> Replay:
    """Apply records in order, as every product reader does (§4 "Replay").

    Key = (childId, canonical child path). A spawn replaces the edge and clears
    any deletion; rename and delete touch only an edge already spawned.
    """
    resolve = (canon or Canon()).file
    edges: dict[tuple[str, str], Edge] = {}
    # (parent, name) -> every edge the parent gave that name: where a spawn looks for the
    # live sibling that holds its name.
    named: dict[tuple[str, str], set[tuple[str, str]]] = {}
    spawns: list[Spawn] = []
    names: dict[str, set[str]] = {}
    for ledger in ledgers:
        path = ledger.path  # the path every record of it names
        for record in ledger.records:
            _, line, op, _, at_ms, child_id, parent, child, depth, name, reason, _, suspect = record
            if op == "meta":
                continue
            if op != "delete":
                names.setdefault(child_id, set()).add(name)
            key = (child_id, resolve(child))
            edge = edges.get(key)
            if op == "spawn":
                parent = resolve(parent)
                siblings = named.setdefault((parent, name), set())
                live = [edges[other] for other in siblings - {key} if not edges[other].deleted]
                held_by = tuple(sorted(e.child_id for e in live if e.name == name))
                siblings.add(key)
                edges[key] = Edge(
                    child_id, key[1], parent, depth, name, at_ms, path, line, suspicious=suspect
                )
                spawns.append(Spawn(child_id, name, parent, depth, at_ms, path, line, held_by))
            elif edge is None:
                continue  # rename or delete before its spawn: ignored (§4 "Replay")
            elif op == "rename":
                if edge.name != name:
                    edges[key] = edge._replace(name=name)
                    named.setdefault((edge.parent, name), set()).add(key)
            else:
                edges[key] = edge._replace(deleted=True, delete_reason=reason, deleted_at_ms=at_ms)
    rank = {ledger.path: index for index, ledger in enumerate(ledgers)}
    return Replay(
        edges=tuple(sorted(edges.values(), key=lambda e: (rank[e.ledger], e.spawn_line))),
        spawns=tuple(spawns),
        names={child_id: frozenset(given) for child_id, given in names.items()},
    )


if __name__ == "__main__":
    import json
    import sys

    if not sys.argv[1:] or sys.argv[1] in ("-h", "--help"):
        print(__doc__.split("\n\n")[2].strip(), file=sys.stderr)
        sys.exit(2)
    files = [read_ledger(path) for path in sys.argv[1:]]
    shown = {
        "ledgers": [
            {"path": f.path, "records": len(f.records), "lines": f.lines, "fatal": f.fatal}
            for f in files
        ],
        "edges": [edge._asdict() for edge in replay(files).edges],
        "findings": [item._asdict() for f in files for item in f.findings],
    }
    print(json.dumps(shown, indent=2))
