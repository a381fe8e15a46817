"""The report of run sets as blocks (pure: the same run sets give the same bytes), and the
evidence page of each of their trials written beside it.

The report holds a table per fixture x model x drive (resolve rate, its 95% interval,
pass^k, tokens, turns, wall time, the overhead over a single-agent baseline when one
of the same fixture digest and model is among the sets), the reason-code breakdown, per
run set a table of its trials (failing ones marked, each linking to its evidence page,
reporting/evidence_page.py) and per trial an SVG timeline of the fan-out.
"""

from __future__ import annotations

import os

from swarm_fanout.reporting import evidence_page, stats
from swarm_fanout.reporting.render import (
    NONE,
    Cell,
    Chart,
    Fold,
    Heading,
    Paragraph,
    Table,
    dollars,
    injected_text,
    percent,
    percent_interval,
)
from swarm_fanout.reporting.render import number as fmt
from swarm_fanout.reporting.run_set_views import RunSetView, TrialView, evidence_path, relative
from swarm_fanout.reporting.summary import overhead


def _set_cost(summary: dict, model: str) -> Cell:
    """The median cost of a trial, and what the set cost per resolved trial."""
    median = (summary.get("cost_usd") or {}).get("median")
    if not median:
        return _cost(median, model)
    per = summary.get("cost_per_resolved_usd")
    if per:
        return Cell(f"{dollars(median)} ({dollars(per)})", numeric=True)
    return Cell(f"{dollars(median)} ({'none resolved' if not summary['resolved'] else NONE})")


def _cost(value: float | None, model: str | None) -> Cell:
    """Dollars, or why there are none (muted)."""
    return Cell(dollars(value, model), numeric=bool(value), tone=None if value else "muted")


def _counts(summary: dict) -> str:
    """resolved/scored, the planned trials when some were not scored, and errored trials."""
    counts = f"{summary['resolved']}/{summary['trials_scored']}"
    planned = summary["trials_planned"]
    if planned != summary["trials_scored"]:
        counts += f" of {planned} planned"
    errored = _errored(summary)
    return counts + (f"; {errored} errored (not counted)" if errored else "")


def _errored(summary: dict) -> int:
    if "trials_errored" in summary:
        return summary["trials_errored"]
    return sum(1 for trial in summary["trials"] if trial.get("status") in evidence_page.ERRORED)


# The k a page shows pass^k at, with n itself: enough to see the curve fall, in one line
# however many trials a set has (summary.json keeps every k).
SHOWN_K = (1, 2, 4, 8)


def shown_k(n: int) -> list[int]:
    """1, 2, 4, 8 (those up to n) and n."""
    return sorted({k for k in SHOWN_K if k <= n} | ({n} if n else set()))


def _pass_hat(summary: dict) -> str:
    """`k=1 80% · k=2 62% · … · k=50 0%`."""
    values = summary["pass_hat_k"]
    n = max(map(int, values), default=0)
    shown = [k for k in shown_k(n) if str(k) in values]
    return " · ".join(f"k={k} {percent(values[str(k)])}" for k in shown) or NONE


def overhead_pairs(sets: list[RunSetView]) -> dict[str, dict]:
    """Per fan-out run set dir, its overhead over the newest baseline set among `sets` of the
    same fixture digest and model; else the overhead its own summary found beside it."""
    found = {}
    for fan_out in sets:
        if fan_out.config["baseline"]:
            continue
        baselines = [
            other
            for other in sets
            if other.config["baseline"]
            and other.config["fixture_digest"] == fan_out.config["fixture_digest"]
            and other.config["model"] == fan_out.config["model"]
        ]
        if baselines:
            base = max(baselines, key=lambda item: item.config.get("created_at", ""))
            found[fan_out.dir] = overhead(fan_out.summary, base.summary, fan_out.dir, base.dir)
        elif fan_out.summary.get("overhead"):
            found[fan_out.dir] = fan_out.summary["overhead"]
    return found


def _set_anchor(number: int) -> str:
    return f"set-{number}"


def build_report(sets: list[RunSetView], out_dir: str) -> list:
    """The report's blocks; links are relative to `out_dir`, where the report is written."""
    ordered = sorted(sets, key=lambda item: (item.key, item.dir))
    overheads = overhead_pairs(ordered)
    blocks: list = [Heading(1, "swarm-fanout report")]
    blocks.append(
        Paragraph(
            "Resolve rate with its 95% Wilson interval; pass^k at k = 1, 2, 4, 8 and n (every "
            "one of k trials drawn from the n resolves; summary.json has every k); medians "
            "over scored trials; cost in dollars as the product priced each model call "
            "(usage.cost), parent and children, the median trial's and, in brackets, what the "
            "scored trials cost in all per resolved trial; overhead = fan-out "
            "median / single-agent baseline median (same fixture digest and model). A baseline "
            "trial is resolved on coverage alone. A trial whose agent failed on its own (agent "
            "error) is counted apart, not as a failure of the model."
        )
    )
    rows, tones = [], []
    for number, item in enumerate(ordered, start=1):
        summary = item.summary
        low, high = summary["resolve_rate_ci95"]
        ratios = overheads.get(item.dir) or {}
        failed = sum(1 for trial in item.trials if trial.status_cell.tone == "bad")
        errored = sum(1 for trial in item.trials if trial.status_cell.tone == "error")
        rows.append(
            (
                Cell(item.key[0]),
                Cell(item.key[1]),
                Cell(item.key[2]),
                _kind(item),
                Cell(_counts(summary)),
                Cell(percent(summary["resolve_rate"]), numeric=True),
                Cell(percent_interval(low, high)),
                Cell(_pass_hat(summary), wrap=True),
                Cell(fmt(summary["tokens"]["median"]), numeric=True),
                Cell(fmt(summary["turns"]["median"]), numeric=True),
                Cell(fmt(summary["wall_time_s"]["median"]), numeric=True),
                _set_cost(summary, item.key[1]),
                Cell(
                    " / ".join(fmt(ratios.get(key)) for key in ("tokens", "turns", "wall_time_s"))
                    if ratios
                    else NONE,
                    wrap=True,
                ),
                _trials_cell(failed, errored, f"#{_set_anchor(number)}"),
            )
        )
        tones.append("bad" if failed else "error" if errored else None)
    headers = (
        "fixture", "model", "drive", "kind", "resolved", "rate", "95% CI", "pass^k",
        "tokens", "turns", "wall s", "cost",
        "overhead x (tokens / turns / wall)", "trials",
    )  # fmt: skip
    blocks += [Heading(2, "Results"), Table(headers, tuple(rows), tuple(tones))]
    blocks += _across_fixtures(ordered)
    blocks += _failure_accounting(ordered)
    blocks += _reasons(ordered)
    blocks.append(Heading(2, "Trials"))
    blocks.append(
        Paragraph(
            "Per run set, every trial with a link to its evidence page (the verdict per "
            "criterion, the shard table, the reasons with the file and line they point at, "
            "and the conversations), then the fan-out timelines: those of the trials that did "
            "not resolve first, drawn; each resolved trial's folded under its line. One bar per "
            "depth-1 child "
            "from its spawn to its last transcript entry, linking to the child's conversation; "
            "parallelism is the sum of child durations over the makespan: about 1 for children "
            "that ran one after another."
        )
    )
    for number, item in enumerate(ordered, start=1):
        blocks += _trials(item, number, out_dir)
    return blocks


def _kind(item: RunSetView) -> Cell:
    """Fan-out or baseline, and whether failures were injected (which: "Injected failures")."""
    return Cell(item.key[3], tone="warn" if item.injected else None, wrap=True)


def _trials_cell(failed: int, errored: int, href: str) -> Cell:
    """How many trials failed, and how many errored, linked to the set's trials."""
    parts = [f"{failed} failed"] if failed else []
    parts += [f"{errored} errored"] if errored else []
    tone = "bad" if failed else "error" if errored else None
    return Cell(", ".join(parts) or "none failed", href, tone)


def _across_fixtures(sets: list[RunSetView]) -> list:
    """pass^k per fixture, then averaged over the fixtures of a model x drive x kind."""
    groups: dict[tuple, list[RunSetView]] = {}
    for item in sets:
        groups.setdefault(item.key[1:], []).append(item)
    rows = []
    for key, members in sorted(groups.items()):
        fixtures = {member.key[0] for member in members}
        if len(fixtures) < 2:
            continue
        counts = [(m.summary["trials_scored"], m.summary["resolved"]) for m in members]
        if min(n for n, _ in counts) == 0:
            continue
        values = [
            f"k={k} {percent(stats.mean_over_fixtures(counts, k, stats.pass_hat_k))}"
            for k in shown_k(min(n for n, _ in counts))
        ]
        rows.append(
            (*(Cell(part) for part in key), Cell(str(len(fixtures))), Cell(" · ".join(values)))
        )
    if not rows:
        return []
    headers = ("model", "drive", "kind", "fixtures", "mean pass^k (n: the fewest trials)")
    return [Heading(2, "Across fixtures"), Table(headers, tuple(rows))]


def _failure_accounting(sets: list[RunSetView]) -> list:
    """For run sets with --inject-failure: how often the parent accounted for the child made
    to fail, beside the resolve rate (a child that fails outright fails coverage)."""
    judged = [(item, item.summary.get("failure_accounting")) for item in sets]
    judged = [(item, accounting) for item, accounting in judged if accounting]
    if not judged:
        return []
    rows = []
    for item, accounting in judged:
        low, high = accounting["rate_ci95"]
        rows.append(
            (
                Cell(", ".join(item.key)),
                Cell(injected_text(item.injected) or NONE),
                Cell(f"{accounting['accounted']}/{accounting['trials']}"),
                Cell(percent(accounting["rate"]), numeric=True),
                Cell(percent_interval(low, high)),
                Cell(percent(item.summary["resolve_rate"]), numeric=True),
            )
        )
    headers = ("run set", "injected", "accounted", "rate", "95% CI", "resolve rate")
    return [
        Heading(2, "Injected failures"),
        Paragraph(
            "Run sets with --inject-failure: trials whose parent accounted for the child made "
            "to fail (an answer after a retry, a line marking the shard missing, or the number "
            "its child worked out; not an invented one), with the 95% Wilson interval."
        ),
        Table(headers, tuple(rows)),
    ]


def _reasons(sets: list[RunSetView]) -> list:
    blocks: list = [Heading(2, "Failures by reason code")]
    failures = _by_code(sets, "failures", "bad")
    if failures is None:
        blocks.append(Paragraph("No scored trial failed."))
    else:
        blocks += [
            Paragraph("Trials failing with each code (a trial counts once per code)."),
            failures,
        ]
    errors = _by_code(sets, "errors", "error")
    if errors is not None:
        blocks += [
            Paragraph(
                "Errored trials by code: the agent failed on its own or could not be run, an "
                "error of the environment, not counted in the rates above."
            ),
            errors,
        ]
    return blocks


def _by_code(sets: list[RunSetView], field: str, tone: str) -> Table | None:
    """Per reason code, how many trials of each set have it in the summary's `field`."""
    counts = [item.summary.get(field) or {} for item in sets]
    codes = sorted({code for found in counts for code in found})
    if not codes:
        return None
    rows = tuple(
        (
            Cell(code),
            *(
                Cell(fmt(count), tone=tone if count else None, numeric=True)
                for count in (found.get(code, 0) for found in counts)
            ),
        )
        for code in codes
    )
    return Table(("reason code", *labels(sets)), rows)


def labels(sets: list[RunSetView]) -> list[str]:
    """A short name per run set: the parts of its fixture, model, drive and kind that differ
    between the sets, and its dir's name where that is not enough."""
    varying = [i for i in range(4) if len({item.key[i] for item in sets}) > 1]
    found = [" · ".join(item.key[i] for i in varying) for item in sets]
    return [
        label if label and found.count(label) == 1 else f"{label} {item.name}".strip()
        for label, item in zip(found, sets, strict=True)
    ]


def _trials(item: RunSetView, number: int, out_dir: str) -> list:
    blocks: list = [
        Heading(3, " · ".join(item.key), _set_anchor(number)),
        Paragraph((Cell("run set "), Cell(item.name, relative(item.dir, out_dir)))),
    ]
    rows, tones = [], []
    for trial in item.trials:
        row = trial.summary
        status = trial.status_cell
        page = _page(item, trial, out_dir)
        rows.append(
            (
                Cell(f"trial {trial.index}", page),
                status,
                Cell(", ".join(row.get("reasons") or []) or ("" if trial.dir else "no result")),
                Cell(fmt(row.get("tokens")), numeric=True),
                Cell(fmt(row.get("turns")), numeric=True),
                Cell(fmt(row.get("wall_time_s")), numeric=True),
                _cost(row.get("cost_usd"), item.key[1]) if trial.dir else Cell(""),
                Cell(fmt(len(trial.timeline.children) if trial.timeline else None), numeric=True),
                Cell(fmt(row.get("max_concurrent_children")), numeric=True),
                Cell(fmt(row.get("parallelism")), numeric=True),
                Cell(fmt(row.get("attempts")), numeric=True),
            )
        )
        tones.append(status.tone if status.tone != "good" else None)
    headers = (
        "trial", "outcome", "reasons", "tokens", "turns", "wall s", "cost", "children",
        "max at once", "parallelism", "attempts",
    )  # fmt: skip
    blocks.append(Table(headers, tuple(rows), tuple(tones)))
    blocks += _timelines(item, out_dir)
    return blocks


def _timelines(item: RunSetView, out_dir: str) -> list:
    """A timeline per trial: the trials that did not resolve first, drawn; then the
    resolved ones, each folded under its one line, so that a failure is not below the fold."""
    drawn = [
        trial
        for trial in item.trials
        if trial.dir is not None and trial.timeline is not None and trial.timeline.children
    ]
    drawn.sort(key=lambda trial: trial.status_cell.tone == "good")
    blocks: list = []
    for trial in drawn:
        page = _page(item, trial, out_dir)
        shape = trial.timeline
        line = (
            Cell(f"Trial {trial.index}", page),
            Cell(": "),
            trial.status_cell,
            Cell(". " + evidence_page.timeline_sentence(shape)),
        )
        links = tuple(
            f"{page}#{evidence_page.child_anchor(i)}" for i in range(1, len(shape.children) + 1)
        )
        chart = Chart(shape, links, trial.flags)
        if trial.status_cell.tone == "good":
            blocks.append(Fold(line, (chart,)))
        else:
            blocks += [Paragraph(line), chart]
    return blocks


def _page(item: RunSetView, trial: TrialView, out_dir: str) -> str | None:
    if trial.dir is None:
        return None
    return relative(evidence_path(out_dir, item.dir, trial.dir), out_dir)


def write_evidence_pages(
    sets: list[RunSetView], out_dir: str, into: str | None = None
) -> list[str]:
    """Each trial's evidence page, linked as read from `out_dir` and written under `into`
    (a temp dir moved to `out_dir` once everything is written; default `out_dir` itself).
    Returns where the pages will be read from."""
    pages = []
    report = os.path.join(out_dir, "report.html")
    for item in sets:
        for trial in item.trials:
            if trial.dir is None:
                continue
            page = evidence_path(out_dir, item.dir, trial.dir)
            back = Cell("← the report", relative(report, os.path.dirname(page)))
            written = evidence_path(into or out_dir, item.dir, trial.dir)
            evidence_page.write_page(os.path.join(item.dir, trial.dir), written, back, at=page)
            pages.append(page)
    return pages
