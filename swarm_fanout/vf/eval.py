"""`python -m swarm_fanout.vf.eval [vf-eval options] [--json]`: vf-eval over this taskset, one
line per rollout.

vf-eval without its live dashboard prints every trace as indented JSON on stdout (thousands
of lines per rollout) and its log on stderr. This runs `vf-eval swarm-fanout --no-rich` with
the options given, keeps its log in the run's own log file (vf-eval writes it under `-o`),
and prints one line per rollout: the task, the reward, and the verdict's line (resolved or
not, and its reasons), or `ERRORED` with the error verifiers recorded. `--json` prints the
traces' JSON instead, as vf-eval does. Exit code: vf-eval's; when it fails, the last of its
log is printed on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from swarm_fanout.vf.taskset import VERDICT_KEY

LOG_TAIL_LINES = 40


def vf_eval() -> str:
    """The vf-eval beside this interpreter (the environment the package runs in)."""
    beside = os.path.join(os.path.dirname(sys.executable), "vf-eval")
    return beside if os.path.exists(beside) else "vf-eval"


def traces_of(stdout: str) -> list[dict]:
    """The traces vf-eval printed, one JSON object after another."""
    decoder, traces, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(stdout) and stdout[at].isspace():
            at += 1
        if at >= len(stdout):
            return traces
        trace, at = decoder.raw_decode(stdout, at)
        traces.append(trace)


def rollout_line(trace: dict) -> str:
    """`<task>  reward=<r>  <verdict line>` for one trace."""
    task = trace.get("task", {}).get("data", {})
    name = task.get("name") or task.get("id") or "?"
    errors = trace.get("errors") or []
    if errors:
        last = errors[-1]
        return f"{name}  ERRORED  {last.get('type')}: {last.get('message')}"
    reward = sum(
        item["score"] for item in (trace.get("rewards") or {}).values() if item is not None
    )
    verdict = trace.get("info", {}).get(VERDICT_KEY, {}).get("verdict") or {}
    said = "resolved" if verdict.get("resolved") else "NOT resolved"
    counts = Counter(item["code"] for item in verdict.get("reasons", []))
    reasons = ", ".join(code if n == 1 else f"{code} x{n}" for code, n in counts.items())
    return f"{name}  reward={reward:g}  {said}" + (f"  reasons: {reasons}" if reasons else "")


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    options = [arg for arg in argv if arg != "--json"]
    command = [vf_eval(), "swarm-fanout", *options, "--no-rich"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write("\n".join(done.stderr.splitlines()[-LOG_TAIL_LINES:]) + "\n")
        return done.returncode
    if as_json:
        sys.stdout.write(done.stdout)
        return 0
    for trace in traces_of(done.stdout):
        print(rollout_line(trace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
