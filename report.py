"""Turn run sets into a report people want to look at: report.md and a self-contained report.html.

    uv run --locked python report.py runs/<run-id> [more run sets] [--out DIR]
    uv run --locked python report.py --compare A B [--out DIR]

The report holds a table per fixture x model x drive (resolve rate, its 95% interval,
pass^k, tokens, turns, wall time, the overhead over a single-agent baseline when one
of the same fixture digest and model is among the sets), the reason-code breakdown,
and per trial an SVG timeline of the fan-out linking to the raw transcripts. `--compare`
shows per-fixture verdict flips and deltas between two run sets (or two dirs of run
sets). Reading is the shell (`load_run_set`); everything from `build_report` on is
pure: the same run sets give the same bytes. No network, no scripts: plain HTML and SVG.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from html import escape

import stats
import timeline
import trials
from cli import print_json, print_note

NONE = "n/a"
COLOURS = {"replied": "#3a8a3a", "failed": "#d9822b", "dropped": "#c23030"}
SVG_WIDTH, LABEL_WIDTH, ROW_HEIGHT = 760, 150, 20
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    # Wide tables scroll and timelines shrink on a narrow window.
    "table{border-collapse:collapse;margin:1em 0;display:block;overflow-x:auto;max-width:100%}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}code{font-size:90%}"
    "svg{display:block;margin:0.5em 0;max-width:100%;height:auto}"
)


# --- the data read from disk ------------------------------------------------------------------


@dataclass(frozen=True)
class TrialView:
    index: int
    dir: str | None
    resolved: bool
    reasons: tuple[str, ...]
    timeline: timeline.Timeline | None


@dataclass(frozen=True)
class RunSetView:
    dir: str
    config: dict
    summary: dict
    trials: tuple[TrialView, ...]

    @property
    def key(self) -> tuple[str, str, str, str]:
        kind = "baseline" if self.config["baseline"] else "fan-out"
        return (self.config["fixture"]["name"], self.config["model"], self.config["drive"], kind)


def load_run_set(set_dir: str) -> RunSetView:
    """A run set as it is on disk now: its summary is recomputed from the trials' results."""
    set_dir = os.path.realpath(set_dir)
    config = trials.load_config(set_dir)
    if config is None:
        raise trials.RunSetError(f"{set_dir} has no {trials.RUN_SET_FILE}")
    summary = trials.summarize_run_set(set_dir, config)
    views = []
    for trial in summary["trials"]:
        path = os.path.join(set_dir, trial["dir"]) if trial["dir"] else None
        shape = timeline.read_timeline(path) if path else None
        views.append(
            TrialView(
                trial["index"], trial["dir"], trial["resolved"], tuple(trial["reasons"]), shape
            )
        )
    return RunSetView(set_dir, config, summary, tuple(views))


def run_sets_under(path: str) -> list[str]:
    """The run set itself, or every run set directly inside a dir of them."""
    if os.path.exists(os.path.join(path, trials.RUN_SET_FILE)):
        return [path]
    return [
        os.path.join(path, name)
        for name in sorted(os.listdir(path))
        if os.path.exists(os.path.join(path, name, trials.RUN_SET_FILE))
    ]


# --- the report as blocks (pure) --------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    text: str
    href: str | None = None


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Chart:
    """One trial's fan-out: a bar per child from spawn to end, a mark at its reply."""

    timeline: timeline.Timeline
    links: tuple[str, ...]  # per child, its transcript relative to the report


def _number(value, digits: int = 2) -> str:
    if value is None:
        return NONE
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.{digits}f}"
    return str(int(value)) if isinstance(value, float) else str(value)


def _counts(summary: dict) -> str:
    """resolved/scored, and the planned trials when some were not scored."""
    counts = f"{summary['resolved']}/{summary['trials_scored']}"
    planned = summary["trials_planned"]
    return counts if planned == summary["trials_scored"] else f"{counts} of {planned} planned"


def _pass_hat(summary: dict) -> str:
    values = summary["pass_hat_k"]
    return " / ".join(_number(values[k]) for k in sorted(values, key=int)) or NONE


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
            found[fan_out.dir] = trials.overhead(
                fan_out.summary, base.summary, fan_out.dir, base.dir
            )
        elif fan_out.summary.get("overhead"):
            found[fan_out.dir] = fan_out.summary["overhead"]
    return found


def build_report(sets: list[RunSetView], out_dir: str) -> list:
    """The report's blocks; links are relative to `out_dir`, where the report is written."""
    ordered = sorted(sets, key=lambda item: (item.key, item.dir))
    overheads = overhead_pairs(ordered)
    blocks: list = [Heading(1, "swarm-fanout report")]
    blocks.append(
        Paragraph(
            "Resolve rate with its 95% Wilson interval; pass^k for k = 1..n (every one of k "
            "trials drawn from the n resolves); medians over scored trials; overhead = fan-out "
            "median / single-agent baseline median (same fixture digest and model). A baseline "
            "trial is resolved on coverage alone."
        )
    )
    rows = []
    for item in ordered:
        summary = item.summary
        low, high = summary["resolve_rate_ci95"]
        ratios = overheads.get(item.dir) or {}
        rows.append(
            (
                Cell(item.key[0]),
                Cell(item.key[1]),
                Cell(item.key[2]),
                Cell(item.key[3]),
                Cell(_counts(summary)),
                Cell(_number(summary["resolve_rate"])),
                Cell(f"{_number(low)} to {_number(high)}"),
                Cell(_pass_hat(summary)),
                Cell(_number(summary["tokens"]["median"])),
                Cell(_number(summary["turns"]["median"])),
                Cell(_number(summary["wall_time_s"]["median"])),
                Cell(
                    " / ".join(
                        _number(ratios.get(key)) for key in ("tokens", "turns", "wall_time_s")
                    )
                    if ratios
                    else NONE
                ),
                Cell(os.path.basename(item.dir), _relative(item.dir, out_dir)),
            )
        )
    headers = (
        "fixture", "model", "drive", "kind", "resolved", "rate", "95% CI", "pass^k (k=1..n)",
        "tokens", "turns", "wall s", "overhead x (tokens / turns / wall)", "run set",
    )  # fmt: skip
    blocks += [Heading(2, "Results"), Table(headers, tuple(rows))]
    blocks += _across_fixtures(ordered)
    blocks += _reasons(ordered)
    blocks += _timelines(ordered, out_dir)
    return blocks


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
            _number(stats.mean_over_fixtures(counts, k, stats.pass_hat_k))
            for k in range(1, min(n for n, _ in counts) + 1)
        ]
        rows.append(
            (*(Cell(part) for part in key), Cell(str(len(fixtures))), Cell(" / ".join(values)))
        )
    if not rows:
        return []
    headers = ("model", "drive", "kind", "fixtures", "mean pass^k (k=1..min n)")
    return [Heading(2, "Across fixtures"), Table(headers, tuple(rows))]


def _reasons(sets: list[RunSetView]) -> list:
    codes = sorted({code for item in sets for code in item.summary["failures"]})
    if not codes:
        return [Heading(2, "Failures by reason code"), Paragraph("Every trial resolved.")]
    headers = ("reason code", *(os.path.basename(item.dir) for item in sets))
    rows = tuple(
        (Cell(code), *(Cell(str(item.summary["failures"].get(code, 0))) for item in sets))
        for code in codes
    )
    return [
        Heading(2, "Failures by reason code"),
        Paragraph("Trials failing with each code (a trial counts once per code)."),
        Table(headers, rows),
    ]


def _timelines(sets: list[RunSetView], out_dir: str) -> list:
    blocks: list = [Heading(2, "Fan-out timelines")]
    blocks.append(
        Paragraph(
            "One bar per depth-1 child from its spawn to its last transcript entry; a black "
            "tick is its reply reaching the parent, an orange one its notice. Green replied, "
            "orange ended with a failure or terminal notice, red dropped (neither reached the "
            "parent). Parallelism is the sum "
            "of child durations over the makespan: about 1 for children that ran one after "
            "another."
        )
    )
    for item in sets:
        blocks.append(Heading(3, " · ".join(item.key) + f" — {os.path.basename(item.dir)}"))
        for trial in item.trials:
            verdict = "resolved" if trial.resolved else "not resolved"
            reasons = f" ({', '.join(trial.reasons)})" if trial.reasons else ""
            if trial.dir is None or trial.timeline is None:
                blocks.append(Paragraph(f"Trial {trial.index}: not run."))
                continue
            shape = trial.timeline
            if not shape.children:
                blocks.append(
                    Paragraph(
                        f"Trial {trial.index} ({trial.dir}): {verdict}{reasons}. No children."
                    )
                )
                continue
            blocks.append(
                Paragraph(
                    f"Trial {trial.index} ({trial.dir}): {verdict}{reasons}. "
                    f"{len(shape.children)} children, at most {shape.max_concurrent} at once, "
                    f"makespan {_number(_seconds(shape.makespan_ms))} s, "
                    f"parallelism {_number(shape.parallelism)}."
                )
            )
            run_dir = os.path.join(item.dir, trial.dir)
            links = tuple(
                _relative(os.path.join(run_dir, child.transcript), out_dir)
                for child in shape.children
            )
            blocks.append(Chart(shape, links))
    return blocks


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def _relative(path: str, out_dir: str) -> str:
    return os.path.relpath(path, out_dir).replace(os.sep, "/")


# --- compare (pure) ---------------------------------------------------------------------------


def verdict(summary: dict) -> str:
    """`resolved` when every scored trial resolved, `unresolved` when none did, else `mixed`."""
    n, c = summary["trials_scored"], summary["resolved"]
    if n == 0:
        return "not run"
    return "resolved" if c == n else "unresolved" if c == 0 else "mixed"


def build_compare(
    before: list[RunSetView], after: list[RunSetView], names: tuple[str, str]
) -> list:
    """Per fixture (and kind), the verdict in A and in B and the deltas B - A."""

    def by_fixture(sets):
        return {(item.key[0], item.key[3]): item for item in sorted(sets, key=lambda s: s.dir)}

    first, second = by_fixture(before), by_fixture(after)
    rows = []
    for key in sorted(set(first) | set(second)):
        a, b = first.get(key), second.get(key)
        if a is None or b is None:
            found = [verdict(item.summary) if item else "absent" for item in (a, b)]
            rows.append((Cell(key[0]), Cell(key[1]), *map(Cell, found), *(Cell(NONE),) * 5))
            continue
        flipped = verdict(a.summary) != verdict(b.summary)
        k = min(a.summary["trials_scored"], b.summary["trials_scored"])
        hat = [(s.summary["pass_hat_k"].get(str(k)) if k else None) for s in (a, b)]
        rows.append(
            (
                Cell(key[0]),
                Cell(key[1]),
                Cell(verdict(a.summary)),
                Cell(verdict(b.summary)),
                Cell("FLIP" if flipped else "same"),
                Cell(_delta(a.summary["resolve_rate"], b.summary["resolve_rate"])),
                Cell(f"k={k}: {_delta(*hat)}" if k else NONE),
                Cell(_delta(a.summary["tokens"]["median"], b.summary["tokens"]["median"])),
                Cell(_delta(a.summary["turns"]["median"], b.summary["turns"]["median"])),
            )
        )
    headers = (
        "fixture", "kind", f"verdict A ({names[0]})", f"verdict B ({names[1]})", "flip",
        "Δ rate", "Δ pass^k", "Δ median tokens", "Δ median turns",
    )  # fmt: skip
    return [
        Heading(1, "swarm-fanout comparison"),
        Paragraph(f"A = {names[0]}, B = {names[1]}; deltas are B - A."),
        Table(headers, tuple(rows)),
    ]


def _delta(a, b) -> str:
    if a is None or b is None:
        return NONE
    value = b - a
    sign = "+" if value > 0 else ""
    return f"{sign}{_number(float(value))}"


# --- rendering (pure) -------------------------------------------------------------------------


def render_markdown(blocks: list) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append("#" * block.level + " " + _md(block.text))
        elif isinstance(block, Paragraph):
            parts.append(_md(block.text))
        elif isinstance(block, Table):
            lines = ["| " + " | ".join(_md(h) for h in block.headers) + " |"]
            lines.append("|" + " --- |" * len(block.headers))
            for row in block.rows:
                lines.append("| " + " | ".join(_md_cell(cell) for cell in row) + " |")
            parts.append("\n".join(lines))
        elif isinstance(block, Chart):
            parts.append(_md_chart(block))
    return "\n\n".join(parts) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_cell(cell: Cell) -> str:
    return f"[{_md(cell.text)}]({cell.href})" if cell.href else _md(cell.text)


def _md_chart(chart: Chart) -> str:
    """The timeline as a table in markdown, seconds from the first spawn (the SVG is in
    report.html)."""
    origin = _origin(chart.timeline)
    lines = [
        "| child | name | status | spawn s | first response s | reply s | end s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for child, link in zip(chart.timeline.children, chart.links, strict=True):
        cells = (
            child.spawn_ms,
            child.first_response_ms,
            child.reply_ms or child.notice_ms,
            child.end_ms,
        )
        times = " | ".join(_number(_offset(value, origin)) for value in cells)
        lines.append(
            f"| [{child.child_id}]({link}) | {_md(child.name)} | {child.status} | {times} |"
        )
    return "\n".join(lines)


def _origin(shape: timeline.Timeline) -> int | None:
    spawns = [child.spawn_ms for child in shape.children if child.spawn_ms is not None]
    return min(spawns) if spawns else None


def _offset(value: int | None, origin: int | None) -> float | None:
    if value is None or origin is None:
        return None
    return (value - origin) / 1000


def render_html(blocks: list, title: str) -> str:
    body = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{escape(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{escape(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{escape(h)}</th>" for h in block.headers)
            rows = "".join(
                "<tr>" + "".join(f"<td>{_html_cell(cell)}</td>" for cell in row) + "</tr>"
                for row in block.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Chart):
            body.append(render_svg(block))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _html_cell(cell: Cell) -> str:
    if cell.href:
        return f'<a href="{escape(cell.href)}">{escape(cell.text)}</a>'
    return escape(cell.text)


def render_svg(chart: Chart) -> str:
    """Bars from spawn to end, coloured by status; a tick at the reply; each bar links to the
    child's transcript and has a title with its times."""
    shape = chart.timeline
    origin = _origin(shape)
    ends = [
        value
        for child in shape.children
        for value in (child.end_ms, child.reply_ms, child.notice_ms)
        if value is not None
    ]
    span = max(1, (max(ends) - origin) if ends and origin is not None else 1)
    scale = (SVG_WIDTH - LABEL_WIDTH - 10) / span
    height = ROW_HEIGHT * (len(shape.children) + 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{height}" '
        f'viewBox="0 0 {SVG_WIDTH} {height}" role="img" aria-label="fan-out timeline">'
    ]
    for row, (child, link) in enumerate(zip(shape.children, chart.links, strict=True)):
        y = row * ROW_HEIGHT + 4
        colour = COLOURS[child.status]
        parts.append(f'<text x="0" y="{y + 11}" font-size="11">{escape(child.name[:22])}</text>')
        if child.spawn_ms is None or origin is None:
            continue
        x = LABEL_WIDTH + (child.spawn_ms - origin) * scale
        end = child.end_ms if child.end_ms is not None else child.spawn_ms
        width = max(1.0, (end - child.spawn_ms) * scale)
        title = (
            f"{child.child_id} {child.name}: {child.status}"
            f"{' (deleted)' if child.deleted else ''}; spawn "
            f"{_number(_offset(child.spawn_ms, origin))} s, end {_number(_offset(end, origin))} s"
            + (f", reply {_number(_offset(child.reply_ms, origin))} s" if child.reply_ms else "")
        )
        parts.append(
            f'<a href="{escape(link)}"><rect x="{x:.1f}" y="{y}" width="{width:.1f}" '
            f'height="{ROW_HEIGHT - 8}" fill="{colour}"><title>{escape(title)}</title></rect></a>'
        )
        for at, stroke in ((child.reply_ms, "#000"), (child.notice_ms, COLOURS["failed"])):
            if at is not None:
                tick = LABEL_WIDTH + (at - origin) * scale
                parts.append(
                    f'<line x1="{tick:.1f}" y1="{y - 2}" x2="{tick:.1f}" '
                    f'y2="{y + ROW_HEIGHT - 6}" stroke="{stroke}" stroke-width="2"/>'
                )
    axis_y = len(shape.children) * ROW_HEIGHT + 14
    parts.append(
        f'<text x="{LABEL_WIDTH}" y="{axis_y}" font-size="10">0 s</text>'
        # The span's label ends where the time axis does.
        f'<text x="{SVG_WIDTH - 10}" y="{axis_y}" font-size="10" text-anchor="end">'
        f"{_number(span / 1000)} s</text></svg>"
    )
    return "".join(parts)


# --- the command line -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="report.py",
        description="Write report.md and a self-contained report.html for run sets, or with "
        "--compare A B a comparison (compare.md, compare.html) of two run sets or two dirs of "
        "run sets. Prints the written paths as JSON.",
    )
    parser.add_argument("run_sets", nargs="*", help="run set dirs (runs/<run-id>)")
    parser.add_argument(
        "--compare", nargs=2, metavar=("A", "B"), help="compare two run sets, or two dirs of them"
    )
    parser.add_argument(
        "--out", help="dir to write into (default the first run set, or A for --compare)"
    )
    args = parser.parse_args(argv)
    if bool(args.compare) == bool(args.run_sets):
        parser.error("give run set dirs, or --compare A B")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.compare:
            sides = [[load_run_set(p) for p in run_sets_under(side)] for side in args.compare]
            out = args.out or args.compare[0]
            names = tuple(os.path.basename(os.path.normpath(side)) for side in args.compare)
            blocks = build_compare(sides[0], sides[1], names)
            stem = "compare"
        else:
            sets = [load_run_set(path) for path in args.run_sets]
            out = args.out or args.run_sets[0]
            blocks = build_report(sets, os.path.realpath(out))
            stem = "report"
    except (trials.RunSetError, OSError) as error:
        print_note(f"report.py: {error}")
        return 2
    os.makedirs(out, exist_ok=True)
    written = {}
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


if __name__ == "__main__":
    sys.exit(main())
