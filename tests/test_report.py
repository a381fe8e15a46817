"""report.py on simulated run sets: the tables, failing trials marked and linked to their
evidence pages, thousands separators, the timelines, well-formed self-contained HTML with
working relative links, and --compare naming both sides; reporting/render.py's escaping, numbers and
timeline picture."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
from html.parser import HTMLParser
from typing import ClassVar

from swarm_fanout import report
from swarm_fanout.evidence import runsets
from swarm_fanout.reporting import render, report_page
from swarm_fanout.reporting.compare_page import build_compare
from swarm_fanout.reporting.render import (
    Cell,
    Chart,
    Paragraph,
    Table,
    dollars,
    number,
    render_html,
    render_markdown,
    render_svg,
    ticks,
)
from swarm_fanout.reporting.report_page import build_report
from swarm_fanout.reporting.run_set_views import RunSetView, TrialView, set_injections
from swarm_fanout.reporting.summary import TrialRecord, summarize
from swarm_fanout.reporting.timeline import ChildSpan, Timeline
from tests import runner_server, temp_dir
from tests.runner_case import SIMULATED, two_shard_fixture
from tests.test_fixtures import tree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOID = {"meta", "br", "hr", "img", "input", "link"}


class WellFormed(HTMLParser):
    """Every element closed in order; collects hrefs, tag names and element ids, each link as
    its text and href, and every table row as its cells' texts."""

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.errors: list[str] = []
        self.hrefs: list[str] = []
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.rows: list[list[str]] = []
        self.links: list[tuple[str, str]] = []  # (text, href)
        self._cell: list[str] | None = None
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.handle_startendtag(tag, attrs)
        if tag not in VOID:
            self.open.append(tag)
        attributes = dict(attrs)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "a":
            self._href, self._text = attributes.get("href"), []

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.hrefs += [value for name, value in attrs if name == "href"]
        self.ids.update(value for name, value in attrs if name == "id")

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
        else:
            self.open.pop()
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "a" and self._href is not None:
            self.links.append(("".join(self._text), self._href))
            self._href = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._href is not None:
            self._text.append(data)


def check_html(text: str) -> WellFormed:
    parser = WellFormed()
    parser.feed(text)
    parser.close()
    return parser


class RunSetsCase(unittest.TestCase):
    """Three simulated run sets of the two-shard fixture, run once for the module's tests (which
    write their reports elsewhere, or into a set's own dir where a test says so): `fan_out`
    (simulated/flaky at p = 1: as the oracle, two trials) and its baseline (one trial), the
    run sets `good` lists of the dir `runs`, and `bad` (p = 0: as fabricate, two trials).
    What a report shows of a run set does not depend on the fixture's size."""

    made: ClassVar[dict[str, object]] = {}

    @classmethod
    def setUpClass(cls) -> None:
        if not RunSetsCase.made:
            tmp = tempfile.mkdtemp(prefix="report-sets-")
            unittest.addModuleCleanup(shutil.rmtree, tmp)
            good, bad = os.path.join(tmp, "good"), os.path.join(tmp, "bad")
            baseline = os.path.join(good, "baseline")
            for probability, where in (
                ("1", ("--out", good, "--trials", "2", "--jobs", "2")),
                ("1", ("--run-set", baseline, "--trials", "1", "--baseline")),
                ("0", ("--out", bad, "--trials", "2", "--jobs", "2")),
            ):
                argv = ["--fixture", two_shard_fixture(), "--agent-bin", SIMULATED, *where]
                argv += ["--model", "simulated/flaky", "--agent-config", tmp]
                env = dict(os.environ, SIMULATED_FLAKY_P=probability)
                done = runner_server.run(argv, cwd=tmp, env=env, timeout=120)
                assert done.returncode == int(probability == "0"), done.stderr.decode()
            sets = sorted(os.path.join(good, name) for name in os.listdir(good))
            (fan_out,) = (path for path in sets if path != baseline)
            (bad,) = (os.path.join(bad, name) for name in os.listdir(bad))
            RunSetsCase.made.update(tmp=tmp, good=sets, bad=bad, fan_out=fan_out)
        for key, value in RunSetsCase.made.items():
            setattr(cls, key, value)
        cls.runs = os.path.dirname(cls.fan_out)

    def report(self, *args: str) -> dict:
        """report.py's JSON for `args`, run in this process (exit 0 asserted); how it runs as
        a program is tested apart."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(report.main(list(args)), 0)
        return json.loads(out.getvalue())

    def read(self, path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return handle.read()


class ReportTest(RunSetsCase):
    def test_report_tables_hold_rate_interval_pass_hat_k_and_overhead(self):
        written = self.report(*self.good, self.bad)
        self.assertEqual(os.path.dirname(written["md"]), self.good[0])
        text = self.read(written["md"])
        table = [line for line in text.splitlines() if line.startswith("| json-events |")]
        (baseline,) = [line for line in table if "| baseline |" in line]
        # Rates as stderr gives them: whole percents, the interval `low-high` (Wilson's: at
        # 1/1, 1/(1 + 1.96²) = 21% to 100%).
        self.assertIn("| 1/1 | 100% | 21%-100% | k=1 100% |", baseline)
        (good,) = [line for line in table if "| fan-out |" in line and "none failed" in line]
        (bad,) = [line for line in table if "| fan-out |" in line and "2 failed" in line]
        self.assertIn("| 2/2 | 100% | 34%-100% | k=1 100% · k=2 100% |", good)
        self.assertIn("| 0/2 | 0% | 0%-66% | k=1 0% · k=2 0% |", bad)
        # overhead tokens / turns / wall: numbers, not n/a, for both fan-outs of this digest
        self.assertRegex(good, r"\| \d+(\.\d+)? / \d+(\.\d+)? / \d+(\.\d+)? \|")
        codes = next(line for line in text.splitlines() if line.startswith("| reason code |"))
        # Two fan-out sets of one model: told apart by their dirs' names.
        self.assertIn(f"| baseline | fan-out {os.path.basename(self.bad)} |", codes)
        self.assertIn("| wrong_answer | 0 | **2** | 0 |", text)
        self.assertIn("| unsourced_answer | 0 | **2** | 0 |", text)
        self.assertEqual(text.count("| child | name | status |"), 4)
        self.assertEqual(len(written["evidence"]), 5)  # 2 trials of each fan-out, 1 baseline

    def test_numbers_have_thousands_separators(self):
        text = self.read(self.report(self.fan_out, "--out", os.path.join(self.tmp, "sep"))["md"])
        (row,) = [line for line in text.splitlines() if line.startswith("| json-events |")]
        tokens = row.split(" | ")[8]
        self.assertRegex(tokens, r"^\d{1,3}(,\d{3})+$")
        trial = next(line for line in text.splitlines() if line.startswith("| [trial 1]"))
        self.assertIn(f" | {tokens} | ", trial)

    def test_html_is_well_formed_self_contained_and_links_resolve(self):
        out = os.path.join(self.tmp, "out")
        written = self.report(self.fan_out, "--out", out)
        html = self.read(written["html"])
        parsed = check_html(html)
        self.assertEqual(parsed.errors, [])
        self.assertEqual(parsed.open, [])
        self.assertEqual(parsed.tags.count("svg"), 2)
        self.assertEqual(html.count('<rect class="bar"'), 4)  # 2 children in each of 2 trials
        self.assertNotIn("script", parsed.tags)
        self.assertIsNone(re.search(r"(src|href)=\"(https?:|//)", html))
        bars = [href for href in parsed.hrefs if "#child-" in href]
        self.assertEqual(len(bars), 4)  # each bar links to its child in the evidence page
        self.assert_links_resolve(written["html"], parsed.hrefs, html)
        for page in written["evidence"]:
            text = self.read(page)
            checked = check_html(text)
            self.assertEqual((checked.errors, checked.open), ([], []), page)
            self.assertNotIn("script", checked.tags)
            self.assert_links_resolve(page, checked.hrefs, text)

    def assert_links_resolve(self, page: str, hrefs: list[str], text: str):
        """Every link is relative and names a file that exists, and an element of it when
        it has a fragment."""
        for href in hrefs:
            path, _, fragment = href.partition("#")
            self.assertFalse(os.path.isabs(path), href)
            target = os.path.join(os.path.dirname(page), path) if path else page
            self.assertTrue(os.path.exists(target), href)
            if fragment:
                body = text if not path else self.read(target)
                self.assertIn(f'id="{fragment}"', body, href)

    def test_failing_trials_stand_out_and_link_to_their_evidence_page(self):
        out = os.path.join(self.tmp, "failing")
        written = self.report(self.fan_out, self.bad, "--out", out)
        html = self.read(written["html"])
        name = os.path.basename(self.bad)
        for index in (1, 2):
            href = f"evidence/{name}/trial-{index}.html"
            self.assertIn(
                f'<tr class="row-bad"><td class="nw" data-label="trial"><a href="{href}">'
                f'trial {index}</a></td><td class="nw bad" data-label="outcome">FAILED</td>',
                html,
            )
            page = self.read(os.path.join(out, href))
            self.assertIn("— NOT resolved</h1>", page)
            self.assertIn("wrong_answer x1", page)
            self.assertIn('<a href="../../report.html">← the report</a>', page)
        self.assertRegex(html, r'<a href="#set-\d">2 failed</a>')
        good = f"evidence/{os.path.basename(self.fan_out)}"
        self.assertNotIn(
            f'<tr class="row-bad"><td class="nw" data-label="trial"><a href="{good}', html
        )

    def test_compare_links_both_reports_the_flipped_trials_and_the_codes_that_changed(self):
        self.report(self.fan_out)  # A has a report, B none yet
        out = os.path.join(self.tmp, "compared")
        written = self.report("--compare", self.fan_out, self.bad, "--out", out)
        text = self.read(written["md"])
        a, b = os.path.basename(self.fan_out), os.path.basename(self.bad)
        self.assertIn(f"[{a} report](../good/{a}/report.html) |", text)
        # B has no report of its own: the command that writes it, as it stands, pasted from
        # the page, and the flipped trials' pages this comparison wrote of it, below.
        self.assertIn(
            f"{b} has no report.html of its own (uv run --locked python report.py {self.bad}); "
            "its flipped trials' evidence pages: [below](#flipped) |",
            text,
        )
        self.assertNotIn("no report yet", text)
        # Both trials resolved in A and failed in B: each side's page, written beside it.
        for index in (1, 2):
            self.assertIn(
                f"| json-events | fan-out | trial {index} | "
                f"[resolved](compare-evidence/{a}/trial-{index}.html) |  | "
                f"[**FAILED**](compare-evidence/{b}/trial-{index}.html) | "
                "unsourced_answer, wrong_answer |",
                text,
            )
        self.assertEqual(len(written["evidence"]), 4)
        self.assertIn("| json-events | fan-out | wrong_answer | 0 | 2 | **appeared** |", text)
        self.assertIn("| json-events | fan-out | unsourced_answer | 0 | 2 | **appeared** |", text)
        html = self.read(written["html"])
        parsed = check_html(html)
        self.assertEqual(parsed.errors, [])
        self.assert_links_resolve(written["html"], parsed.hrefs, html)
        page = self.read(os.path.join(out, "compare-evidence", b, "trial-1.html"))
        self.assertIn('<a href="../../compare.html">← the comparison</a>', page)
        # The other way round, the codes vanished.
        back = self.report("--compare", self.bad, self.fan_out, "--out", out)
        self.assertIn("| wrong_answer | 2 | 0 | vanished |", self.read(back["md"]))

    def test_compare_names_both_sides_shows_both_rates_and_marks_the_flip(self):
        written = self.report("--compare", self.fan_out, self.bad)
        text = self.read(written["md"])
        for side, path in (("A", self.fan_out), ("B", self.bad)):
            self.assertIn(
                f"| {side} | {os.path.basename(path)} | simulated/flaky | oneshot | 1 | 2 |", text
            )
        rows = [line for line in text.splitlines() if line.startswith("| json-events | fan-out")]
        (row,) = [line for line in rows if "| resolved → unresolved |" in line]
        self.assertIn(
            "| resolved → unresolved | **FLIP, worse** | **100% → 0% (-100 pp)** | "
            "**k=2: 100% → 0% (-100 pp)** |",
            row,
        )
        # Tokens, turns and cost in a table of their own, so that no table is too wide.
        self.assertIn(
            "| fixture | kind | tokens A → B (Δ) | turns A → B (Δ) | cost A → B (Δ) |", text
        )
        # A flip on 2 trials a side is no evidence: of C(4, 2) = 6 ways to seat the two
        # successes, B got none in 1, so p = 2/6; 4/4 against 0/4 would be called real.
        verdict = (
            "json-events · fan-out: The data can't tell A and B apart (p = 0.33; Fisher's "
            "exact test, 2 and 2 trials): about 4 trials a side in all, the 2 and 2 run "
            "counted, would detect a difference of this size with 80% power."
        )
        self.assertIn(verdict, text)
        (numbers,) = [line for line in rows if "| 2/2 | 0/2 |" in line]
        self.assertIn("| 2/2 | 0/2 | -100 pp | 0 to 4.6 | 0.33 | 4 (2 and 2 run) |", numbers)
        self.assertIn("not paired by index: a trial records no seed that its agent used", text)
        html = self.read(written["html"])
        self.assertEqual(check_html(html).errors, [])
        self.assertIn(f"<p>{verdict.replace(chr(39), '&#x27;')}</p>", html)
        self.assertIn('<tr class="row-bad">', html)
        self.assertIn('<td class="nw bad" data-label="flip">FLIP, worse</td>', html)
        back = self.report("--compare", self.bad, self.fan_out, "--out", self.tmp)
        self.assertIn(
            '<td class="nw good" data-label="flip">FLIP, better</td>', self.read(back["html"])
        )


def span(name: str, reply_ms: int | None) -> ChildSpan:
    return ChildSpan(f"sub-{name}", name, "c.jsonl", False, 0, 0, 10, reply_ms, None, 1500)


class UnusableInputTest(unittest.TestCase):
    """What report.py cannot use is refused with exit 2 and a sentence, never a raw errno."""

    def refused(self, *argv: str) -> str:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = report.main(list(argv))
        self.assertEqual((code, out.getvalue()), (2, ""))
        said = err.getvalue()
        self.assertNotIn("Errno", said)
        return said

    def test_compare_of_an_empty_dir_or_a_missing_one_exits_2_saying_why(self):
        with tempfile.TemporaryDirectory() as tmp:
            empty, missing = os.path.join(tmp, "empty"), os.path.join(tmp, "missing")
            os.mkdir(empty)
            said = self.refused("--compare", empty, empty)
            self.assertIn(f"report.py: {empty} holds no run set: no run-set.json in it", said)
            said = self.refused("--compare", empty, missing)
            self.assertIn(f"{empty} holds no run set", said)
            said = self.refused("--compare", missing, empty)
            self.assertEqual(said, f"report.py: {missing} does not exist\n")
            self.assertEqual(self.refused(missing), f"report.py: {missing} does not exist\n")

    def test_a_dir_that_is_no_run_set_nor_a_run_says_both(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.assertEqual(
                self.refused(tmp),
                f"report.py: {tmp} holds no run set: no run-set.json in it or in a dir directly "
                "in it, nor one run's dir (no result.json or sessions/ in it)\n",
            )


# report.py with each evidence page's writer sending SIGNUM to the process once the first
# page is written: an interrupt in the middle of a report, where it leaves the most behind.
STOPPED_MIDWAY = """
import os, sys
from swarm_fanout import report
from swarm_fanout.reporting import evidence_page
written = evidence_page.write_page
def write_then_stop(*args, **kwargs):
    size = written(*args, **kwargs)
    os.kill(os.getpid(), int(os.environ["SIGNUM"]))
    return size
evidence_page.write_page = write_then_stop
sys.exit(report.main(sys.argv[1:]))
"""


class ReportWritingTest(RunSetsCase):
    """report.py writes into a temp dir beside its output and moves it into place at the
    end: an interrupt leaves nothing half-written; what it prints are absolute paths."""

    def stopped(self, signum: int, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", STOPPED_MIDWAY, *argv],
            cwd=ROOT,
            env=dict(os.environ, SIGNUM=str(int(signum))),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def test_ctrl_c_or_sigterm_midway_leaves_nothing_says_one_line_and_exits_130_or_143(self):
        """A report, a comparison and one run's evidence page, each stopped midway (and a
        rewrite of a report below)."""
        for signum, code, *argv in (
            (signal.SIGTERM, 143, self.fan_out),
            (signal.SIGINT, 130, "--compare", self.fan_out, self.bad),
            (signal.SIGTERM, 143, os.path.join(self.bad, "trial-1")),
        ):
            with self.subTest(signal=signum.name, argv=argv):
                out = os.path.join(temp_dir(self), "new", "report")
                done = self.stopped(signum, *argv, "--out", out)
                self.assertEqual(done.returncode, code, done.stderr)
                self.assertEqual(
                    done.stderr, f"report.py: {signum.name}: stopped; nothing was written\n"
                )
                self.assertEqual(json.loads(done.stdout)["error"], "interrupted")
                self.assertFalse(os.path.exists(os.path.dirname(out)))

    def test_an_interrupted_rewrite_leaves_the_report_that_was_there_whole(self):
        out = temp_dir(self)
        written = self.report(self.fan_out, "--out", out)
        before = tree(out)
        self.assertIn("report.html", before)
        self.assertEqual(len(written["evidence"]), 2)
        done = self.stopped(signal.SIGINT, self.bad, "--out", out)
        self.assertEqual(done.returncode, 130, done.stderr)
        self.assertEqual(tree(out), before)
        self.assertEqual(sorted(os.listdir(out)), ["evidence", "report.html", "report.md"])
        # A rewrite that ends replaces the pages whole: the old set's evidence pages go.
        self.report(self.bad, "--out", out)
        pages = os.listdir(os.path.join(out, "evidence"))
        self.assertEqual(pages, [os.path.basename(self.bad)])

    def test_a_dir_of_run_sets_is_reported_as_compare_takes_it(self):
        written = self.report(self.runs, "--out", temp_dir(self))
        page = self.read(written["html"])
        for path in self.good:
            self.assertIn(f">{os.path.basename(path)}</a>", page)
        self.assertEqual(len(written["evidence"]), 3)  # the fan-out's 2 trials, the baseline's 1

    def test_a_failed_trials_timeline_marks_the_child_the_verdict_failed(self):
        # fabricate's index has a wrong answer for the first shard: its child replied, and
        # its bar says the verdict failed it; the oracle's timelines have no such bar.
        for path, flagged in ((self.fan_out, False), (self.bad, True)):
            page = self.read(self.report(path, "--out", temp_dir(self))["html"])
            self.assertEqual(f'fill="{render.FLAGGED_COLOUR}"' in page, flagged, path)
            if flagged:
                self.assertIn(f"worker-events-01: replied; {render.FLAGGED_WORD}: ", page)

    def test_every_path_printed_is_absolute_and_there(self):
        # Relative arguments and a relative --out.
        self.addCleanup(os.chdir, os.getcwd())
        os.chdir(self.tmp)
        fan_out, bad = (os.path.relpath(path) for path in (self.fan_out, self.bad))
        out = os.path.relpath(temp_dir(self))
        for argv in (
            (fan_out, "--out", out),
            ("--compare", fan_out, bad, "--out", out),
            (os.path.join(fan_out, "trial-1"), "--out", out),
        ):
            written = self.report(*argv)
            paths = [written[key] for key in ("md", "html") if key in written]
            paths += written.get("evidence", [])
            self.assertTrue(paths, written)
            for path in paths:
                self.assertTrue(os.path.isabs(path), path)
                self.assertTrue(os.path.isfile(path), path)


VERDICT = {"efficiency": {"total_tokens": 1000, "total_turns": 4}}


def run_set_view(results: list[dict], name: str = "set", timelines=None, **config) -> RunSetView:
    """A run set of one trial a result, summarized and viewed as report.py does; `config`
    overrides run-set.json's keys, and one of `inject_failure` is read as a stored set's."""
    config = {
        "fixture": {"name": "small"}, "model": "m/x", "drive": "oneshot", "baseline": False,
        "fixture_digest": "d", "trials": len(results), **config,
    }  # fmt: skip
    records = [TrialRecord(i, f"trial-{i}", 1, result) for i, result in enumerate(results, 1)]
    summary = summarize(config, records)
    views = tuple(
        TrialView(row["index"], row["dir"], row, timelines[row["index"] - 1] if timelines else None)
        for row in summary["trials"]
    )
    injected = runsets.injected(config) if "inject_failure" in config else ()
    return RunSetView(f"/r/{name}", config, summary, views, None, injected)


class TrialsSectionTest(unittest.TestCase):
    def test_resolved_trials_timelines_are_folded_after_the_failing_ones(self):
        timelines = [
            Timeline((span("w", 900 if resolved else None),), 1, 1500, 1500, 1.0)
            for resolved in (True, False, True)
        ]
        results = [{"status": "scored", "resolved": resolved} for resolved in (True, False, True)]
        view = run_set_view(results, timelines=timelines)
        blocks = report_page._timelines(view, "/r")
        shown = [type(block).__name__ for block in blocks]
        self.assertEqual(shown, ["Paragraph", "Chart", "Fold", "Fold"])
        self.assertEqual(blocks[0].text[0].text, "Trial 2")
        self.assertEqual([fold.summary[0].text for fold in blocks[2:]], ["Trial 1", "Trial 3"])
        html = render_html(blocks, "t")
        # The failing trial's chart is drawn open, before the first <details>.
        self.assertLess(html.index("<svg"), html.index("<details>"))
        self.assertEqual(html.count("<details>"), 2)


class CostTest(unittest.TestCase):
    def view(self, name: str, model: str, costs: list) -> RunSetView:
        results = [
            {
                "status": "scored",
                "resolved": resolved,
                "verdict": {"efficiency": {"total_cost_usd": cost, "total_tokens": 10}},
            }
            for cost, resolved in costs
        ]
        return run_set_view(results, name, model=model)

    def test_the_report_and_compare_show_dollars_and_say_when_there_are_none(self):
        priced = self.view("a", "p/m", [(0.5, True), (1.75, False), (0.25, True)])
        text = render_markdown(build_report([priced], "/r"))
        # Median $0.50; $2.50 over 2 resolved trials.
        self.assertIn("| $0.50 ($1.25) |", text)
        self.assertIn("| [trial 2](evidence/a/trial-2.html) | **FAILED** |", text)
        self.assertIn("| $1.75 |", text)
        free = self.view("b", "simulated/oracle", [(0, True)])
        text = render_markdown(build_report([free], "/r"))
        self.assertIn("| simulated |", text)
        self.assertNotIn("$0", text)
        cheaper = self.view("c", "p/m", [(0.25, True), (0.25, True), (0.25, True)])
        compared = render_markdown(build_compare([priced], [cheaper], ("a", "c")))
        self.assertIn("| $0.50 → $0.25 (-$0.25) |", compared)
        compared = render_markdown(build_compare([free], [free], ("b", "b")))
        self.assertIn("| simulated |", compared)


class FiftyTrialsTest(unittest.TestCase):
    """At 50 trials a row of the Results table stays one short line: pass^k at k = 1, 2,
    4, 8 and n, not at all 50."""

    def test_pass_hat_k_is_shown_at_1_2_4_8_and_n(self):
        view = run_set_view([{"status": "scored", "resolved": n <= 45} for n in range(1, 51)])
        self.assertEqual(len(view.summary["pass_hat_k"]), 50)  # summary.json keeps every k
        text = render_markdown(build_report([view], "/r"))
        (row,) = [line for line in text.splitlines() if line.startswith("| small |")]
        self.assertIn(
            "| 45/50 | 90% | 79%-96% | k=1 90% · k=2 81% · k=4 65% · k=8 40% · k=50 0% |", row
        )
        self.assertEqual(report_page.shown_k(3), [1, 2, 3])
        self.assertEqual(report_page.shown_k(8), [1, 2, 4, 8])
        self.assertEqual(report_page.shown_k(1), [1])


class DollarsTest(unittest.TestCase):
    def test_no_cost_says_why_instead_of_zero_dollars(self):
        self.assertEqual(dollars(None, "anthropic/claude"), "no cost reported")
        self.assertEqual(dollars(0.0, "anthropic/claude"), "no cost reported")
        self.assertEqual(dollars(0, "simulated/oracle"), "simulated")
        self.assertEqual(dollars(None, "scripted/fanout"), "scripted")
        self.assertEqual(dollars(1234.5), "$1,234.50")
        self.assertEqual(dollars(0.0042), "$0.0042")


class AgentErrorTest(unittest.TestCase):
    def test_a_trial_whose_agent_failed_is_counted_and_shown_apart(self):
        results = [
            {"status": "scored", "resolved": True, "verdict": VERDICT},
            {"status": "scored", "resolved": False, "verdict": VERDICT,
             "reasons": [{"code": "wrong_answer"}]},
            {"status": "agent_error", "resolved": False},
        ]  # fmt: skip
        view = run_set_view(results)
        blocks = build_report([view], "/r")
        html = render_html(blocks, "t")
        self.assertIn("1/2 of 3 planned; 1 errored (not counted)", html)
        self.assertIn('<tr class="row-error"><td class="nw" data-label="trial"><a href='
                      '"evidence/set/trial-3.html">trial 3</a></td><td class="nw error" '
                      'data-label="outcome">agent error</td>', html)  # fmt: skip
        self.assertIn('<tr class="row-bad"><td class="nw" data-label="trial"><a href='
                      '"evidence/set/trial-2.html">trial 2</a></td><td class="nw bad" '
                      'data-label="outcome">FAILED</td>', html)  # fmt: skip
        self.assertIn('<a href="#set-1">1 failed, 1 errored</a>', html)
        errors = dict(view.summary, errors={"agent_exited": 1})
        view = RunSetView(view.dir, view.config, errors, view.trials)
        html = render_html(build_report([view], "/r"), "t")
        self.assertIn("Errored trials by code", html)
        self.assertIn('<td class="nw" data-label="reason code">agent_exited</td>'
                      '<td class="n nw error" data-label="set">1</td>', html)  # fmt: skip


class FailureAccountingTest(unittest.TestCase):
    """Run sets with --inject-failure: the accounting rate beside the resolve rate."""

    def markdown(self, *accounted: bool | None) -> str:
        results = [
            {"status": "scored", "resolved": False, "verdict": VERDICT,
             "reasons": [{"code": "wrong_answer"}],
             **({} if value is None else {"failure_accounted": value})}
            for value in accounted
        ]  # fmt: skip
        return render_markdown(build_report([run_set_view(results)], "/r"))

    def test_the_report_gives_the_accounting_rate_beside_the_resolve_rate(self):
        text = self.markdown(True, True, True, False)
        self.assertIn("## Injected failures", text)
        self.assertIn("| small, m/x, oneshot, fan-out | n/a | 3/4 | 75% | 30%-95% | 0% |", text)

    def test_a_report_with_no_failure_injected_has_no_such_section(self):
        self.assertNotIn("Injected failures", self.markdown(None, None))


class CompareTestTest(unittest.TestCase):
    def test_a_real_difference_is_said_in_words_and_errored_trials_stay_out(self):
        resolved = {"status": "scored", "resolved": True, "verdict": VERDICT}
        failed = {"status": "scored", "resolved": False, "verdict": VERDICT}
        errored = {"status": "agent_error", "resolved": False}
        a = run_set_view([failed] * 6, "a")
        b = run_set_view([resolved] * 6 + [errored] * 2, "b")
        blocks = build_compare([a], [b], ("a", "b"))
        text = render_markdown(blocks)
        # 0/6 against 6/6: B's count is the most it could be, 1 table of C(12, 6) = 924,
        # doubled: p = 2/924.
        self.assertIn(
            "small · fan-out: B resolves more often than A (p = 0.0022; Fisher's exact test, "
            "6 and 6 trials).",
            text,
        )
        self.assertIn("| small | fan-out | 0/6 | 6/6 | +100 pp |", text)
        html = render_html(blocks, "t")
        self.assertIn('<span class="good">B resolves more often than A (p = 0.0022;', html)


class InjectedFailureTest(unittest.TestCase):
    """A run set made with --inject-failure says so on every page that shows it."""

    INJECTED: ClassVar[list] = [{"worker": "worker-c", "calls": 12}]

    def results(self, resolved: bool, count: int = 4) -> list[dict]:
        return [{"status": "scored", "resolved": resolved, "verdict": VERDICT}] * count

    def test_the_report_tells_an_injected_set_from_a_clean_one(self):
        clean = run_set_view(self.results(True), "clean")
        injected = run_set_view(self.results(False), "injected", inject_failure=self.INJECTED)
        text = render_markdown(build_report([clean, injected], "/r"))
        rows = [line for line in text.splitlines() if line.startswith("| small | m/x |")]
        self.assertEqual(len(rows), 2)
        self.assertIn("| oneshot | fan-out | 4/4 |", rows[0])
        self.assertIn("| oneshot | fan-out, failure injected | 0/4 |", rows[1])
        self.assertIn("### small · m/x · oneshot · fan-out, failure injected", text)

    def test_compare_says_a_flip_comes_with_injected_failures(self):
        clean = run_set_view(self.results(True), "clean")
        injected = run_set_view(self.results(False), "injected", inject_failure=self.INJECTED)
        blocks = build_compare([clean], [injected], ("clean", "injected"))
        text = render_markdown(blocks)
        self.assertIn("| B | injected | m/x | oneshot | 1 | 4 |", text)
        self.assertIn("| worker-c (12 calls) |", text)
        self.assertNotIn("| FLIP, worse |", text)
        self.assertNotIn("**FLIP, worse**", text)
        self.assertIn("| FLIP, worse (B: failure injected) |", text)
        self.assertIn(
            "B ran with failures injected (--inject-failure): the difference is partly the "
            "injection's, not the model's alone.",
            text,
        )

    def test_a_set_stored_before_the_flag_was_kept_is_read_from_its_results(self):
        set_dir = os.path.join(temp_dir(self), "set")
        os.makedirs(os.path.join(set_dir, "trial-1"))
        config = {"fixture_digest": "d", "harness_version": "1", "model": "m/x",
                  "drive": "oneshot", "baseline": False}  # fmt: skip
        with open(os.path.join(set_dir, "run-set.json"), "w", encoding="utf-8") as handle:
            json.dump(config, handle)
        result = {"status": "scored", "injected_failures": {"asked": self.INJECTED}}
        with open(os.path.join(set_dir, "trial-1", "result.json"), "w", encoding="utf-8") as f:
            json.dump(result, f)
        self.assertEqual(set_injections(set_dir, config), (("worker-c", 12),))
        self.assertEqual(set_injections(set_dir, dict(config, inject_failure=[])), ())


class RenderTest(unittest.TestCase):
    def test_everything_put_in_html_is_escaped(self):
        blocks = [
            Paragraph('<script>alert("x")</script> & co'),
            Table(("a<b",), ((Cell("<i>", 'x" onclick="y'),),)),
        ]
        html = render_html(blocks, "<title>")
        self.assertNotIn("<script>", html)
        self.assertNotIn("<i>", html)
        self.assertIn("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co", html)
        self.assertIn('href="x&quot; onclick=&quot;y"', html)
        self.assertEqual(check_html(html).errors, [])

    def test_a_table_of_seven_columns_stacks_on_a_narrow_screen_each_cell_labelled(self):
        headers = ("trial", "outcome", "reasons", "tokens", "turns", "wall s", "cost")
        row = tuple(Cell(f"v{i}") for i in range(7))
        html = render_html([Table(headers, (row,)), Table(headers[:4], (row[:4],))], "t")
        self.assertIn('<table class="wide stack"><thead>', html)
        self.assertIn('<td class="nw" data-label="wall s">v5</td>', html)
        # A narrow table neither wraps its short values nor stacks.
        self.assertIn("<table><thead><tr><th>trial</th>", html)
        narrow = re.search(r"@media \(max-width:(\d+)px\)\{(.*?\})\}", html)
        self.assertGreaterEqual(int(narrow.group(1)), 800)
        for rule in ("table.stack thead{display:none}", "content:attr(data-label)"):
            self.assertIn(rule, narrow.group(2))
        self.assertEqual(check_html(html).errors, [])

    def test_the_timeline_fits_an_800_px_screen(self):
        # Its narrowest width, beside the page's margins at 800 px: its reply ticks stay on it.
        least = int(re.search(r"svg\.timeline\{[^}]*min-width:(\d+)px", render.STYLE).group(1))
        self.assertLessEqual(least + 2 * 16, 800)

    def test_markdown_escapes_table_pipes(self):
        text = render_markdown([Table(("h",), ((Cell("a|b"),),))])
        self.assertIn("| a\\|b |", text)

    def test_numbers_get_thousands_separators(self):
        self.assertEqual(number(1234567), "1,234,567")
        self.assertEqual(number(134120.0), "134,120")
        self.assertEqual(number(1234.567), "1,234.57")
        self.assertEqual(number(0.5), "0.50")
        self.assertEqual(number(None), "n/a")

    def test_the_time_axis_has_round_ticks(self):
        self.assertEqual(ticks(8.07), (0, 1, 2, 3, 4, 5, 6, 7, 8))
        self.assertEqual(ticks(0.05)[:3], (0, 0.005, 0.01))
        self.assertEqual(ticks(1.6), (0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6))

    def test_the_timeline_has_a_key_an_axis_and_fills_the_width(self):
        spans = tuple(
            ChildSpan(f"sub-{n:08x}", f"w{n}", "c.jsonl", False, 0, 0, 10, reply, notice, 1500)
            for n, reply, notice in ((1, 1600, None), (2, None, 1700), (3, None, None))
        )
        svg = render_svg(Chart(Timeline(spans, 3, 1500, 4500, 3.0), ("#a", None, "#c")))
        self.assertIn('width="100%"', svg)
        for word in ("replied", "notice, no reply", "dropped", "reply reached the parent"):
            self.assertIn(f">{word}</text>", svg)
        self.assertIn(">seconds since the first spawn</text>", svg)
        self.assertIn(">0.2</text>", svg)
        self.assertIn(">1.6</text>", svg)
        self.assertEqual(svg.count('<rect class="bar"'), 3)
        self.assertEqual(svg.count("<a href="), 2)
        self.assertEqual(check_html(svg).errors, [])


if __name__ == "__main__":
    unittest.main()
