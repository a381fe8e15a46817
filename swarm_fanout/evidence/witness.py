"""The witness file, read back: what the runner itself saw of a run (docs/witness.md).

shell/observer.py records it while the agent runs and writes `witness.jsonl` once the
agent's tree is gone; this is the scorer's side, which never raises. `file_digest` and
`line_digests` hash files exactly as the observer does, so the checks can compare.
"""

from __future__ import annotations

import hashlib
import os
from typing import NamedTuple

from swarm_fanout.evidence.jsonl import Finding, iter_objects, text_field

WITNESS_VERSION = 1


def file_digest(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def line_digests(path: str) -> tuple[str, ...]:
    """The sha256 of each complete line of a file, as the observer hashes them."""
    digests = []
    try:
        with open(path, "rb") as handle:
            for raw in handle:
                if raw.endswith(b"\n"):
                    digests.append(hashlib.sha256(raw[:-1]).hexdigest())
    except OSError:
        return ()
    return tuple(digests)


# The fields a sighting may carry, and their JSON types (a bool is no number).
SIGHTING_FIELDS = {
    "kind": str,
    "what": str,
    "before": (int, float),
    "seen": (int, float),
    "line": int,
    "file": str,
    "sha256": str,
    "child_id": str,
    "parent": str,
    "id": (str, type(None)),
}


def _well_formed(sighting: dict) -> bool:
    for key, value in sighting.items():
        kinds = SIGHTING_FIELDS.get(key)
        if kinds is None or isinstance(value, bool) or not isinstance(value, kinds):
            return False
    return all(key in sighting for key in ("what", "before", "seen"))


class Witness(NamedTuple):
    """What the runner saw of a run, as read back from witness.jsonl."""

    sha256: str | None  # of the file as it is now
    header: dict
    model_calls: tuple[dict, ...] = ()
    sightings: tuple[dict, ...] = ()
    channels: tuple[dict, ...] = ()
    findings: tuple[Finding, ...] = ()


def read_witness(path: str) -> Witness | None:
    """The witness of a run dir, or None where there is none. Never raises."""
    if not os.path.lexists(path):
        return None
    findings: list[Finding] = []
    header: dict = {}
    kept: dict = {kind: [] for kind in ("model_call", "sighting", "channel")}
    for line in iter_objects(path, findings):
        kind = text_field(line.record, "kind")
        if kind == "witness" and line.number == 1:
            header = line.record
        elif kind == "sighting" and not _well_formed(line.record):
            findings.append(Finding(path, line.number, "wrong_type", f"a malformed {kind}"))
        elif kind in kept:
            kept[kind].append(line.record)
    return Witness(
        sha256=file_digest(path),
        header=header,
        model_calls=tuple(kept["model_call"]),
        sightings=tuple(kept["sighting"]),
        channels=tuple(kept["channel"]),
        findings=tuple(findings),
    )
