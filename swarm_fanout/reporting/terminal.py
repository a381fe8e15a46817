"""The lines runner.py says to a person at a terminal, on stderr: a run's verdict in one line,
a run set's, and the commands to run next (a resume, a report, an evidence page). Pure but
for the working dir, which the paths and commands are said relative to."""

from __future__ import annotations

import os
import shlex
from collections import Counter

from swarm_fanout.evidence.fixture import Fixture, undistinctive_answers
from swarm_fanout.rules.exit_codes import (
    EXIT_AGENT,
    EXIT_INVALID,
    EXIT_RESOLVED,
    EXIT_SIGNAL,
    EXIT_UNRESOLVED,
)
from swarm_fanout.scorer import COVERAGE, CRITERION_NAMES

# The project: its pyproject.toml and uv.lock, where the commands said run from.
PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def state(resolved: bool, exit_code: int) -> str:
    """`resolved (exit 0)` or `NOT resolved (exit 1)`."""
    return f"{'resolved' if resolved else 'NOT resolved'} (exit {exit_code})"


def exit_in_words(exit_code: int) -> str:
    """A trial's exit code in words, `agent error (exit 3)`: any code not listed is a signal's."""
    words = {
        EXIT_RESOLVED: "resolved",
        EXIT_UNRESOLVED: "not resolved",
        EXIT_INVALID: "invalid",
        EXIT_AGENT: "agent error",
    }
    return f"{words.get(exit_code, 'interrupted')} (exit {exit_code})"


def agent_error_head(reason: dict) -> str:
    """An agent error said as the agent's own failure, in its own words."""
    return f"agent error (exit {EXIT_AGENT}): {reason['code']}: {reason['message']}"


def reason_counts(codes) -> str:
    """`reasons: timeout, missing_receipt x8` in the order given (root causes first), or ""."""
    counts = Counter(codes)
    if not counts:
        return ""
    return "reasons: " + ", ".join(c if n == 1 else f"{c} x{n}" for c, n in counts.items())


def undistinctive_warning(fixture: Fixture) -> str | None:
    """Which shards' answers are not distinctive, said once before the agent starts: the
    verdict's `answers_not_distinctive` warning says it again for each run."""
    plain = undistinctive_answers(fixture)
    if not plain:
        return None
    named = "; ".join(f"{item.file}: {item.reason}" for item in plain)
    return (
        f"warning: {len(plain)} of {len(fixture.shards)} shards have answers an honest prompt "
        "or cell may hold by chance, so their provenance can only be judged by the flow rules "
        f"(docs/fixtures.md): {named}"
    )


def summary_line(result: dict, result_file: str | None = None) -> str:
    """One line for a person at a terminal: the outcome, what failed, root causes first
    (a timeout before the missing receipts it caused), and where to look."""
    if result.get("status") == "agent_error":
        return _agent_error_line(result, result_file)
    verdict = result["verdict"]
    parts = [*_accounting_head(result), state(result["resolved"], result["exit_code"])]
    if "contract_check" in result:
        parts.append(f"contract check {result['contract_check']}")
    if result.get("baseline"):
        parts.append(f"baseline, judged on {COVERAGE}: {_mark(verdict[COVERAGE])}")
    else:
        parts.append(", ".join(f"{name} {_mark(verdict[name])}" for name in CRITERION_NAMES))
    counted = reason_counts(item["code"] for item in result["reasons"])
    parts += [counted] if counted else []
    efficiency = verdict["efficiency"]
    # Turns are the answered model calls the transcripts hold; the witness's count of HTTP
    # calls also has the retries of a failed turn and a call a teardown cut off.
    turns = efficiency["total_turns"]
    parts.append(f"{turns} turn{'' if turns == 1 else 's'}, {efficiency['total_tokens']:,} tokens")
    cost = efficiency.get("total_cost_usd")
    if cost:  # a zero or missing cost is no cost (simulated, scripted, an unpriced model)
        parts[-1] += f", ${cost:,.2f}" if cost >= 0.01 else f", ${cost:.4f}"
    leaked = result["cleanup"]["leaked_processes"]
    if leaked:
        parts.append(f"{leaked} leaked processes")
    if result_file:
        parts.append(f"result in {near(result_file)}")
    return "; ".join(parts)


def _agent_error_line(result: dict, result_file: str | None) -> str:
    """The agent's own failure, in its own words, said as not the model's."""
    first, *rest = result["reasons"]
    parts = [agent_error_head(first), *(item["code"] for item in rest)]
    parts.append("not scored as the model's failure")
    if result_file:
        parts.append(f"result in {near(result_file)}")
    return "; ".join(parts)


def _accounting_head(result: dict) -> list[str]:
    """The verdict line's first part under --inject-failure: accounted or not, and how."""
    if "failure_accounted" not in result:
        return []
    said = {True: "accounted for", False: "NOT accounted for", None: "not judged"}
    rows = result["injected_failures"]["accounting"]
    how = "; ".join(f"{row['worker']}: {row['how']}" for row in rows)
    return [f"injected failure {said[result['failure_accounted']]} ({how})"]


def _mark(passed: bool) -> str:
    return "ok" if passed else "FAILED"


def set_summary_line(summary: dict, summary_file: str | None) -> str:
    """One line for a person at a terminal: how many trials resolved, and why the others not."""
    scored, resolved = summary["trials_scored"], summary["resolved"]
    head = f"run set: {resolved}/{scored} scored trials resolved"
    if scored:
        low, high = summary["resolve_rate_ci95"]
        head += f" ({resolved / scored:.0%}, 95% CI {low:.0%}-{high:.0%})"
    head += _accounting_rate(summary.get("failure_accounting"))
    errored = summary["trials_errored"]
    head += f", {errored} errored (not counted)" if errored else ""
    parts = [head + f", {summary['trials_planned']} planned; exit {summary['exit_code']}"]
    for key in ("failures", "errors"):
        counts = summary[key]
        if counts:
            counted = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            parts.append(f"{key}: " + ", ".join(f"{code} x{n}" for code, n in counted))
    if summary_file:
        parts.append(f"summary in {near(summary_file)}")
    return "; ".join(parts)


def _accounting_rate(accounting: dict | None) -> str:
    """Beside the resolve rate, when failures were injected: how often the parent accounted."""
    if not accounting:
        return ""
    low, high = accounting["rate_ci95"]
    judged, accounted = accounting["trials"], accounting["accounted"]
    return (
        f"; injected failure accounted for in {accounted}/{judged} "
        f"({accounted / judged:.0%}, 95% CI {low:.0%}-{high:.0%})"
    )


def command(program: str, *words: str) -> str:
    """A command line to copy: the documented way to run the harness's programs, from the
    working dir (outside the project, `uv run` is told where it is)."""
    head = ["uv run --locked"]
    if os.path.realpath(os.getcwd()) != os.path.realpath(PROJECT):
        head.append(f"--project {shlex.quote(near(PROJECT))}")
        program = near(os.path.join(PROJECT, program))
    return " ".join([*head, "python", shlex.quote(program), *(shlex.quote(w) for w in words)])


def evidence_hint(run_dir: str) -> str:
    """What to do after a run that did not resolve: read its evidence page."""
    return f"why, criterion by criterion: {command('report.py', near(run_dir))}"


def set_next_steps(summary: dict, set_dir: str, resume_flags: list[str]) -> list[str]:
    """What to do after a run set: carry on when trials are left to run (interrupted, killed
    or errored: a resume runs them), and read its report."""
    steps = []
    left = sum(1 for trial in summary["trials"] if not trial["scored"])
    if left:
        why = "interrupted; " if summary["exit_code"] in EXIT_SIGNAL.values() else ""
        steps.append(
            f"{why}{left} of {summary['trials_planned']} trials not done, to run them: "
            + command("runner.py", "--resume", near(set_dir), *resume_flags)
        )
    steps.append(f"its report: {command('report.py', near(set_dir))}")
    return steps


def near(path: str) -> str:
    """The path relative to the working dir, unless that climbs out of it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative
