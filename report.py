"""Turn run sets into a report people want to look at: report.md and a self-contained report.html.

    uv run --locked python report.py runs/<run-id> [more run sets] [--out DIR]
    uv run --locked python report.py --compare A B [--out DIR]
    uv run --locked python report.py <run dir> [--out DIR]

The report holds a table per fixture x model x drive (resolve rate, its 95% interval,
pass^k, tokens, turns, wall time, the overhead over a single-agent baseline when one
of the same fixture digest and model is among the sets), the reason-code breakdown, per
run set a table of its trials (failing ones marked, each linking to its evidence page,
reporting/evidence_page.py) and per trial an SVG timeline of the fan-out. `--compare`
names the model and drive of both sides and says per fixture whether the difference in
resolve rate is real (reporting/difference.py), then shows both verdicts, both rates and
the deltas, flips marked. A single run dir gets its evidence page. Reading is the shell
(`load_run_set`); everything from `build_report` on is pure: the same run sets give the
same bytes. No network, no scripts: plain HTML and SVG (reporting/render.py).

Why one module of this size: the report and the comparison are two views of the same
loaded run sets (`RunSetView`), and the command line that picks between them and the
evidence pages is small.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass

from evidence import runsets
from evidence.runpaths import RunPaths
from reporting import difference, evidence_page, stats, timeline
from reporting.render import (
    NONE,
    Cell,
    Chart,
    Fold,
    Heading,
    Paragraph,
    Table,
    dollars,
    render_html,
    render_markdown,
)
from reporting.render import number as fmt
from reporting.summary import overhead, summarize_run_set
from shell.cli import ArgumentParser, print_json, print_note

# A verdict's rank, so that a flip has a direction.
VERDICT_RANK = {"unresolved": 0, "mixed": 1, "resolved": 2}


# --- the data read from disk ------------------------------------------------------------------


@dataclass(frozen=True)
class TrialView:
    index: int
    dir: str | None
    summary: dict  # the trial's row of the run set's summary
    timeline: timeline.Timeline | None

    @property
    def outcome(self) -> Cell:
        """resolved, FAILED, an error of the agent's own (counted apart) or not run."""
        status = self.summary.get("status")
        if self.dir is None or status == "not_run":
            return Cell("not run", tone="muted")
        if status in evidence_page.ERRORED:
            return Cell(evidence_page.ERRORED[status], tone="error")
        if self.summary.get("resolved"):
            return Cell("resolved", tone="good")
        return Cell("FAILED" if status == "scored" else str(status), tone="bad")


@dataclass(frozen=True)
class RunSetView:
    dir: str
    config: dict
    summary: dict
    trials: tuple[TrialView, ...]
    report: str | None = None  # its report.html, when one has been written

    @property
    def key(self) -> tuple[str, str, str, str]:
        kind = "baseline" if self.config["baseline"] else "fan-out"
        return (self.config["fixture"]["name"], self.config["model"], self.config["drive"], kind)

    @property
    def name(self) -> str:
        return os.path.basename(self.dir)


def load_run_set(set_dir: str) -> RunSetView:
    """A run set as it is on disk now: its summary is recomputed from the trials' results."""
    set_dir = os.path.realpath(set_dir)
    config = runsets.load_config(set_dir)
    if config is None:
        raise runsets.RunSetError(f"{set_dir} has no {runsets.RUN_SET_FILE}")
    summary = summarize_run_set(set_dir, config)
    views = []
    for trial in summary["trials"]:
        path = os.path.join(set_dir, trial["dir"]) if trial["dir"] else None
        shape = timeline.read_timeline(path) if path else None
        views.append(TrialView(trial["index"], trial["dir"], trial, shape))
    report = os.path.join(set_dir, "report.html")
    return RunSetView(
        set_dir, config, summary, tuple(views), report if os.path.isfile(report) else None
    )


def run_sets_under(path: str) -> list[str]:
    """The run set itself, or every run set directly inside a dir of them."""
    if os.path.exists(os.path.join(path, runsets.RUN_SET_FILE)):
        return [path]
    return [
        os.path.join(path, name)
        for name in sorted(os.listdir(path))
        if os.path.exists(os.path.join(path, name, runsets.RUN_SET_FILE))
    ]


def is_run_dir(path: str) -> bool:
    """One run's dir (a runner's, a trial's, a materialized capture), not a run set."""
    paths = RunPaths.of(path)
    return not os.path.exists(os.path.join(path, runsets.RUN_SET_FILE)) and (
        os.path.isfile(paths.result) or os.path.isdir(paths.sessions)
    )


def evidence_path(out_dir: str, set_dir: str, trial_dir: str, folder: str = "evidence") -> str:
    """Where a trial's evidence page is written beside a report in `out_dir` (beside a
    comparison, in its own `folder`, so that a report's pages there keep their way back)."""
    return os.path.join(out_dir, folder, os.path.basename(set_dir), f"{trial_dir}.html")


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


# --- the report as blocks (pure) --------------------------------------------------------------


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


def _pass_hat(summary: dict) -> str:
    values = summary["pass_hat_k"]
    return " / ".join(fmt(values[k]) for k in sorted(values, key=int)) or NONE


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
            "Resolve rate with its 95% Wilson interval; pass^k for k = 1..n (every one of k "
            "trials drawn from the n resolves); medians over scored trials; cost in dollars as "
            "the product priced each model call (usage.cost), parent and children, the median "
            "trial's and, in brackets, what the scored trials cost in all per resolved trial; "
            "overhead = fan-out "
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
        failed = sum(1 for trial in item.trials if trial.outcome.tone == "bad")
        errored = sum(1 for trial in item.trials if trial.outcome.tone == "error")
        rows.append(
            (
                Cell(item.key[0]),
                Cell(item.key[1]),
                Cell(item.key[2]),
                Cell(item.key[3]),
                Cell(_counts(summary)),
                Cell(fmt(summary["resolve_rate"]), numeric=True),
                Cell(f"{fmt(low)} to {fmt(high)}"),
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
        "fixture", "model", "drive", "kind", "resolved", "rate", "95% CI", "pass^k (k=1..n)",
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
            fmt(stats.mean_over_fixtures(counts, k, stats.pass_hat_k))
            for k in range(1, min(n for n, _ in counts) + 1)
        ]
        rows.append(
            (*(Cell(part) for part in key), Cell(str(len(fixtures))), Cell(" / ".join(values)))
        )
    if not rows:
        return []
    headers = ("model", "drive", "kind", "fixtures", "mean pass^k (k=1..min n)")
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
                Cell(f"{accounting['accounted']}/{accounting['trials']}"),
                Cell(fmt(accounting["rate"]), numeric=True),
                Cell(f"{fmt(low)} to {fmt(high)}"),
                Cell(fmt(item.summary["resolve_rate"]), numeric=True),
            )
        )
    headers = ("run set", "accounted", "rate", "95% CI", "resolve rate")
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
        Paragraph((Cell("run set "), Cell(item.name, _relative(item.dir, out_dir)))),
    ]
    rows, tones = [], []
    for trial in item.trials:
        row = trial.summary
        outcome = trial.outcome
        page = _page(item, trial, out_dir)
        rows.append(
            (
                Cell(f"trial {trial.index}", page),
                outcome,
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
        tones.append(outcome.tone if outcome.tone != "good" else None)
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
    drawn.sort(key=lambda trial: trial.outcome.tone == "good")
    blocks: list = []
    for trial in drawn:
        page = _page(item, trial, out_dir)
        shape = trial.timeline
        line = (
            Cell(f"Trial {trial.index}", page),
            Cell(": "),
            trial.outcome,
            Cell(". " + evidence_page.timeline_sentence(shape)),
        )
        links = tuple(
            f"{page}#{evidence_page.child_anchor(i)}" for i in range(1, len(shape.children) + 1)
        )
        if trial.outcome.tone == "good":
            blocks.append(Fold(line, (Chart(shape, links),)))
        else:
            blocks += [Paragraph(line), Chart(shape, links)]
    return blocks


def _page(item: RunSetView, trial: TrialView, out_dir: str) -> str | None:
    if trial.dir is None:
        return None
    return _relative(evidence_path(out_dir, item.dir, trial.dir), out_dir)


def _relative(path: str, out_dir: str) -> str:
    return os.path.relpath(path, out_dir).replace(os.sep, "/")


# --- compare (pure) ---------------------------------------------------------------------------


def verdict(summary: dict) -> str:
    """`resolved` when every scored trial resolved, `unresolved` when none did, else `mixed`."""
    n, c = summary["trials_scored"], summary["resolved"]
    if n == 0:
        return "not run"
    return "resolved" if c == n else "unresolved" if c == 0 else "mixed"


def _sides(
    before: list[RunSetView], after: list[RunSetView], names: tuple[str, str], out_dir: str | None
) -> Table:
    """What each side is: its models and drives, its run sets and trials, and their reports."""
    rows = []
    for side, name, sets in (("A", names[0], before), ("B", names[1], after)):
        rows.append(
            (
                Cell(side),
                Cell(name),
                Cell(", ".join(sorted({item.key[1] for item in sets})) or NONE),
                Cell(", ".join(sorted({item.key[2] for item in sets})) or NONE),
                Cell(fmt(len(sets)), numeric=True),
                Cell(fmt(sum(item.summary["trials_scored"] for item in sets)), numeric=True),
                _reports(sets, out_dir),
            )
        )
    headers = ("side", "name", "model", "drive", "run sets", "trials scored", "report")
    return Table(headers, tuple(rows))


def _reports(sets: list[RunSetView], out_dir: str | None) -> tuple[Cell, ...]:
    """A link to each run set's report, or the command that writes it."""
    cells: list[Cell] = []
    for item in sets:
        if cells:
            cells.append(Cell(", "))
        if item.report and out_dir is not None:
            cells.append(Cell(f"{item.name} report", _relative(item.report, out_dir)))
        else:
            cells.append(Cell(f"no report yet: report.py {item.name}", tone="muted"))
    return tuple(cells) or (Cell(NONE),)


def build_compare(
    before: list[RunSetView],
    after: list[RunSetView],
    names: tuple[str, str],
    out_dir: str | None = None,
) -> list:
    """Per fixture (and kind), whether A and B really differ, then the verdict and numbers of
    A and of B and the deltas B - A; a flip is marked worse (red) or better (green); then
    the trials that flipped, linked to their evidence pages, and the reason codes that
    appeared or vanished. The models and drives of both sides head the page, linked to their
    reports, and each row names its own when a side has more than one. Links are relative
    to `out_dir`, where the page is written (None: no links)."""

    first, second = compare_sides(before, after)
    mixed = any(len({item.key[1:3] for item in sets}) > 1 for sets in (before, after))
    rows, tones = [], []
    for key in sorted(set(first) | set(second)):
        a, b = first.get(key), second.get(key)
        sides = [Cell(f"{s.key[1]} · {s.key[2]}" if s else "absent") for s in (a, b)] * mixed
        if a is None or b is None:
            found = [Cell(verdict(item.summary) if item else "absent") for item in (a, b)]
            rows.append((Cell(key[0]), Cell(key[1]), *sides, *found, *(Cell(NONE),) * 10))
            tones.append("muted")
            continue
        flip = _flip(verdict(a.summary), verdict(b.summary))
        k = min(a.summary["trials_scored"], b.summary["trials_scored"])
        hat = [(s.summary["pass_hat_k"].get(str(k)) if k else None) for s in (a, b)]
        rates = [s.summary["resolve_rate"] for s in (a, b)]
        rows.append(
            (
                Cell(key[0]),
                Cell(key[1]),
                *sides,
                Cell(verdict(a.summary)),
                Cell(verdict(b.summary)),
                flip,
                *_both(*rates, better="higher"),
                *_both(*hat, better="higher", label=f"k={k}: " if k else ""),
                _changed(*(s.summary["tokens"]["median"] for s in (a, b))),
                _changed(*(s.summary["turns"]["median"] for s in (a, b))),
                _cost_change(a, b),
            )
        )
        tones.append(flip.tone)
    headers = (
        "fixture", "kind", *("A: model · drive", "B: model · drive") * mixed, "verdict A",
        "verdict B", "flip", "rate A", "rate B", "Δ rate", "pass^k A", "pass^k B", "Δ pass^k",
        "tokens A → B (Δ)", "turns A → B (Δ)", "cost A → B (Δ)",
    )  # fmt: skip
    return [
        Heading(1, "swarm-fanout comparison"),
        _sides(before, after, names, out_dir),
        *_tests(first, second),
        Heading(2, "Verdicts and deltas"),
        Paragraph(
            "Per fixture and kind: the verdict on each side (resolved: every scored trial "
            "resolved, unresolved: none, mixed), a flip marked worse or better, and both "
            "values beside their delta B - A; pass^k at the largest k both sides have; "
            "tokens, turns and cost (dollars, as the product priced each call) are medians "
            "over scored trials."
        ),
        Table(headers, tuple(rows), tuple(tones)),
        *_flipped(first, second, out_dir),
        *_codes_changed(first, second),
    ]


def flipped_trials(
    first: dict, second: dict
) -> list[tuple[tuple, RunSetView, TrialView, RunSetView, TrialView]]:
    """Per fixture and kind on both sides, trial n of A and trial n of B when both have a
    result and one resolved while the other did not."""
    found = []
    for key in sorted(set(first) & set(second)):
        a, b = first[key], second[key]
        theirs = {trial.index: trial for trial in b.trials if trial.dir is not None}
        for mine in a.trials:
            other = theirs.get(mine.index)
            if mine.dir is None or other is None:
                continue
            if bool(mine.summary.get("resolved")) != bool(other.summary.get("resolved")):
                found.append((key, a, mine, b, other))
    return found


def compare_sides(before: list[RunSetView], after: list[RunSetView]) -> tuple[dict, dict]:
    """Each side's run sets by (fixture, kind); of several, the one with the latest dir."""

    def by_fixture(sets):
        return {(item.key[0], item.key[3]): item for item in sorted(sets, key=lambda s: s.dir)}

    return by_fixture(before), by_fixture(after)


COMPARE_EVIDENCE = "compare-evidence"  # beside compare.html: the flipped trials' pages


def _flipped(first: dict, second: dict, out_dir: str | None) -> list:
    """A row per trial that resolved on one side and not on the other, each side's outcome
    linked to its evidence page, with its reason codes."""
    found = flipped_trials(first, second)
    blocks: list = [Heading(2, "Trials that flipped")]
    if not found:
        blocks.append(Paragraph("No trial resolved on one side and not on the other."))
        return blocks
    blocks.append(
        Paragraph(
            "Trial n of A beside trial n of B, where one resolved and the other did not; each "
            "outcome links to that trial's evidence page (why its verdict is what it is)."
        )
    )
    rows, tones = [], []
    for key, a, mine, b, other in found:
        cells = []
        for item, trial in ((a, mine), (b, other)):
            page = None
            if out_dir is not None:
                path = evidence_path(out_dir, item.dir, trial.dir, COMPARE_EVIDENCE)
                page = _relative(path, out_dir)
            outcome = trial.outcome
            cells += [
                Cell(outcome.text, page, outcome.tone),
                Cell(", ".join(trial.summary.get("reasons") or []) or ""),
            ]
        rows.append((Cell(key[0]), Cell(key[1]), Cell(f"trial {mine.index}"), *cells))
        tones.append("bad" if mine.summary.get("resolved") else "good")
    headers = ("fixture", "kind", "trial", "A", "A's reasons", "B", "B's reasons")
    blocks.append(Table(headers, tuple(rows), tuple(tones)))
    return blocks


def _codes_changed(first: dict, second: dict) -> list:
    """Per fixture and kind, every reason code of a failed or errored trial on either side:
    how many trials had it in A and in B, and whether it appeared or vanished."""
    rows, tones = [], []
    for key in sorted(set(first) & set(second)):
        a, b = first[key].summary, second[key].summary
        for field in ("failures", "errors"):
            before, after = a.get(field) or {}, b.get(field) or {}
            for code in sorted(set(before) | set(after)):
                n, m = before.get(code, 0), after.get(code, 0)
                change, tone = _code_change(n, m)
                rows.append(
                    (
                        Cell(key[0]),
                        Cell(key[1]),
                        Cell(code, tone="error" if field == "errors" else None),
                        Cell(fmt(n), numeric=True),
                        Cell(fmt(m), numeric=True),
                        Cell(change, tone=tone),
                    )
                )
                tones.append(tone if tone in ("bad", "good") and not n * m else None)
    if not rows:
        return [Heading(2, "Reason codes"), Paragraph("No trial failed on either side.")]
    return [
        Heading(2, "Reason codes"),
        Paragraph(
            "Per fixture and kind, the trials failing (or, in purple, erroring) with each "
            "code on each side: a code that appeared in B is red, one that vanished green."
        ),
        Table(
            ("fixture", "kind", "reason code", "A trials", "B trials", "change"),
            tuple(rows),
            tuple(tones),
        ),
    ]


def _code_change(n: int, m: int) -> tuple[str, str | None]:
    if n == m:
        return "same", None
    if not n:
        return "appeared", "bad"
    if not m:
        return "vanished", "good"
    return (f"more (+{m - n})", "bad") if m > n else (f"fewer ({m - n})", "good")


def _cost_change(a: RunSetView, b: RunSetView) -> Cell:
    """The median cost `A → B (B - A)`; without a cost on both sides, why not, once when the
    sides say the same."""
    costs = [(s.summary.get("cost_usd") or {}).get("median") for s in (a, b)]
    shown = [dollars(cost, s.key[1]) for cost, s in zip(costs, (a, b), strict=True)]
    if not all(costs):
        return Cell(shown[0] if shown[0] == shown[1] else " → ".join(shown), tone="muted")
    change = costs[1] - costs[0]
    sign = "+" if change > 0 else "-" if change < 0 else "±"
    amount = dollars(abs(change)) if change else "$0"
    return Cell(f"{shown[0]} → {shown[1]} ({sign}{amount})", numeric=True)


def _tests(first: dict, second: dict) -> list:
    """Per fixture and kind on both sides: is B's resolve rate really different from A's?
    A verdict line each, then the numbers behind them."""
    lines, rows, tones = [], [], []
    for key in sorted(set(first) & set(second)):
        a, b = first[key], second[key]
        found = difference.compare_rates(a.config, a.summary, b.config, b.summary)
        sentence = difference.verdict_sentence(found)
        tone = None
        if isinstance(found, difference.RateDifference) and found.real:
            tone = "good" if found.difference > 0 else "bad"
        lines.append(Paragraph((Cell(f"{key[0]} · {key[1]}: "), Cell(sentence, tone=tone))))
        if isinstance(found, difference.NotTested):
            continue
        low, high = found.ci95
        rows.append(
            (
                Cell(key[0]),
                Cell(key[1]),
                Cell(f"{found.a_resolved}/{found.a_trials}"),
                Cell(f"{found.b_resolved}/{found.b_trials}"),
                Cell(_delta(0, found.difference), tone=tone, numeric=True),
                Cell(f"{fmt(low)} to {fmt(high)}"),
                Cell(found.test + (f", {found.pairs} pairs" if found.pairs is not None else "")),
                Cell(difference.p_text(found.p_value).removeprefix("p = "), tone=tone),
                Cell(fmt(found.needed), numeric=True),
            )
        )
        tones.append(tone)
    if not lines:
        return []
    blocks: list = [Heading(2, "Is the difference real?"), *lines]
    if rows:
        headers = (
            "fixture", "kind", "A resolved", "B resolved", "Δ rate", "95% CI of Δ", "test",
            "p (two-sided)", "trials for 80% power",
        )  # fmt: skip
        blocks.append(Table(headers, tuple(rows), tuple(tones)))
    blocks.append(
        Paragraph(
            "Errored trials are left out. Trials are paired when both sides record the same "
            "fixture digest and the same number of planned trials: trial n of each got the "
            "same fixture and trial seed ($SWARM_FANOUT_TRIAL=n), and McNemar's exact test "
            "counts the pairs only one side resolved; otherwise Fisher's exact test compares "
            "the two sets. A difference is called real below p = 0.05. The 95% interval of "
            "B - A is Newcombe's hybrid score interval. Trials for 80% power: how many would "
            "detect a difference of the size seen, from a normal approximation. pass^k is "
            "the chance that k trials all resolve, p^k, which rises with the resolve rate p "
            "alone: it differs between A and B exactly when the rate does, so this test is "
            "the test for pass^k at every k too."
        )
    )
    return blocks


def _flip(a: str, b: str) -> Cell:
    if a == b:
        return Cell("same")
    if a in VERDICT_RANK and b in VERDICT_RANK:
        worse = VERDICT_RANK[b] < VERDICT_RANK[a]
        return Cell("FLIP, worse", tone="bad") if worse else Cell("FLIP, better", tone="good")
    return Cell("FLIP", tone="warn")


def _both(a, b, better: str, label: str = "") -> tuple[Cell, Cell, Cell]:
    """A, B and B - A: the delta green when it went the `better` way ("higher"), else red."""
    tone = None
    if a is not None and b is not None and a != b:
        tone = "good" if (b > a) == (better == "higher") else "bad"
    return (
        Cell(fmt(a), numeric=True),
        Cell(fmt(b), numeric=True),
        Cell(label + _delta(a, b), tone=tone, numeric=True),
    )


def _changed(a, b) -> Cell:
    """`A → B (B - A)`, for numbers reported, never judged."""
    return Cell(f"{fmt(a)} → {fmt(b)} ({_delta(a, b)})", numeric=True)


def _delta(a, b) -> str:
    if a is None or b is None:
        return NONE
    value = b - a
    sign = "+" if value > 0 else ""
    return f"{sign}{fmt(float(value))}"


# --- the command line -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="report.py",
        description="Write report.md and a self-contained report.html for run sets (with an "
        "evidence page per trial under evidence/), or with --compare A B a comparison "
        "(compare.md, compare.html) of two run sets or two dirs of run sets, or for one run "
        "dir its evidence page (evidence.html). Prints the written paths as JSON.",
    )
    parser.add_argument("run_sets", nargs="*", help="run set dirs (runs/<run-id>), or one run dir")
    parser.add_argument(
        "--compare", nargs=2, metavar=("A", "B"), help="compare two run sets, or two dirs of them"
    )
    parser.add_argument(
        "--out",
        help="dir to write into (default the first run set, A for --compare, the run dir itself)",
    )
    args = parser.parse_args(argv)
    if bool(args.compare) == bool(args.run_sets):
        parser.error("give run set dirs, one run dir, or --compare A B")
    runs = [path for path in args.run_sets if is_run_dir(path)]
    if runs and len(args.run_sets) > 1:
        parser.error("give one run dir, or run set dirs")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    written: dict = {}
    try:
        if args.run_sets and is_run_dir(args.run_sets[0]):
            out = args.out or args.run_sets[0]
            page = os.path.join(out, evidence_page.PAGE_FILE)
            evidence_page.write_page(args.run_sets[0], page)
            print_json(json.dumps({"html": page}, indent=2))
            return 0
        if args.compare:
            sides = [[load_run_set(p) for p in run_sets_under(side)] for side in args.compare]
            out = args.out or args.compare[0]
            names = tuple(os.path.basename(os.path.normpath(side)) for side in args.compare)
            blocks = build_compare(sides[0], sides[1], names, os.path.realpath(out))
            stem = "compare"
            written["evidence"] = _write_flipped_pages(sides, os.path.realpath(out))
        else:
            sets = [load_run_set(path) for path in args.run_sets]
            out = args.out or args.run_sets[0]
            blocks = build_report(sets, os.path.realpath(out))
            stem = "report"
            written["evidence"] = _write_evidence_pages(sets, os.path.realpath(out))
    except (runsets.RunSetError, OSError) as error:
        print_note(f"report.py: {error}")
        return 2
    os.makedirs(out, exist_ok=True)
    for suffix, text in (
        ("md", render_markdown(blocks)),
        ("html", render_html(blocks, f"swarm-fanout {stem}")),
    ):
        path = os.path.join(out, f"{stem}.{suffix}")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written[suffix] = path
    print_json(json.dumps(written, indent=2))
    return 0


def _write_evidence_pages(sets: list[RunSetView], out_dir: str) -> list[str]:
    pages = []
    report = os.path.join(out_dir, "report.html")
    for item in sets:
        for trial in item.trials:
            if trial.dir is None:
                continue
            page = evidence_path(out_dir, item.dir, trial.dir)
            back = Cell("← the report", _relative(report, os.path.dirname(page)))
            evidence_page.write_page(os.path.join(item.dir, trial.dir), page, back)
            pages.append(page)
    return pages


def _write_flipped_pages(sides: list[list[RunSetView]], out_dir: str) -> list[str]:
    """The evidence page of each trial that flipped, on both sides, beside compare.html."""
    pages = []
    back_to = os.path.join(out_dir, "compare.html")
    for _, *pairs in flipped_trials(*compare_sides(*sides)):
        for item, trial in zip(pairs[::2], pairs[1::2], strict=True):
            page = evidence_path(out_dir, item.dir, trial.dir, COMPARE_EVIDENCE)
            back = Cell("← the comparison", _relative(back_to, os.path.dirname(page)))
            evidence_page.write_page(os.path.join(item.dir, trial.dir), page, back)
            pages.append(page)
    return pages


if __name__ == "__main__":
    sys.exit(main())
