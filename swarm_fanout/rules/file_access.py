"""Whose process opened which file: the file-access witness (shell/file_access.py) read
against the run's sessions (docs/witness.md "File access"). Pure.

A session's kernel is the process that writes the session's kernel snapshot: the product
keeps one per persistent session, `kernel-state.*` in that session's artifact dir, named by
its header id (`session-artifacts/<root id>/` for the root,
`session-artifacts/<root id>/session-artifacts/<session id>/` for a child), and writes it
after the session's cells run. Any other process of the run is the session's whose kernel is
its nearest recorded ancestor (a shell a cell started, what that shell ran). A process that
ended before the runner read its first event has no ancestors on record: what it opened is
*unplaced*, anyone's (a `wc` a cell ran on its shard may be gone that soon).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from swarm_fanout.evidence.witness import Witness

KERNEL_STATE = re.compile(
    r"^session-artifacts/(?P<root>[^/]+)/(?:session-artifacts/(?P<child>[^/]+)/)?kernel-state\."
)
# The product's records, as paths in the run dir: another session's transcript, the
# ledger, a display record (docs/product-contract.md §3, §4, §6).
RECORD = re.compile(
    r"^sessions/|^session-artifacts/.*(?:\.jsonl|rlm-subagent\.json)$|^agent-home/rlm-ledger/"
)


class FileAccess(NamedTuple):
    """What the witness says of file access: `witnessed` false with `why` when the runner
    could not watch; else per session (header id) the files its processes opened and wrote,
    as paths in the run dir."""

    witnessed: bool
    why: str | None = None
    opened: dict[str, frozenset[str]] | None = None
    written: dict[str, frozenset[str]] | None = None
    unplaced: frozenset[str] = frozenset()  # opened by processes whose ancestors are unknown

    def to_json(self) -> dict:
        if not self.witnessed:
            return {"witnessed": False, "why": self.why}
        return {"witnessed": True, "sessions": len(self.opened or {})}

    def watched(self, session_id: str | None) -> bool:
        """The witness knows the session's kernel, so what it opened is on record."""
        return self.witnessed and session_id in (self.opened or {})

    def foreign_opened(self, session_id: str, held: frozenset[str] = frozenset()) -> str | None:
        """A file the session's processes opened that is a record of the product or that
        another session's processes wrote, or None; a file of `held` (the repo files a
        replay of the session held) is the replay's to judge, not this."""
        others = set()
        for other, paths in (self.written or {}).items():
            if other != session_id:
                others |= paths
        for path in sorted((self.opened or {}).get(session_id, ())):
            if path in held:
                continue
            if RECORD.search(path) or (path in others and path.startswith(("repo/", "tmp/"))):
                return path
        return None


def file_access(witness: Witness | None) -> FileAccess | None:
    """The file-access witness of a run, or None when its witness records none (a run from
    before there was one, or no witness at all)."""
    if witness is None or not isinstance(witness.header.get("file_access"), dict):
        return None
    status = witness.header["file_access"]
    if status.get("witnessed") is not True:
        return FileAccess(False, str(status.get("why") or "not witnessed"))
    kernels: dict[int, str] = {}
    ancestors: dict[int, list[int]] = {}
    for record in witness.file_opens:
        match = KERNEL_STATE.match(record["path"])
        if match:
            kernels[record["pid"]] = match["child"] or match["root"]
        if "ancestors" in record:
            ancestors[record["pid"]] = record["ancestors"]
    opened: dict[str, set[str]] = {session: set() for session in kernels.values()}
    written: dict[str, set[str]] = {session: set() for session in kernels.values()}
    unplaced: set[str] = set()
    for record in witness.file_opens:
        pid = record["pid"]
        chain = [pid, *ancestors.get(pid, [])]
        session = next((kernels[p] for p in chain if p in kernels), None)
        if session is not None:
            (opened if record["what"] == "open" else written)[session].add(record["path"])
        elif not ancestors.get(pid) and record["what"] == "open":
            unplaced.add(record["path"])
    return FileAccess(
        True,
        opened={session: frozenset(paths) for session, paths in opened.items()},
        written={session: frozenset(paths) for session, paths in written.items()},
        unplaced=frozenset(unplaced),
    )
