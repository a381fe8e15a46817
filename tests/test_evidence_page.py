"""The evidence page of one run: every criterion, shard row and reason with the file and line
it points at, the conversations, inert markup, and a page that stays small however large a
transcript grows. Runs are built in the product's formats (builders.py) and scored by the
scorer itself, so the page is checked against the verdict it shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from html import escape
from html.parser import HTMLParser

from evidence.artifacts import collect
from evidence.runpaths import RunPaths
from reporting import evidence_page
from rules import integrity, witness_checks
from scorer import score
from tests.builders import RunBuilder, small_fixture
from tests.test_real_runs import materialize
from tests.test_report import check_html

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORT = os.path.join(ROOT, "report.py")
FIXTURE = small_fixture()
A, B, C = FIXTURE.shards
HOSTILE = "<script>alert(\"x\")</script> & </details> 'quoted' <!-- <b>"


class Rows(HTMLParser):
    """Every table row of a page as its cells' texts, and every element id and href."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []  # (text, href)
        self._cell: list[str] | None = None
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if "id" in attributes:
            self.ids.add(attributes["id"])
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "a":
            self._href, self._text = attributes.get("href"), []

    def handle_endtag(self, tag):
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


def parse(page: str) -> Rows:
    rows = Rows()
    rows.feed(page)
    rows.close()
    return rows


def write_result(run_dir: str, **fields) -> dict:
    """result.json as the runner writes it, around the scorer's own verdict."""
    verdict = score(FIXTURE, collect(run_dir, FIXTURE.artifact)).to_json()
    result = {
        "model": "test/model",
        "drive": "oneshot",
        "fixture": {"name": FIXTURE.name, "path": "fixtures/small", "shards": 3},
        "agent": {"version": "prime-agent 0.8.0", "exit_code": 0, "wall_time_s": 1234.5},
        "status": "scored",
        "resolved": verdict["resolved"],
        "reasons": verdict["reasons"],
        "verdict": verdict,
        **fields,
    }
    with open(RunPaths.of(run_dir).result, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return result


class EvidencePageTest(unittest.TestCase):
    """One run that fails three ways: worker-b's reply is one its transcript never sent
    (unsent_reply, at a line of the parent), worker-c is noticed without a reply, and the
    index holds a wrong answer for c.jsonl."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.run_dir = os.path.join(tmp.name, "run")
        build = RunBuilder(self.run_dir)
        children = build.fan_out(FIXTURE, reply=False)
        build.reply(children["worker-a"], f"{A.file}: {A.expected}")
        build.reply(children["worker-b"], f"{B.file}: {B.expected}", sent=False)
        build.notice(children["worker-c"])
        build.assistant(HOSTILE, code=f"print({HOSTILE!r})")
        build.tool_result(HOSTILE + "\n")
        build.index_cell([f"- {A.file}: 11", f"- {B.file}: 22", f"- {C.file}: 1234567"])
        self.result = write_result(self.run_dir)
        self.verdict = self.result["verdict"]
        self.page_path = os.path.join(self.run_dir, evidence_page.PAGE_FILE)
        self.size = evidence_page.write_page(self.run_dir, self.page_path)
        with open(self.page_path, encoding="utf-8") as handle:
            self.page = handle.read()
        self.parsed = parse(self.page)

    def row(self, first: str) -> list[str]:
        return next(row for row in self.parsed.rows if row and row[0] == first)

    def test_the_page_is_well_formed_and_self_contained(self):
        parsed = check_html(self.page)
        self.assertEqual((parsed.errors, parsed.open), ([], []))
        self.assertNotIn("script", parsed.tags)
        self.assertIsNone(re.search(r"(src|href)=\"(https?:|//)", self.page))
        self.assertEqual(self.size, len(self.page.encode("utf-8")))

    def test_every_criterion_is_shown_with_its_result(self):
        for name in ("resolved", "coverage", "delegation_evidence", "dedup", "receipts"):
            expected = "pass" if self.verdict[name] else "FAIL"
            self.assertEqual(self.row(name), [name, expected])
        self.assertEqual(self.row("coverage")[1], "FAIL")
        self.assertEqual(self.row("dedup")[1], "pass")

    def test_every_integrity_and_witness_check_is_listed(self):
        listed = {(row[0], row[1]) for row in self.parsed.rows if len(row) == 6}
        for name, *_ in integrity.CHECKS:
            self.assertIn(("integrity", name), listed)
        for name, *_ in witness_checks.CHECKS:
            self.assertIn(("witness", name), listed)

    def test_every_shard_has_its_row(self):
        children = {child["name"]: child["child_id"] for child in self.verdict["children"]}
        self.assertEqual(
            self.row(A.file),
            [A.file, "worker-a", "11", "11", "correct", "ok", f"worker-a · {children['worker-a']}",
             "reply"],
        )  # fmt: skip
        self.assertEqual(
            self.row(C.file),
            [C.file, "worker-c", "33", "1,234,567", "wrong", "unsourced",
             f"worker-c · {children['worker-c']}", "notice:completed_without_reply"],
        )  # fmt: skip
        self.assertEqual(self.row(B.file)[:5], [B.file, "worker-b", "22", "22", "correct"])

    def test_each_reason_is_there_and_an_integrity_one_points_at_its_file_and_line(self):
        shown = {row[0].split(" x")[0] for row in self.parsed.rows if row}
        for reason in self.result["reasons"]:
            self.assertIn(reason["code"], shown)
        (failure,) = self.verdict["integrity"]["reply_receipts"]["failures"]
        self.assertTrue(failure["file"].startswith("sessions/"), failure)
        anchor = f"parent-L{failure['line']}"
        unsent = self.row("unsent_reply x1")
        self.assertEqual(unsent[-1], f"the parent's transcript, line {failure['line']}")
        self.assertIn((unsent[-1], f"#{anchor}"), self.parsed.links)
        self.assertIn(anchor, self.parsed.ids)
        # The entry at that line is worker-b's reply.
        entry = self.page[self.page.index(f'id="{anchor}"') :][:400]
        self.assertIn("reply from worker-b", entry)

    def test_the_conversations_hold_messages_cells_outputs_replies_and_notices(self):
        self.assertIn('id="parent"', self.page)
        for index in (1, 2, 3):
            self.assertIn(f'id="{evidence_page.child_anchor(index)}"', self.page)
        self.assertEqual(self.page.count("<details"), self.page.count("</details>"))
        for text in (
            "task from the parent",  # each child's task
            "ipython cell:",  # a cell's code
            "ipython output",  # its output
            "reply from worker-a",
            "notice: completed_without_reply from worker-c",
            "- c.jsonl: 1234567",  # the index cell's code
        ):
            self.assertIn(text, self.page)
        # A reply links to the conversation of the child that sent it.
        self.assertIn(("reply from worker-a", "#child-1"), self.parsed.links)

    def test_markup_in_a_transcript_comes_out_inert(self):
        self.assertIsNone(re.search("<script", self.page, re.IGNORECASE))
        self.assertNotIn("<!--", self.page)
        self.assertNotIn("<b>", self.page)
        self.assertIn("&lt;/details&gt;", self.page)
        self.assertIn("&amp;", self.page)
        self.assertIn("&quot;x&quot;", self.page)
        self.assertIn("&#x27;quoted&#x27;", self.page)

    def test_paths_of_the_run_dir_are_not_on_the_page(self):
        self.assertNotIn(os.path.realpath(self.run_dir), self.page)
        self.assertIn(escape(evidence_page.RUN_DIR), self.page)


class LargeTranscriptTest(unittest.TestCase):
    def test_a_huge_transcript_gives_a_page_under_the_cap_that_says_it_was_cut(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = os.path.join(tmp, "run")
            build = RunBuilder(run_dir)
            build.fan_out(FIXTURE)
            output = "x" * 3_000 + "\n"
            with open(build.parent_path, "a", encoding="utf-8") as handle:
                for number in range(4_000):
                    entry = {
                        "type": "message",
                        "id": f"{number:08x}",
                        "parentId": None,
                        "timestamp": "2026-12-02T11:00:00.000Z",
                        "message": {"role": "toolResult", "toolName": "ipython",
                                    "content": [{"type": "text", "text": output}]},
                    }  # fmt: skip
                    handle.write(json.dumps(entry) + "\n")
            build.index_cell([f"- {shard.file}: {shard.expected}" for shard in FIXTURE.shards])
            write_result(run_dir)
            self.assertGreater(os.path.getsize(build.parent_path), 12_000_000)
            page_path = os.path.join(run_dir, evidence_page.PAGE_FILE)
            size = evidence_page.write_page(run_dir, page_path)
            with open(page_path, encoding="utf-8") as handle:
                page = handle.read()
        self.assertLess(size, evidence_page.MAX_PAGE_BYTES)
        self.assertRegex(page, r"Lines [\d,]+ to [\d,]+ \([\d.,]+ MB\) were cut")
        self.assertIn("CUT", page)
        # The start and the end are both there: the task and the last cell, the index.
        self.assertIn("Do the fan-out.", page)
        self.assertIn("- c.jsonl: 33", page)
        self.assertEqual(check_html(page).errors, [])


class OddRunsTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def page_of(self, run_dir: str) -> str:
        path = os.path.join(self.tmp, "page.html")
        evidence_page.write_page(run_dir, path)
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    def test_bytes_that_are_not_json_are_shown_as_such(self):
        run_dir = os.path.join(self.tmp, "run")
        build = RunBuilder(run_dir)
        children = build.fan_out(FIXTURE)
        build.correct_index(FIXTURE)
        with open(children["worker-a"].path, "ab") as handle:
            handle.write(b'\xff\xfe{"type": <script>\n')
        write_result(run_dir)
        page = self.page_of(run_dir)
        self.assertIn("a line that is not JSON", page)
        self.assertNotIn("<script", page)

    def test_an_agent_error_is_shown_apart_from_a_failure(self):
        run_dir = os.path.join(self.tmp, "run")
        RunBuilder(run_dir)
        result = {"status": "agent_error", "resolved": False, "reasons": []}
        result["agent"] = {"first_error": "500 upstream exploded", "exit_code": 1}
        with open(RunPaths.of(run_dir).result, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        page = self.page_of(run_dir)
        self.assertIn("— agent error</h1>", page)
        self.assertIn("500 upstream exploded", page)
        self.assertIn('<p class="error">The agent failed on its own', page)
        self.assertIn("No verdict", page)

    def test_a_captured_run_without_a_result_is_regraded_from_its_fixture(self):
        page = self.page_of(materialize("child-fail", self.tmp))
        self.assertIn("regraded from the run dir", page)
        self.assertIn("notice: completed_without_reply", page)
        self.assertEqual(check_html(page).errors, [])

    def test_report_py_on_a_run_dir_writes_its_evidence_page(self):
        run_dir = os.path.join(self.tmp, "run")
        build = RunBuilder(run_dir)
        build.fan_out(FIXTURE)
        build.correct_index(FIXTURE)
        write_result(run_dir)
        done = subprocess.run(
            [sys.executable, REPORT, run_dir], capture_output=True, timeout=60, check=True
        )
        page = json.loads(done.stdout)["html"]
        self.assertEqual(page, os.path.join(run_dir, evidence_page.PAGE_FILE))
        with open(page, encoding="utf-8") as handle:
            self.assertIn("— resolved</h1>", handle.read())


if __name__ == "__main__":
    unittest.main()
