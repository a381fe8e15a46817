"""The run dir's layout, named once: every reader and writer of a run dir asks `RunPaths`,
the collector (evidence/artifacts.py) and the shell that makes run dirs (shell/rundir.py)
alike."""

from __future__ import annotations

import os
from typing import NamedTuple

DISPLAY_FILE = "rlm-subagent.json"  # a child's display record, beside its transcript (§6)


class RunPaths(NamedTuple):
    """Every path of one run dir: the layout of a real one-shot run of the product
    (contract §3), so the same reader takes the runner's runs and the captured ones,
    and the harness's own files beside it.

        <root>/                       runs/<fixture>-<UTC time>-<hex>/, or a run set's trial-<n>/
          repo/                       the fixture's files in a fresh git repo; the agent's --cwd
            <artifact>                the combined answer the fixture names: artifact(name)
          sessions/                   --session-dir and PRIME_AGENT_SESSION_DIR
            <file uuid>.jsonl         the root transcript (in one-shot runs its stem is not
                                      its header id, §3)
          session-artifacts/          the product's, beside sessions/ (§3)
            <root header id>/         children_root(header id)
              sub-<8 hex>/            one child: the dir's name is its childId
                <session id>.jsonl    its transcript
                rlm-subagent.json     its display record: display_file(child dir), §6
          agent-home/                 PRIME_AGENT_CODING_AGENT_DIR: auth.json, models.json,
                                      rlm-ledger/<key>.jsonl (ledger.ledger_path, §4)
          home/                       HOME
            .kernel-record/           what each kernel did, by itself: <session>-<pid>.jsonl
                                      (shell/kernel_record.py)
          tmp/                        TMPDIR, unless too long for the product's sockets
          daemon.sock                 the daemon socket, likewise (rundir.RunDir.fit_sockets)
          stdout.jsonl                the root's --mode json stream (§7); resident: its events
          stderr.txt                  the agent's stderr
          daemon-wire.jsonl           resident only: every message the daemon sent
          daemon-stdout.txt           resident only: the daemon's stdout
          acp-stream.jsonl            acp only: every message the agent wrote on its stdout
          model-log.jsonl             scripted model only: every request its endpoint served
          run-meta.json               what was launched, written before the agent starts
          result.json                 the runner's result, with witness.jsonl's sha256
          witness.jsonl               what the runner itself saw (shell/observer.py): every call
                                      its proxy relayed, when each record first appeared, the
                                      digests of the streams it received; written, like
                                      the streams above, once the agent is gone
          replay.jsonl                each replying child's cells run again, faithful and on
                                      its shard's twin (shell/replay.py), once the agent is gone
    """

    root: str
    repo: str
    sessions: str
    session_artifacts: str
    agent_home: str
    home: str
    tmp: str
    socket: str
    stdout: str
    stderr: str
    wire: str
    daemon_stdout: str
    acp_stream: str
    model_log: str
    run_meta: str
    result: str
    witness: str
    replay: str
    kernel_record: str

    @classmethod
    def of(cls, root: str) -> RunPaths:
        # Each field's file or dir, in the fields' order (the tree above).
        names = (
            "repo sessions session-artifacts agent-home home tmp daemon.sock stdout.jsonl "
            "stderr.txt daemon-wire.jsonl daemon-stdout.txt acp-stream.jsonl model-log.jsonl "
            "run-meta.json result.json witness.jsonl replay.jsonl home/.kernel-record"
        )
        return cls(root, *(os.path.join(root, name) for name in names.split()))

    def artifact(self, name: str) -> str:
        """The combined answer, written by the agent at the repo's root."""
        return os.path.join(self.repo, name)

    def children_root(self, header_id: str) -> str:
        """The dir of a session's children: named by its header id, never its file
        name (§1 facts 2, 3)."""
        return os.path.join(self.session_artifacts, header_id)


def display_file(child_dir: str) -> str:
    """A child's display record in its `sub-<8 hex>/` dir (§6)."""
    return os.path.join(child_dir, DISPLAY_FILE)
