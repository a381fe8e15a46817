"""The blocks a page is made of, and their rendering to Markdown, HTML and SVG.

report.py (the run-set report, `--compare`) and reporting/evidence_page.py (one run's evidence)
build their pages as lists of these blocks, and nothing else writes markup: every value
on a page goes through `html.escape` (quotes too) here, so a transcript holding
`<script>` or `</details>` shows as text. Pure: the same blocks give the same bytes. No
scripts, no network: plain HTML, CSS and inline SVG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from swarm_fanout.reporting import timeline

NONE = "n/a"
SHORT = 32  # characters of a table cell kept on one line
LONG = 36  # characters of a table cell past which it keeps a reading width when squeezed
# How a value reads at a glance; a tone is a CSS class of the page.
TONES = ("good", "bad", "warn", "error", "muted", "mark")
COLOURS = {"replied": "#3a8a3a", "failed": "#d9822b", "dropped": "#c23030"}
STATUS_WORDS = {"replied": "replied", "failed": "notice, no reply", "dropped": "dropped"}
# A child the verdict names in a reason: its bar is drawn so, whatever reached the parent.
FLAGGED_COLOUR, FLAGGED_WORD = "#8e24aa", "failed by the verdict"
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222;line-height:1.4}"
    "h1{font-size:1.5em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}"
    "h3{font-size:1.05em;margin-top:1.4em}"
    # Wide tables scroll instead of widening the page.
    "table{border-collapse:collapse;margin:.6em 0;display:block;overflow-x:auto;max-width:100%}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    "td.nw{white-space:nowrap}td.long{min-width:10em}"
    "code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:85%}"
    "pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:6px 8px;margin:.3em 0;"
    "max-height:24em;overflow:auto;white-space:pre-wrap;overflow-wrap:anywhere}"
    ".good{color:#1d6b1d;background:#e5f4e5}.bad{color:#8f1d1d;background:#fbe1e1;"
    "font-weight:600}.warn{color:#7a4a00;background:#fff0d6}.error{color:#4b2a86;"
    "background:#ece5f8;font-weight:600}.muted{color:#777}"
    "tr.row-bad td{background:#fdf0f0}tr.row-error td{background:#f5f1fb}"
    "tr.row-warn td{background:#fff8ea}tr.row-muted td{color:#777}"
    "span.good,span.bad,span.warn,span.error{padding:0 4px;border-radius:3px}"
    "details{border:1px solid #ddd;border-radius:4px;margin:.5em 0;padding:0 .6em}"
    "details[open]{padding-bottom:.5em}summary{cursor:pointer;padding:.35em 0}"
    "div.box{border-left:3px solid #ccc;margin:.5em 0;padding:.1em .6em}"
    "div.box.good{border-color:#3a8a3a;background:none;color:inherit}"
    "div.box.bad{border-color:#c23030;background:none;color:inherit;font-weight:inherit}"
    "div.box.warn{border-color:#d9822b;background:none;color:inherit}"
    "div.box p{margin:.2em 0}"
    "div.chart{overflow-x:auto}svg.timeline{display:block;min-width:600px;margin:.4em 0}"
    "p.muted{font-size:90%}"
    # A number picked out of a quoted text: the one the reason is about.
    ".mark{background:#ffe27a;font-weight:700;padding:0 2px;border-radius:2px}"
    "td.quote{min-width:9em}"
    # A table of WIDE columns or more gives way before it is cut off: its short values may
    # wrap at a space, its texts anywhere.
    "table.wide td.nw{white-space:normal}table.wide td.long,table.wide td.quote"
    "{overflow-wrap:anywhere}"
    # A narrow screen: a table of STACKED columns or more stacks, a block per row and a
    # line per cell headed by its column (an empty cell left out): no column is cut off.
    "@media (max-width:1000px){body{margin:1em}"
    "table.stack,table.stack tbody,table.stack tr{display:block}"
    "table.stack td{display:flow-root}"
    "table.stack{border:0;overflow:visible}table.stack thead{display:none}"
    "table.stack tr{border:1px solid #ccc;margin:.5em 0}"
    "table.stack td{border:0;border-top:1px solid #eee;min-width:0;text-align:left;"
    "padding-left:13em}"
    "table.stack td:empty{display:none}table.stack td:first-child{border-top:0}"
    "table.stack td::before{content:attr(data-label);float:left;width:12em;"
    "margin-left:-12.5em;font-weight:600;color:#555}}"
)
WIDE = 5  # columns from which a table's cells wrap to fit
STACKED = 7  # columns from which a table stacks on a narrow screen


# --- blocks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """A value: its text (a line break in it breaks the line in HTML), a link, and a tone."""

    text: str
    href: str | None = None
    tone: str | None = None
    numeric: bool = False  # right-aligned in a table
    wrap: bool = False  # may wrap in a table, however short: a list like `1 / 0.5 / 0`


# A line of text: plain, or cells in a row (links and tones inline).
Inline = str | tuple[Cell, ...]


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    anchor: str | None = None


@dataclass(frozen=True)
class Paragraph:
    text: Inline
    tone: str | None = None


# A table cell: one value, or cells run together (a quoted text with a number marked).
TableCell = Cell | tuple[Cell, ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]  # none: a table of names and values
    rows: tuple[tuple[TableCell, ...], ...]
    tones: tuple[str | None, ...] = ()  # per row: tints the whole row


@dataclass(frozen=True)
class Code:
    """Preformatted text: a cell's code, its output, a message."""

    text: str


@dataclass(frozen=True)
class Fold:
    """A `<details>`: its summary line shown, its blocks folded away until opened."""

    summary: Inline
    blocks: tuple
    anchor: str | None = None
    open: bool = False  # shown unfolded: what a reader came to see


@dataclass(frozen=True)
class Box:
    """Blocks that belong together (one transcript entry), with a tone and an anchor."""

    blocks: tuple
    anchor: str | None = None
    tone: str | None = None


@dataclass(frozen=True)
class Chart:
    """One run's fan-out: a bar per child from spawn to end, a mark at its reply."""

    timeline: timeline.Timeline
    links: tuple[str | None, ...]  # per child, where its bar links to
    flags: dict[str, tuple[str, ...]] | None = None  # child id -> the verdict's codes naming it


def number(value, digits: int = 2) -> str:
    """With thousands separators; floats to `digits` places unless whole."""
    if value is None:
        return NONE
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.{digits}f}"
    return f"{int(value):,}"


def percent(value: float | None) -> str:
    """A rate as a whole percent, as stderr gives it: `80%`; `<1%` and `>99%` for what would
    round to 0 or 100 without being it."""
    if value is None:
        return NONE
    if 0 < value < 0.005:
        return "<1%"
    if 0.995 <= value < 1:
        return ">99%"
    return f"{value:.0%}"


def percent_interval(low: float, high: float) -> str:
    """`38%-96%`, as stderr gives an interval."""
    return f"{percent(low)}-{percent(high)}"


def points(a: float | None, b: float | None) -> str:
    """b - a of two rates, in percentage points: `-20 pp`."""
    if a is None or b is None:
        return NONE
    change = round((b - a) * 100)
    return f"{'+' if change > 0 else ''}{change} pp"


def injected_text(injections) -> str:
    """What --inject-failure asked for: `worker-events-05 (12 calls)`."""
    return ", ".join(f"{worker} ({calls} call{'s' * (calls != 1)})" for worker, calls in injections)


def dollars(value: float | None, model: str | None = None) -> str:
    """A cost in dollars. None or zero says why there is none, as `$0` would read as free:
    the simulated and scripted models, and a provider whose catalog has no price, say no
    cost."""
    if not value:
        double = (model or "").split("/", 1)[0]
        return double if double in ("simulated", "scripted") else "no cost reported"
    return f"${value:,.4f}" if value < 0.01 else f"${value:,.2f}"


def plain(text: Inline) -> str:
    return text if isinstance(text, str) else "".join(cell.text for cell in text)


# --- Markdown ---------------------------------------------------------------------------------


def render_markdown(blocks: list) -> str:
    return "\n\n".join(part for part in map(_md_block, blocks) if part) + "\n"


def _md_block(block) -> str:
    if isinstance(block, Heading):
        return "#" * block.level + " " + _md(block.text)
    if isinstance(block, Paragraph):
        return _md_inline(block.text)
    if isinstance(block, Table):
        lines = ["| " + " | ".join(_md(h) for h in block.headers) + " |"]
        lines.append("|" + " --- |" * len(block.headers))
        for row in block.rows:
            lines.append("| " + " | ".join(_md_cell(cell) for cell in row) + " |")
        return "\n".join(lines)
    if isinstance(block, Code):
        fence = "`" * max(3, _longest_backtick_run(block.text) + 1)
        return f"{fence}\n{block.text}\n{fence}"
    if isinstance(block, Fold):
        return "\n\n".join([f"**{_md_inline(block.summary)}**", *map(_md_block, block.blocks)])
    if isinstance(block, Box):
        return "\n\n".join(map(_md_block, block.blocks))
    if isinstance(block, Chart):
        return _md_chart(block)
    raise TypeError(f"not a block: {block!r}")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_cell(cell: TableCell) -> str:
    if isinstance(cell, tuple):
        return "".join(map(_md_cell, cell))
    text = _md(cell.text)
    if cell.tone in ("bad", "mark"):
        text = f"**{text}**"
    return f"[{text}]({cell.href})" if cell.href else text


def _md_inline(text: Inline) -> str:
    return _md(text) if isinstance(text, str) else "".join(map(_md_cell, text))


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


def _md_chart(chart: Chart) -> str:
    """The timeline as a table, seconds from the first spawn (the SVG is in the HTML)."""
    origin = origin_of(chart.timeline)
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
        times = " | ".join(number(offset_s(value, origin)) for value in cells)
        label = f"[{child.child_id}]({link})" if link else child.child_id
        codes = (chart.flags or {}).get(child.child_id)
        status = f"{child.status}; {FLAGGED_WORD}: {', '.join(codes)}" if codes else child.status
        lines.append(f"| {label} | {_md(child.name)} | {status} | {times} |")
    return "\n".join(lines)


def origin_of(shape: timeline.Timeline) -> int | None:
    spawns = [child.spawn_ms for child in shape.children if child.spawn_ms is not None]
    return min(spawns) if spawns else None


def offset_s(value: int | None, origin: int | None) -> float | None:
    if value is None or origin is None:
        return None
    return (value - origin) / 1000


# --- HTML -------------------------------------------------------------------------------------


def render_html(blocks: list, title: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(map(_html_block, blocks))
        + "\n</body></html>\n"
    )


def _html_block(block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}{_id(block.anchor)}>{escape(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p{_class(block.tone)}>{_html_inline(block.text)}</p>"
    if isinstance(block, Table):
        head = "".join(f"<th>{escape(h)}</th>" for h in block.headers)
        head = f"<thead><tr>{head}</tr></thead>" if block.headers else ""
        tones = block.tones or (None,) * len(block.rows)
        labels = block.headers or (None,) * max(map(len, block.rows), default=0)
        rows = "".join(
            f"<tr{_class(tone and 'row-' + tone)}>" + "".join(map(_html_td, row, labels)) + "</tr>"
            for row, tone in zip(block.rows, tones, strict=True)
        )
        kinds = [
            kind for kind, n in (("wide", WIDE), ("stack", STACKED)) if len(block.headers) >= n
        ]
        kind = f' class="{" ".join(kinds)}"' if kinds else ""
        return f"<table{kind}>{head}<tbody>{rows}</tbody></table>"
    if isinstance(block, Code):
        return f"<pre>{escape(block.text)}</pre>"
    if isinstance(block, Fold):
        inner = "\n".join(map(_html_block, block.blocks))
        return (
            f"<details{_id(block.anchor)}{' open' * block.open}>"
            f"<summary>{_html_inline(block.summary)}</summary>\n"
            f"{inner}\n</details>"
        )
    if isinstance(block, Box):
        inner = "".join(map(_html_block, block.blocks))
        tone = f" {block.tone}" if block.tone else ""
        return f'<div class="box{tone}"{_id(block.anchor)}>{inner}</div>'
    if isinstance(block, Chart):
        return f'<div class="chart">{render_svg(block)}</div>'
    raise TypeError(f"not a block: {block!r}")


def _id(anchor: str | None) -> str:
    return f' id="{escape(anchor)}"' if anchor else ""


def _class(tone: str | None) -> str:
    return f' class="{escape(tone)}"' if tone else ""


def _html_td(cell: TableCell, label: str | None = None) -> str:
    """A cell; `label`, its column's header, heads it when the table stacks."""
    data = f' data-label="{escape(label)}"' if label else ""
    if isinstance(cell, tuple):
        return f'<td class="quote"{data}>{"".join(map(_html_cell, cell))}</td>'
    # A short value stays on one line; a sentence wraps.
    longest = max(map(len, cell.text.split("\n")))
    width = "nw" if longest <= SHORT and not cell.wrap else ""
    width = "long" if longest > LONG else width
    classes = " ".join(filter(None, ("n" if cell.numeric else "", width, cell.tone or "")))
    attribute = f' class="{escape(classes)}"' if classes else ""
    return f"<td{attribute}{data}>{_html_cell(cell, span=False)}</td>"


def _html_cell(cell: Cell, span: bool = True) -> str:
    text = escape(cell.text).replace("\n", "<br>")
    if cell.href:
        text = f'<a href="{escape(cell.href)}">{text}</a>'
    return f"<span{_class(cell.tone)}>{text}</span>" if span and cell.tone else text


def _html_inline(text: Inline) -> str:
    return escape(text) if isinstance(text, str) else "".join(map(_html_cell, text))


# --- the timeline as SVG ----------------------------------------------------------------------

# The picture fills the page's width: positions along it are percentages, the label
# column the first LABEL_PCT of it and the time axis the next PLOT_PCT; heights are pixels.
LABEL_PCT, PLOT_PCT = 16.0, 82.0
KEY_HEIGHT, ROW_HEIGHT, AXIS_HEIGHT = 46, 20, 38
BAR = ROW_HEIGHT - 8


def ticks(span_s: float, most: int = 10) -> tuple[float, ...]:
    """Round steps (1, 2 or 5 times a power of ten) from 0 up to `span_s`: at most
    `most` of them after 0."""
    power = 10 ** math.floor(math.log10(span_s / most))
    step = next(m * power for m in (1, 2, 5, 10) if m * power * most >= span_s)
    count = int(span_s / step + 1e-9)
    return tuple(round(i * step, 12) for i in range(count + 1))


def _tick_label(value: float, step: float) -> str:
    places = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{value:,.{places}f}"


def render_svg(chart: Chart) -> str:
    """A colour key, then a bar per child from spawn to end coloured by how it ended, a
    tick at its reply or notice, and a time axis with round ticks. Each bar links where
    `chart.links` says and has a title with its times."""
    shape = chart.timeline
    origin = origin_of(shape)
    ends = [
        value
        for child in shape.children
        for value in (child.end_ms, child.reply_ms, child.notice_ms)
        if value is not None
    ]
    span_ms = max(1, (max(ends) - origin) if ends and origin is not None else 1)
    rows_bottom = KEY_HEIGHT + ROW_HEIGHT * len(shape.children)
    height = rows_bottom + AXIS_HEIGHT

    def x(at_ms: int) -> str:
        return f"{LABEL_PCT + (at_ms - origin) / span_ms * PLOT_PCT:.3f}%"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="100%" '
        f'height="{height}" role="img" aria-label="fan-out timeline" font-size="11">',
        _key(any(child.child_id in (chart.flags or {}) for child in shape.children)),
    ]
    marks = ticks(span_ms / 1000)
    step = marks[1] if len(marks) > 1 else 1.0
    for mark in marks:
        at = f"{LABEL_PCT + mark * 1000 / span_ms * PLOT_PCT:.3f}%"
        parts.append(
            f'<line x1="{at}" y1="{KEY_HEIGHT}" x2="{at}" y2="{rows_bottom + 4}" '
            f'stroke="#ddd"/><text x="{at}" y="{rows_bottom + 16}" text-anchor="middle" '
            f'fill="#444">{_tick_label(mark, step)}</text>'
        )
    end_pct = f"{LABEL_PCT + PLOT_PCT}%"
    parts.append(
        f'<line x1="{LABEL_PCT}%" y1="{rows_bottom}" x2="{end_pct}" y2="{rows_bottom}" '
        f'stroke="#888"/><text x="{end_pct}" y="{height - 4}" text-anchor="end" fill="#444">'
        "seconds since the first spawn</text>"
    )
    for row, (child, link) in enumerate(zip(shape.children, chart.links, strict=True)):
        y = KEY_HEIGHT + row * ROW_HEIGHT + 4
        label = child.name[:24] + (" (deleted)" if child.deleted else "")
        parts.append(f'<text x="0" y="{y + 10}">{escape(label)}</text>')
        if child.spawn_ms is None or origin is None:
            continue
        end = child.end_ms if child.end_ms is not None else child.spawn_ms
        width = max(0.15, (end - child.spawn_ms) / span_ms * PLOT_PCT)
        codes = (chart.flags or {}).get(child.child_id)
        flagged = f"; {FLAGGED_WORD}: {', '.join(codes)}" if codes else ""
        title = (
            f"{child.child_id} {child.name}: {STATUS_WORDS[child.status]}{flagged}"
            f"{' (deleted)' if child.deleted else ''}; spawn "
            f"{number(offset_s(child.spawn_ms, origin))} s, end "
            f"{number(offset_s(end, origin))} s"
            + (f", reply {number(offset_s(child.reply_ms, origin))} s" if child.reply_ms else "")
            + (f", notice {number(offset_s(child.notice_ms, origin))} s" if child.notice_ms else "")
        )
        bar = (
            f'<rect class="bar" x="{x(child.spawn_ms)}" y="{y}" width="{width:.3f}%" '
            f'height="{BAR}" fill="{FLAGGED_COLOUR if codes else COLOURS[child.status]}">'
            f"<title>{escape(title)}</title></rect>"
        )
        parts.append(f'<a href="{escape(link)}">{bar}</a>' if link else bar)
        for at, stroke in ((child.reply_ms, "#000"), (child.notice_ms, COLOURS["failed"])):
            if at is not None:
                parts.append(
                    f'<line x1="{x(at)}" y1="{y - 3}" x2="{x(at)}" y2="{y + BAR + 3}" '
                    f'stroke="{stroke}" stroke-width="2"/>'
                )
    parts.append("</svg>")
    return "".join(parts)


def _key(flagged: bool = False) -> str:
    """The colour key, in the picture: a swatch per status (and for a child the verdict
    failed, when the picture has one), a tick per mark."""
    parts = []
    left = 0
    swatches = [(STATUS_WORDS[status], colour) for status, colour in COLOURS.items()]
    swatches += [(FLAGGED_WORD, FLAGGED_COLOUR)] * flagged
    for word, colour in swatches:
        parts.append(
            f'<rect x="{left}" y="6" width="12" height="12" fill="{colour}"/>'
            f'<text x="{left + 16}" y="16">{escape(word)}</text>'
        )
        left += 28 + 7 * len(word)
    # The marks on a line of their own, so that the key fits a narrow screen.
    left = 0
    for word, stroke in (("reply reached the parent", "#000"), ("notice", COLOURS["failed"])):
        parts.append(
            f'<line x1="{left + 5}" y1="24" x2="{left + 5}" y2="40" stroke="{stroke}" '
            f'stroke-width="2"/><text x="{left + 14}" y="36">{escape(word)}</text>'
        )
        left += 26 + 7 * len(word)
    return "".join(parts)
