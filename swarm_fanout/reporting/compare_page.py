"""The comparison of two sides of run sets as blocks (pure), and the evidence pages of the
trials that flipped, written beside it.

It names the model and drive of both sides and says per fixture whether the difference in
resolve rate is real (reporting/difference.py), then shows both verdicts, both rates and
the deltas, flips marked, the trials that flipped and the reason codes that changed.
"""

from __future__ import annotations

import os

from swarm_fanout.reporting import difference, evidence_page
from swarm_fanout.reporting.render import (
    NONE,
    Cell,
    Heading,
    Paragraph,
    Table,
    dollars,
    injected_text,
    percent,
    points,
)
from swarm_fanout.reporting.render import number as fmt
from swarm_fanout.reporting.run_set_views import RunSetView, TrialView, evidence_path, relative

# A verdict's rank, so that a flip has a direction.
VERDICT_RANK = {"unresolved": 0, "mixed": 1, "resolved": 2}


def overall_result(summary: dict) -> str:
    """`resolved` when every scored trial resolved, `unresolved` when none did, else `mixed`."""
    n, c = summary["trials_scored"], summary["resolved"]
    if n == 0:
        return "not run"
    return "resolved" if c == n else "unresolved" if c == 0 else "mixed"


def _sides(
    before: list[RunSetView],
    after: list[RunSetView],
    names: tuple[str, str],
    out_dir: str | None,
    flipped: set[str] = frozenset(),
) -> Table:
    """What each side is: its models and drives, its run sets and trials, their reports, and
    the failures injected, when a side had any. `flipped`: the dirs of the run sets whose
    flipped trials' pages this comparison writes."""
    injected = any(item.injected for item in (*before, *after))
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
                _reports(sets, out_dir, flipped),
                *[_injections(sets)] * injected,
            )
        )
    headers = ("side", "name", "model", "drive", "run sets", "trials scored", "report")
    return Table(headers + ("failure injected",) * injected, tuple(rows))


def _injections(sets: list[RunSetView]) -> Cell:
    """What --inject-failure asked of a side's run sets, or none."""
    asked = sorted({text for item in sets if (text := injected_text(item.injected))})
    return Cell("; ".join(asked), tone="warn") if asked else Cell("none")


def _reports(
    sets: list[RunSetView], out_dir: str | None, flipped: set[str] = frozenset()
) -> tuple[Cell, ...]:
    """A link to each run set's report, or the command that writes it; and, for a set
    without one, a link to the pages of its flipped trials this comparison wrote."""
    cells: list[Cell] = []
    for item in sets:
        if cells:
            cells.append(Cell(", "))
        if item.report and out_dir is not None:
            cells.append(Cell(f"{item.name} report", relative(item.report, out_dir)))
            continue
        command = f"uv run --locked python report.py {item.dir}"
        cells.append(Cell(f"{item.name} has no report.html of its own ({command})", tone="muted"))
        if item.dir in flipped and out_dir is not None:
            cells += [Cell("; its flipped trials' evidence pages: "), Cell("below", f"#{FLIPPED}")]
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
    rows, tones, spent = [], [], []
    for key in sorted(set(first) | set(second)):
        a, b = first.get(key), second.get(key)
        sides = [Cell(" → ".join(f"{s.key[1]} · {s.key[2]}" if s else "absent" for s in (a, b)))]
        sides *= mixed
        if a is None or b is None:
            found = " → ".join(overall_result(s.summary) if s else "absent" for s in (a, b))
            rows.append((Cell(key[0]), Cell(key[1]), *sides, Cell(found), *(Cell(NONE),) * 3))
            tones.append("muted")
            continue
        flip = _flip(overall_result(a.summary), overall_result(b.summary), injected_on(a, b))
        k = min(a.summary["trials_scored"], b.summary["trials_scored"])
        hat = [(s.summary["pass_hat_k"].get(str(k)) if k else None) for s in (a, b)]
        rows.append(
            (
                Cell(key[0]),
                Cell(key[1]),
                *sides,
                Cell(f"{overall_result(a.summary)} → {overall_result(b.summary)}"),
                flip,
                _rates(*(s.summary["resolve_rate"] for s in (a, b))),
                _rates(*hat, label=f"k={k}: " if k else ""),
            )
        )
        tones.append(flip.tone)
        spent.append(
            (
                Cell(key[0]),
                Cell(key[1]),
                _changed(*(s.summary["tokens"]["median"] for s in (a, b))),
                _changed(*(s.summary["turns"]["median"] for s in (a, b))),
                _cost_change(a, b),
            )
        )
    headers = (
        "fixture", "kind", *("model · drive, A → B",) * mixed, "verdict A → B", "flip",
        "rate A → B (Δ)", "pass^k A → B (Δ)",
    )  # fmt: skip
    return [
        Heading(1, "swarm-fanout comparison"),
        _sides(before, after, names, out_dir, _flipped_sets(first, second)),
        *_tests(first, second),
        Heading(2, "Verdicts and deltas"),
        Paragraph(
            "Per fixture and kind: the verdict on each side (resolved: every scored trial "
            "resolved, unresolved: none, mixed), a flip marked worse or better (and said to "
            "come with injected failures when a side had them), and both rates beside their "
            "delta B - A in percentage points (pp); pass^k at the largest k both sides have."
        ),
        Table(headers, tuple(rows), tuple(tones)),
        *_spent(spent),
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
        return {(item.key[0], item.task): item for item in sorted(sets, key=lambda s: s.dir)}

    return by_fixture(before), by_fixture(after)


COMPARE_EVIDENCE = "compare-evidence"  # beside compare.html: the flipped trials' pages
FLIPPED = "flipped"  # the anchor of the trials that flipped


def _flipped_sets(first: dict, second: dict) -> set[str]:
    """The dirs of the run sets with a trial that flipped: their pages are written."""
    return {item.dir for _, a, _, b, _ in flipped_trials(first, second) for item in (a, b)}


def _flipped(first: dict, second: dict, out_dir: str | None) -> list:
    """A row per trial that resolved on one side and not on the other, each side's outcome
    linked to its evidence page, with its reason codes."""
    found = flipped_trials(first, second)
    blocks: list = [Heading(2, "Trials that flipped", FLIPPED)]
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
                page = relative(path, out_dir)
            status = trial.status_cell
            cells += [
                Cell(status.text, page, status.tone),
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
        injected = injected_on(a, b)
        if injected:
            # Injected failures are a condition of the run, not a property of the model.
            tone = "warn" if tone else None
            sentence += (
                f" {injected} ran with failures injected (--inject-failure): the difference "
                "is partly the injection's, not the model's alone."
            )
        lines.append(Paragraph((Cell(f"{key[0]} · {key[1]}: "), Cell(sentence, tone=tone))))
        if isinstance(found, difference.NotTested):
            continue
        rows.append(
            (
                Cell(key[0]),
                Cell(key[1]),
                Cell(f"{found.a_resolved}/{found.a_trials}"),
                Cell(f"{found.b_resolved}/{found.b_trials}"),
                Cell(points(0, found.difference), tone=tone, numeric=True),
                Cell(difference.odds_ratio_text(found.odds_ratio_ci95), tone=tone),
                Cell(difference.p_text(found.p_value).removeprefix("p = "), tone=tone),
                Cell(difference.needed_text(found)),
            )
        )
        tones.append(tone)
    if not lines:
        return []
    blocks: list = [Heading(2, "Is the difference real?"), *lines]
    if rows:
        headers = (
            "fixture", "kind", "A resolved", "B resolved", "Δ rate", "odds ratio B:A, 95% CI",
            "p (two-sided)", "trials a side for 80% power",
        )  # fmt: skip
        blocks.append(Table(headers, tuple(rows), tuple(tones)))
    blocks.append(
        Paragraph(
            f"Errored trials are left out. {difference.UNPAIRED} Fisher's exact test "
            "compares them (two-sided: twice its smaller tail), and a difference is called "
            "real below p = 0.05. The 95% interval is of the odds ratio, B's odds of "
            "resolving over A's, and is that same test inverted: the odds ratios it would not "
            "reject, so the interval leaves out 1 exactly when p < 0.05. Trials a side for "
            "80% power: how many, those run counted, would give that test an 80% chance of "
            "calling a difference of the size seen real. pass^k is "
            "the chance that k trials all resolve, p^k, which rises with the resolve rate p "
            "alone: it differs between A and B exactly when the rate does, so this test is "
            "the test for pass^k at every k too."
        )
    )
    return blocks


def _spent(rows: list) -> list:
    """What each side spent, per fixture and kind both sides ran: medians of A and B."""
    if not rows:
        return []
    headers = ("fixture", "kind", "tokens A → B (Δ)", "turns A → B (Δ)", "cost A → B (Δ)")
    return [
        Heading(2, "Tokens, turns and cost"),
        Paragraph(
            "Medians over scored trials, reported, never judged: cost in dollars, as the "
            "product priced each call."
        ),
        Table(headers, tuple(rows)),
    ]


def injected_on(a: RunSetView, b: RunSetView) -> str:
    """Which side ran with --inject-failure: `A`, `B`, `A and B`, or ""."""
    return " and ".join(side for side, item in (("A", a), ("B", b)) if item.injected)


def _flip(a: str, b: str, injected: str = "") -> Cell:
    """A change of verdict and its direction; one that comes with failures injected on a side
    says so, and is no verdict on the model (warn, not red or green)."""
    if a == b:
        return Cell("same")
    if a in VERDICT_RANK and b in VERDICT_RANK:
        worse = VERDICT_RANK[b] < VERDICT_RANK[a]
        text = "FLIP, worse" if worse else "FLIP, better"
        if injected:
            return Cell(f"{text} ({injected}: failure injected)", tone="warn")
        return Cell(text, tone="bad" if worse else "good")
    return Cell("FLIP", tone="warn")


def _rates(a: float | None, b: float | None, label: str = "") -> Cell:
    """`80% → 100% (+20 pp)`: green when B is higher, red when lower."""
    tone = None
    if a is not None and b is not None and a != b:
        tone = "good" if b > a else "bad"
    return Cell(f"{label}{percent(a)} → {percent(b)} ({points(a, b)})", tone=tone, numeric=True)


def _changed(a, b) -> Cell:
    """`A → B (B - A)`, for numbers reported, never judged."""
    return Cell(f"{fmt(a)} → {fmt(b)} ({_delta(a, b)})", numeric=True)


def _delta(a, b) -> str:
    if a is None or b is None:
        return NONE
    value = b - a
    sign = "+" if value > 0 else ""
    return f"{sign}{fmt(float(value))}"


def write_flipped_pages(
    sides: list[list[RunSetView]], out_dir: str, into: str | None = None
) -> list[str]:
    """The evidence page of each trial that flipped, on both sides, beside compare.html:
    linked as read from `out_dir`, written under `into` (default `out_dir`)."""
    pages = []
    back_to = os.path.join(out_dir, "compare.html")
    for _, *pairs in flipped_trials(*compare_sides(*sides)):
        for item, trial in zip(pairs[::2], pairs[1::2], strict=True):
            page = evidence_path(out_dir, item.dir, trial.dir, COMPARE_EVIDENCE)
            back = Cell("← the comparison", relative(back_to, os.path.dirname(page)))
            written = evidence_path(into or out_dir, item.dir, trial.dir, COMPARE_EVIDENCE)
            evidence_page.write_page(os.path.join(item.dir, trial.dir), written, back, at=page)
            pages.append(page)
    return pages
