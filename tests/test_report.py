"""report.py on simulated run sets: the tables, the timelines, well-formed self-contained HTML
with working relative links, and --compare."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from html.parser import HTMLParser

from report import Cell, Paragraph, Table, render_html, render_markdown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, "runner.py")
REPORT = os.path.join(ROOT, "report.py")
SIMULATED = os.path.join(ROOT, "simulated", "agent.py")
JSON_EVENTS = os.path.join(ROOT, "fixtures", "json-events")
VOID = {"meta", "br", "hr", "img", "input", "link"}


class WellFormed(HTMLParser):
    """Every element closed in order; collects hrefs and tag names."""

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.errors: list[str] = []
        self.hrefs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.hrefs += [value for name, value in attrs if name == "href"]
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
        else:
            self.open.pop()


def check_html(text: str) -> WellFormed:
    parser = WellFormed()
    parser.feed(text)
    parser.close()
    return parser


class ReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp_dir = tempfile.TemporaryDirectory()
        cls.tmp = cls.tmp_dir.name
        for name, probability, extra in (
            ("good", "1", ()),
            ("good", "1", ("--baseline",)),
            ("bad", "0", ()),
        ):
            out = os.path.join(cls.tmp, name)
            argv = [sys.executable, RUNNER, "--fixture", JSON_EVENTS, "--agent-bin", SIMULATED]
            argv += ["--model", "simulated/flaky", "--out", out, "--agent-config", cls.tmp]
            env = dict(os.environ, SIMULATED_FLAKY_P=probability)
            done = subprocess.run(
                [*argv, "--trials", "2", "--jobs", "2", *extra],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=120,
            )
            assert done.returncode == int(probability == "0"), done.stderr.decode()
        cls.good = sorted(
            os.path.join(cls.tmp, "good", n) for n in os.listdir(os.path.join(cls.tmp, "good"))
        )
        cls.bad = os.path.join(cls.tmp, "bad", os.listdir(os.path.join(cls.tmp, "bad"))[0])
        cls.fan_out = next(path for path in cls.good if "-baseline-" not in path)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp_dir.cleanup()

    def report(self, *args: str) -> dict:
        done = subprocess.run(
            [sys.executable, REPORT, *args], capture_output=True, timeout=60, check=True
        )
        return json.loads(done.stdout)

    def read(self, path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    def test_report_tables_hold_rate_interval_pass_hat_k_and_overhead(self):
        written = self.report(*self.good, self.bad)
        self.assertEqual(os.path.dirname(written["md"]), self.good[0])
        text = self.read(written["md"])
        table = [line for line in text.splitlines() if line.startswith("| json-events |")]
        (baseline,) = [line for line in table if "| baseline |" in line]
        self.assertIn("| 2/2 | 1 | 0.34 to 1 | 1 / 1 |", baseline)
        self.assertIn("Trial 1 (trial-1): resolved. No children.", text)
        fan_outs = [line for line in table if "| fan-out |" in line]
        good = next(line for line in fan_outs if os.path.basename(self.fan_out) in line)
        bad = next(line for line in fan_outs if os.path.basename(self.bad) in line)
        self.assertIn("| 2/2 | 1 | 0.34 to 1 | 1 / 1 |", good)
        self.assertIn("| 0/2 | 0 | 0 to 0.66 | 0 / 0 |", bad)
        # overhead tokens / turns / wall: numbers, not n/a, for both fan-outs of this digest
        self.assertRegex(good, r"\| \d+(\.\d+)? / \d+(\.\d+)? / \d+(\.\d+)? \|")
        self.assertIn("| wrong_answer | 0 | 2 | 0 |", text)
        self.assertIn("| unsourced_answer | 0 | 2 | 0 |", text)
        self.assertEqual(text.count("| child | name | status |"), 4)

    def test_html_is_well_formed_self_contained_and_links_resolve(self):
        written = self.report(self.fan_out, "--out", os.path.join(self.tmp, "out"))
        html = self.read(written["html"])
        parsed = check_html(html)
        self.assertEqual(parsed.errors, [])
        self.assertEqual(parsed.open, [])
        self.assertEqual(parsed.tags.count("svg"), 2)
        self.assertEqual(parsed.tags.count("rect"), 16)  # 8 children in each of 2 trials
        self.assertNotIn("script", parsed.tags)
        self.assertIsNone(re.search(r"(src|href)=\"(https?:|//)", html))
        transcripts = [href for href in parsed.hrefs if href.endswith(".jsonl")]
        self.assertEqual(len(transcripts), 16)
        for href in parsed.hrefs:
            self.assertFalse(os.path.isabs(href))
            self.assertTrue(os.path.exists(os.path.join(self.tmp, "out", href)), href)

    def test_compare_shows_the_verdict_flip_and_the_deltas(self):
        written = self.report("--compare", self.fan_out, self.bad)
        text = self.read(written["md"])
        (row,) = [line for line in text.splitlines() if line.startswith("| json-events | fan-out")]
        self.assertIn("| resolved | unresolved | FLIP | -1 | k=2: -1 |", row)
        self.assertEqual(check_html(self.read(written["html"])).errors, [])


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

    def test_markdown_escapes_table_pipes(self):
        text = render_markdown([Table(("h",), ((Cell("a|b"),),))])
        self.assertIn("| a\\|b |", text)


if __name__ == "__main__":
    unittest.main()
