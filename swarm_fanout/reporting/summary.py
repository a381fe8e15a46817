"""The summary of a run set: a pure function of its config and its trials' results
(`summarize`), and the same read from a run set on disk with the overhead over a baseline
beside it (`summarize_run_set`).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from swarm_fanout.evidence.runsets import (
    RunSetError,
    attempts,
    errored,
    latest_by_trial,
    load_config,
    read_summary,
)
from swarm_fanout.reporting import stats, timeline
from swarm_fanout.rules.exit_codes import EXIT_AGENT, EXIT_RESOLVED, EXIT_UNRESOLVED


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the summary sees it: its chosen attempt's result and its timeline."""

    index: int
    dir: str | None
    attempts: int
    result: dict | None
    max_concurrent: int | None = None
    parallelism: float | None = None


def _scored(record: TrialRecord) -> bool:
    result = record.result
    return bool(result) and result.get("status") == "scored" and not result.get("interrupted")


def _efficiency(result: dict | None, key: str):
    verdict = (result or {}).get("verdict") or {}
    return (verdict.get("efficiency") or {}).get(key)


def _wall(result: dict | None):
    return ((result or {}).get("agent") or {}).get("wall_time_s")


def would_lose_children(records: list[TrialRecord]) -> int | None:
    """The scored trials whose children were still queued or running when the prompt's
    response came (ACP's `outstanding_at_response`, contract §13): those a client that stops
    at the response would have lost. None when no trial's drive reported it."""
    counts = [
        record.result.get("outstanding_at_response")
        for record in records
        if _scored(record) and isinstance(record.result.get("outstanding_at_response"), int)
    ]
    return sum(1 for count in counts if count > 0) if counts else None


def cost_per_resolved(records: list[TrialRecord]) -> float | None:
    """What the scored trials cost in all, per resolved trial: None when a scored trial said
    no cost (a partial sum would flatter the model) or none resolved."""
    scored = [record for record in records if _scored(record)]
    costs = [_efficiency(record.result, "total_cost_usd") for record in scored]
    resolved = sum(1 for record in scored if record.result.get("resolved"))
    if not costs or None in costs or not resolved:
        return None
    return round(sum(costs) / resolved, 6)


def summarize(config: dict, records: list[TrialRecord], interrupted: int = 0) -> dict:
    """The run set's evidence: resolve rate and its interval, pass@k and pass^k for every
    k up to the n scored trials, failures by reason code, distributions, and the exit code.
    Errored trials (the agent failed on its own) are counted apart, in none of the
    estimates: an environment failure says nothing about the model."""
    scored = [record for record in records if _scored(record)]
    n = len(scored)
    c = sum(1 for record in scored if record.result.get("resolved"))
    low, high = stats.wilson_interval(c, n)
    failures: Counter = Counter()
    errors: Counter = Counter()
    for record in records:
        codes = {item.get("code") for item in (record.result or {}).get("reasons") or []}
        if record.result is None:
            failures["not_run"] += 1
        elif errored(record.result):
            errors.update(codes)
        elif not record.result.get("resolved"):
            failures.update(codes)
    summary = {
        "run_set": config,
        "trials_planned": config["trials"],
        "trials_scored": n,
        "trials_errored": sum(1 for record in records if errored(record.result)),
        "resolved": c,
        "resolve_rate": c / n if n else None,
        "resolve_rate_ci95": [low, high],
        "failure_accounting": accounting_summary(scored),
        "pass_at_k": {str(k): stats.pass_at_k(n, c, k) for k in range(1, n + 1)},
        "pass_hat_k": {str(k): stats.pass_hat_k(n, c, k) for k in range(1, n + 1)},
        "failures": dict(sorted(failures.items())),
        "errors": dict(sorted(errors.items())),
        "tokens": stats.distribution(
            _efficiency(r.result, "total_tokens") for r in scored
        ).to_json(),
        "turns": stats.distribution(_efficiency(r.result, "total_turns") for r in scored).to_json(),
        "wall_time_s": stats.distribution(_wall(r.result) for r in scored).to_json(),
        "cost_usd": stats.distribution(
            _efficiency(r.result, "total_cost_usd") for r in scored
        ).to_json(),
        "cost_per_resolved_usd": cost_per_resolved(records),
        "would_lose_children": would_lose_children(records),
        "max_concurrent_children": stats.distribution(r.max_concurrent for r in scored).to_json(),
        "parallelism": stats.distribution(r.parallelism for r in scored).to_json(),
        "agent_versions": sorted(
            {str(((r.result or {}).get("agent") or {}).get("version")) for r in records if r.result}
        ),
        "trials": [
            {
                "index": record.index,
                "dir": record.dir,
                "attempts": record.attempts,
                "status": (record.result or {}).get("status", "not_run"),
                # Counted in trials_scored: scored, and not interrupted.
                "scored": _scored(record),
                "resolved": bool((record.result or {}).get("resolved")),
                "failure_accounted": (record.result or {}).get("failure_accounted"),
                "exit_code": (record.result or {}).get("exit_code"),
                "reasons": sorted(
                    {item.get("code") for item in (record.result or {}).get("reasons") or []}
                ),
                "tokens": _efficiency(record.result, "total_tokens"),
                "turns": _efficiency(record.result, "total_turns"),
                "wall_time_s": _wall(record.result),
                "cost_usd": _efficiency(record.result, "total_cost_usd"),
                "outstanding_at_response": (record.result or {}).get("outstanding_at_response"),
                "max_concurrent_children": record.max_concurrent,
                "parallelism": record.parallelism,
            }
            for record in records
        ],
        "overhead": None,
    }
    summary["exit_code"] = set_exit_code(records, interrupted)
    return summary


def accounting_summary(scored: list[TrialRecord]) -> dict | None:
    """Under --inject-failure, how often the parent accounted for the child made to fail
    (result.json's `failure_accounted`), over the scored trials that judged it, with its
    95% Wilson interval; None when no failure was injected."""
    judged = [r.result["failure_accounted"] for r in scored if "failure_accounted" in r.result]
    judged = [value for value in judged if value is not None]
    if not judged:
        return None
    accounted = sum(1 for value in judged if value)
    low, high = stats.wilson_interval(accounted, len(judged))
    return {
        "trials": len(judged),
        "accounted": accounted,
        "rate": accounted / len(judged),
        "rate_ci95": [low, high],
    }


def set_exit_code(records: list[TrialRecord], interrupted: int) -> int:
    """The signal's code when interrupted; 0 only when every trial resolved; 3 when every
    trial that did not resolve is errored (the agent failed on its own or could not be run);
    else 1: some trial was scored and not resolved, or never ran."""
    if interrupted:
        return 128 + interrupted
    results = [record.result for record in records]
    unresolved = [result for result in results if not (result and result.get("resolved"))]
    if not unresolved:
        return EXIT_RESOLVED if results else EXIT_UNRESOLVED
    return EXIT_AGENT if all(errored(result) for result in unresolved) else EXIT_UNRESOLVED


def overhead(fanout: dict, baseline: dict, fanout_dir: str, baseline_dir: str) -> dict:
    """Fan-out over single-agent baseline, medians of the same fixture digest and model."""
    return {
        "fanout_run_set": fanout_dir,
        "baseline_run_set": baseline_dir,
        **{
            key: stats.ratio(fanout[key]["median"], baseline[key]["median"])
            for key in ("tokens", "turns", "wall_time_s")
        },
    }


# --- the summary of a run set on disk ---------------------------------------------------------


def trial_records(set_dir: str, config: dict, timelines: dict[str, tuple]) -> list[TrialRecord]:
    """Every trial index of the config with its chosen attempt; `timelines` maps a run dir to
    its (max concurrent children, parallelism)."""
    found = attempts(set_dir)
    chosen = latest_by_trial(found)
    records = []
    for index in range(1, config["trials"] + 1):
        attempt = chosen.get(index)
        shape = timelines.get(attempt.dir, (None, None)) if attempt else (None, None)
        records.append(
            TrialRecord(
                index=index,
                dir=os.path.relpath(attempt.dir, set_dir) if attempt else None,
                attempts=sum(1 for item in found if item.index == index),
                result=attempt.result if attempt else None,
                max_concurrent=shape[0],
                parallelism=shape[1],
            )
        )
    return records


def find_counterpart(set_dir: str, config: dict) -> tuple[str, dict] | None:
    """The newest summarized run set beside this one with the same fixture digest and model
    and the other baseline flag."""
    parent = os.path.dirname(os.path.abspath(set_dir))
    candidates = []
    for name in sorted(os.listdir(parent)):
        other = os.path.join(parent, name)
        if other == os.path.abspath(set_dir) or not os.path.isdir(other):
            continue
        try:
            other_config = load_config(other)
        except RunSetError:
            continue
        summary = read_summary(other)
        if (
            other_config
            and summary
            and other_config["fixture_digest"] == config["fixture_digest"]
            and other_config["model"] == config["model"]
            and other_config["baseline"] != config["baseline"]
        ):
            candidates.append((other_config.get("created_at", ""), other, summary))
    if not candidates:
        return None
    _, other, summary = max(candidates)
    return other, summary


def with_overhead(set_dir: str, config: dict, summary: dict) -> dict:
    counterpart = find_counterpart(set_dir, config)
    if counterpart is None:
        return summary
    other_dir, other = counterpart
    if config["baseline"]:
        ratios = overhead(other, summary, other_dir, os.path.abspath(set_dir))
    else:
        ratios = overhead(summary, other, os.path.abspath(set_dir), other_dir)
    return dict(summary, overhead=ratios)


def summarize_run_set(set_dir: str, config: dict, interrupted: int = 0) -> dict:
    """The summary of the trials on disk, with the overhead over a baseline beside it."""
    shapes = {}
    for attempt in attempts(set_dir):
        if attempt.result is not None:
            shape = timeline.read_timeline(attempt.dir)
            shapes[attempt.dir] = (shape.max_concurrent, shape.parallelism)
    records = trial_records(set_dir, config, shapes)
    summary = summarize(config, records, interrupted)
    return with_overhead(set_dir, config, summary)
