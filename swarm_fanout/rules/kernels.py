"""What each session's kernel did, by its own record (evidence/kernel_records.py), read
against the run's other sessions: what it touched that was not its own to work from, by the
rule of docs/witness.md "What each kernel did". Pure. A file elsewhere that no session wrote
(a library probing its config in HOME) is no evidence: nothing put an answer there.
"""

from __future__ import annotations

import os
import re

from swarm_fanout.evidence.kernel_records import SessionRecord
from swarm_fanout.evidence.transcripts import Transcript

# The product's records, as paths in the run dir (contract §3, §4, §6).
RECORD = re.compile(
    r"^sessions/|^session-artifacts/.*(?:\.jsonl|rlm-subagent\.json)$|^agent-home/rlm-ledger/"
)
# The product's own sockets: the daemon's and its workers' in TMPDIR (contract §2).
PRODUCT_SOCKET = re.compile(r"^tmp/(?:prime-agent-\d+/)?[\w.-]+\.sock$")


def session_of(transcript: Transcript) -> str | None:
    """The record's key for a transcript's session: a child's `sub-<8 hex>` dir (its kernel's
    session dir, contract §11), else the header id."""
    child_dir = os.path.basename(os.path.dirname(transcript.path))
    return child_dir if child_dir.startswith("sub-") else transcript.header_id


class KernelAccess:
    """The run's kernel records (None: the run has none), asked of a session's transcript."""

    def __init__(self, records: dict[str, SessionRecord] | None):
        self.records = records or {}

    def watched(self, transcript: Transcript) -> bool:
        """The session's kernel kept a record."""
        return session_of(transcript) in self.records

    def opened_shard(self, transcript: Transcript, shard: str) -> bool:
        record = self.records[session_of(transcript)]
        touched = record.read | record.named
        return any(path.startswith("repo/") and path.endswith("/" + shard) for path in touched)

    def against(self, transcript: Transcript, held: frozenset[str] = frozenset()) -> str | None:
        """What the session's kernel touched that was not its own, in words; None: nothing."""
        session = session_of(transcript)
        mine = self.records.get(session)
        if mine is None:
            return None  # it kept no record
        others = set().union(
            *(r.written | r.named for key, r in self.records.items() if key != session)
        )
        own = mine.written | mine.named
        for path, how in [(p, "read") for p in sorted(mine.read)] + [
            (p, "ran") for p in sorted(mine.named - mine.written)
        ]:
            why = _foreign(path, mine, own, others, held)
            if why and how == "read":
                return f"in the run its kernel read {path}, {why}"
            if why:
                line = next((line for line in mine.ran if os.path.basename(path) in line), "")
                return f"in the run its kernel ran `{line[:120]}`, naming {path}, {why}"
        outside = [where for where in mine.connected if not PRODUCT_SOCKET.match(where)]
        return f"in the run its kernel connected to {outside[0]}" if outside else None


def _foreign(
    path: str, mine: SessionRecord, own: set[str], others: set[str], held: frozenset[str]
) -> str:
    """Why `path` is not the session's own, or "". Its own: a file its kernel wrote, whoever
    else wrote the same path (two scratch files of one name), and a file a program it started
    named (the copy `cp` made) where no other session wrote or named it (`cat` names what it
    reads). `held`: repo files every replay held that hold no reply's number (a loader the
    parent wrote for every child)."""
    if RECORD.search(path):
        return "a record of the product"
    if path in held or path in mine.written or (path in own and path not in others):
        return ""
    if path in others:
        return "which another session wrote"
    return "from /tmp, not its own scratch" if path.startswith(("/tmp/", "tmp/")) else ""
