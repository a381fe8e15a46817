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

from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.reporting import evidence_page, render
from swarm_fanout.reporting.grounds import quoted
from swarm_fanout.reporting.render import Cell
from swarm_fanout.rules import integrity, witness_checks
from swarm_fanout.scorer import score
from tests import temp_dir
from tests.builders import RunBuilder, rewrite, small_fixture
from tests.test_real_runs import materialize
from tests.test_report import WellFormed, check_html

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORT = os.path.join(ROOT, "report.py")
FIXTURE = small_fixture()
A, B, C = FIXTURE.shards
HOSTILE = "<script>alert(\"x\")</script> & </details> 'quoted' <!-- <b>"


def write_result(run_dir: str, **fields) -> dict:
    """result.json as the runner writes it, around the scorer's own verdict, naming a
    fixture dir beside the run that holds the fixture's manifest."""
    verdict = score(FIXTURE, collect(run_dir, FIXTURE.artifact)).to_json()
    fixture_dir = os.path.join(os.path.dirname(run_dir), "fixture")
    os.makedirs(fixture_dir, exist_ok=True)
    shards = [shard._asdict() for shard in FIXTURE.shards]
    manifest = {"name": FIXTURE.name, "artifact": FIXTURE.artifact, "shards": shards}
    with open(os.path.join(fixture_dir, "fixture.json"), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
    result = {
        "model": "test/model",
        "drive": "oneshot",
        "fixture": {"name": FIXTURE.name, "path": fixture_dir, "shards": 3},
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


def page_of(run_dir: str) -> str:
    """The run's evidence page, written where report.py writes it."""
    path = os.path.join(run_dir, evidence_page.PAGE_FILE)
    evidence_page.write_page(run_dir, path)
    with open(path, encoding="utf-8") as handle:
        return handle.read()


class EvidencePageTest(unittest.TestCase):
    """One run that fails three ways: worker-b's reply is one its transcript never sent
    (unsent_reply, at a line of the parent), worker-c is noticed without a reply, and the
    index holds a wrong answer for c.jsonl."""

    def setUp(self) -> None:
        self.run_dir = os.path.join(temp_dir(self), "run")
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
        self.parsed = check_html(self.page)

    def row(self, first: str) -> list[str]:
        return next(row for row in self.parsed.rows if row and row[0] == first)

    def why(self, code: str) -> dict[str, str]:
        """The Why table's first row of a reason code, by column."""
        headers = next(row for row in self.parsed.rows if row and row[0].startswith("reason"))
        row = next(row for row in self.parsed.rows if row and row[0].startswith(f"{code} x"))
        return dict(zip(headers, row, strict=True))

    def test_the_page_is_well_formed_and_self_contained(self):
        self.assertEqual((self.parsed.errors, self.parsed.open), ([], []))
        self.assertNotIn("script", self.parsed.tags)
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
        for name, *_ in integrity.INTEGRITY_CHECKS:
            self.assertIn(("integrity", name), listed)
        for name, *_ in witness_checks.WITNESS_CHECKS:
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
        unsent = self.why("unsent_reply")
        self.assertEqual(unsent["rests on"], f"the parent's transcript, line {failure['line']}")
        self.assertIn((unsent["rests on"], f"#{anchor}"), self.parsed.links)
        self.assertIn(anchor, self.parsed.ids)
        # The entry at that line is worker-b's reply.
        entry = self.page[self.page.index(f'id="{anchor}"') :][:400]
        self.assertIn("reply from worker-b", entry)

    def test_a_shard_reason_shows_the_childs_reply_beside_the_answer_file(self):
        # worker-c was noticed without a reply; the index gives c.jsonl 1234567.
        wrong = self.why("wrong_answer")
        self.assertEqual(wrong["the child replied"], "no reply (a notice reached the parent)")
        self.assertEqual(wrong["the answer file says"], "line 5: - c.jsonl: 1234567")
        self.assertIn('<span class="mark">1234567</span>', self.page)
        # Line 5 of the file: a heading and a blank line come first.
        self.assertIn(("line 5", "repo/combined-index.md"), self.parsed.links)

    def test_a_reasons_child_is_named_by_its_worker_beside_its_id(self):
        wrong = self.why("wrong_answer")
        child = next(c for c in self.verdict["shards"] if c["worker"] == "worker-c")["child_id"]
        # Two lines in the page: the name above the id, neither broken.
        self.assertEqual(wrong["child"], f"worker-c{child}")
        self.assertIn(f">worker-c<br>{child}</a>", self.page)

    def test_what_a_code_means_is_said_once_above_the_table_not_in_its_cells(self):
        self.assertIn(
            '<p><span class="bad">wrong_answer</span>: the shard&#x27;s line does not hold the '
            "expected answer</p>",
            self.page,
        )
        self.assertEqual(self.why("wrong_answer")["reason code"], "wrong_answer x1")

    def test_a_long_found_text_keeps_a_reading_width(self):
        # A sentence squeezed by its neighbours would wrap to a word a line.
        found = [self.why(reason["code"])["found"] for reason in self.result["reasons"]]
        long = [text for text in found if len(text) > 36]
        self.assertNotEqual(long, [])
        for text in long:
            self.assertIn(f'<td class="long" data-label="found">{escape(text)}</td>', self.page)

    def test_a_child_the_verdict_fails_is_not_drawn_as_a_green_reply(self):
        # worker-b's reply is one its transcript never sent (unsent_reply): it reached the
        # parent, but the verdict fails it, and its bar says so; worker-a's is a plain reply.
        children = {child["name"]: child["child_id"] for child in self.verdict["children"]}
        drawn = re.findall(r'<rect class="bar"[^>]* fill="([^"]+)"><title>(\S+) ', self.page)
        bars = {child_id: fill for fill, child_id in drawn}
        self.assertEqual(bars[children["worker-a"]], render.COLOURS["replied"])
        self.assertEqual(bars[children["worker-b"]], render.FLAGGED_COLOUR)
        self.assertIn(
            f"worker-b: replied; {render.FLAGGED_WORD}: answer_not_derived, unsent_reply", self.page
        )
        self.assertIn(f">{render.FLAGGED_WORD}</text>", self.page)

    def test_a_run_without_injected_failures_says_none(self):
        self.assertNotIn("failure injected", self.page)

    def test_the_failing_childrens_conversations_are_open_the_others_folded(self):
        # worker-b's reply was never sent (a reason names it), worker-c sent none.
        opened = set(re.findall(r'<details id="([^"]+)" open>', self.page))
        self.assertEqual(opened, {"child-2", "child-3"})
        self.assertIn('<details id="child-1">', self.page)
        self.assertIn('<details id="parent">', self.page)

    def test_the_conversations_hold_messages_cells_outputs_replies_and_notices(self):
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


class InjectedFailureTest(unittest.TestCase):
    """A run made with --inject-failure says so in its header and its first rows."""

    def test_the_header_and_the_summary_name_the_injection_and_its_outcome(self):
        run_dir = os.path.join(temp_dir(self), "run")
        build = RunBuilder(run_dir)
        children = build.fan_out(FIXTURE, reply=False)
        build.reply(children["worker-a"], f"{A.file}: {A.expected}")
        build.reply(children["worker-b"], f"{B.file}: {B.expected}")
        build.notice(children["worker-c"])
        build.index_cell([f"- {A.file}: {A.expected}", f"- {B.file}: {B.expected}"])
        injected = {"asked": [{"worker": "worker-c", "calls": 12}], "answered": 3}
        write_result(run_dir, injected_failures=injected, failure_accounted=False)
        page = page_of(run_dir)
        self.assertRegex(page, r"<h1>Evidence: run — NOT resolved, failure injected</h1>")
        rows = check_html(page).rows
        self.assertEqual(rows[0][0], "outcome")
        self.assertEqual(
            rows[1],
            [
                "failure injected",
                "worker-c (12 calls): the proxy answers HTTP 500, 3 calls answered so; the "
                "parent did not account for it",
            ],
        )


class RestsOnTest(unittest.TestCase):
    """Each reason of the rubric's own criteria links to the transcript line it rests on."""

    def setUp(self) -> None:
        self.run_dir = os.path.join(temp_dir(self), "run")
        self.build = RunBuilder(self.run_dir)

    def page(self) -> tuple[str, WellFormed, dict]:
        result = write_result(self.run_dir)
        page = page_of(self.run_dir)
        parsed = check_html(page)
        self.assertEqual(parsed.errors, [])
        return page, parsed, result

    def rests_on(self, parsed: WellFormed, code: str) -> tuple[str, str]:
        """The text and link of the reason's last cell."""
        row = next(row for row in parsed.rows if row and row[0].startswith(f"{code} x"))
        return next(link for link in parsed.links if link[0] == row[-1])

    def entry(self, page: str, anchor: str) -> str:
        return page[page.index(f'id="{anchor}"') :][:600]

    def test_a_wrong_answer_rests_on_the_last_write_and_shows_the_reply_it_contradicts(self):
        children = self.build.fan_out(FIXTURE, reply=False)
        for shard in FIXTURE.shards:
            self.build.reply(
                children[shard.worker], f"The count for {shard.file} is {shard.expected}."
            )
        self.build.index_cell([f"- {A.file}: 12", f"- {B.file}: 22", f"- {C.file}: 33"])
        page, parsed, result = self.page()
        codes = [reason["code"] for reason in result["reasons"]]
        self.assertEqual(codes, ["wrong_answer", "unsourced_answer"])
        text, href = self.rests_on(parsed, "wrong_answer")
        self.assertRegex(text, r"^the parent's L\d+: its last write of the answer file$")
        self.assertIn("Writing the index.", self.entry(page, href[1:]))
        # The reply that holds worker-a's number: 11, marked, beside the file's 12, marked.
        text, href = self.rests_on(parsed, "unsourced_answer")
        self.assertRegex(text, r"^the parent's L\d+: the reply$")
        self.assertIn("reply from worker-a", self.entry(page, href[1:]))
        self.assertIn(
            'The count for a.jsonl is <span class="mark">11</span>.</td>'
            '<td class="quote" data-label="the answer file says">'
            '<span class="muted"><a href="repo/combined-index.md">line 3</a></span>: - a.jsonl: '
            '<span class="mark">12</span></td>',
            page,
        )

    def test_an_answer_known_before_spawn_rests_on_the_childs_task(self):
        # The spawning cell counted each shard itself and put the count into the task.
        code = (
            "for f, name in SHARDS:\n    await rlm(f'Count {f}; it holds {count(f)}.', name=name)\n"
        )
        with self.build.cell(code):
            children = {
                s.worker: self.build.spawn(s.worker, task=f"Count {s.file}; it holds {s.expected}.")
                for s in FIXTURE.shards
            }
        for shard in FIXTURE.shards:
            self.build.reply(children[shard.worker], f"{shard.file}: {shard.expected}")
        self.build.correct_index(FIXTURE)
        page, parsed, result = self.page()
        self.assertIn("answer_known_before_spawn", [r["code"] for r in result["reasons"]])
        text, href = self.rests_on(parsed, "answer_known_before_spawn")
        self.assertRegex(text, r"^worker-a's L\d+: the task$")
        self.assertTrue(href.startswith("#child-1-L"), href)
        self.assertIn("task from the parent", self.entry(page, href[1:]))

    def test_a_child_that_never_read_its_shard_after_the_parent_counted_names_the_shortcut(self):
        self.build.assistant("Counting first.", code="answers = {f: count(f) for f in FILES}")
        self.build.tool_result("".join(f"{s.file} {s.expected}\n" for s in FIXTURE.shards))
        children = self.build.fan_out(FIXTURE)
        self.build.correct_index(FIXTURE)
        # worker-a's cell took its number by a glob over the sessions dir, not from its shard.
        glob_cell = "logs = glob.glob(os.path.join(RUN, 'sess' + 'ions', '*'))\nsend(logs)\n"

        def globbing(record: dict) -> dict:
            for part in (record.get("message") or {}).get("content") or []:
                if isinstance(part, dict) and part.get("type") == "toolCall":
                    part["arguments"]["code"] = glob_cell
            return record

        rewrite(children["worker-a"].path, globbing)
        page, _, result = self.page()
        self.assertEqual([r["code"] for r in result["reasons"]], ["answer_not_derived"])
        self.assertIn("The shortcut: the parent knew the answer before it spawned the child", page)
        self.assertIn("Shards: a.jsonl.", page)

    def test_a_missing_receipt_rests_on_the_childs_last_entry(self):
        children = self.build.fan_out(FIXTURE, reply=False)
        self.build.reply(children["worker-a"], f"{A.file}: {A.expected}")
        self.build.reply(children["worker-b"], f"{B.file}: {B.expected}")
        self.build.correct_index(FIXTURE)
        page, parsed, _ = self.page()
        text, href = self.rests_on(parsed, "missing_receipt")
        self.assertRegex(text, r"^worker-c's L\d+: its last entry$")
        last = max(int(n) for n in re.findall(r'id="child-3-L(\d+)"', page))
        self.assertEqual(href, f"#child-3-L{last}")
        row = next(row for row in parsed.rows if row and row[0].startswith("unsourced_answer x"))
        self.assertIn("no reply", row)


class QuotedTest(unittest.TestCase):
    def test_only_the_numbers_of_interest_are_marked_as_the_scorer_reads_them(self):
        cells = quoted("events-01.jsonl: 1,234 (not 12345 or 1234.5)", {1234, 1})
        self.assertEqual(
            [(cell.text, cell.tone) for cell in cells],
            [("events-01.jsonl: ", None), ("1,234", "mark"), (" (not 12345 or 1234.5)", None)],
        )

    def test_a_long_reply_is_cut_around_its_number(self):
        text = "a" * 1000 + " 4242 " + "b" * 1000
        cells = quoted(text, {4242}, limit=100)
        self.assertEqual(cells[0].text, "…")
        self.assertEqual([cell.text for cell in cells if cell.tone == "mark"], ["4242"])
        self.assertTrue(cells[-1].text.endswith("…"))
        self.assertLessEqual(sum(len(cell.text) for cell in cells), 102)


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
            page = page_of(run_dir)
        self.assertLess(len(page.encode("utf-8")), evidence_page.MAX_PAGE_BYTES)
        self.assertRegex(page, r"Lines [\d,]+ to [\d,]+ \([\d.,]+ MB\) were cut")
        self.assertIn("CUT", page)
        # The start and the end are both there: the task and the last cell, the index.
        self.assertIn("Do the fan-out.", page)
        self.assertIn("- c.jsonl: 33", page)
        self.assertEqual(check_html(page).errors, [])


class OddRunsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = temp_dir(self)

    def test_bytes_that_are_not_json_are_shown_as_such(self):
        run_dir = os.path.join(self.tmp, "run")
        build = RunBuilder(run_dir)
        children = build.fan_out(FIXTURE)
        build.correct_index(FIXTURE)
        with open(children["worker-a"].path, "ab") as handle:
            handle.write(b'\xff\xfe{"type": <script>\n')
        write_result(run_dir)
        page = page_of(run_dir)
        self.assertIn("a line that is not JSON", page)
        self.assertNotIn("<script", page)

    def test_an_agent_error_is_shown_apart_from_a_failure(self):
        run_dir = os.path.join(self.tmp, "run")
        RunBuilder(run_dir)
        result = {"status": "agent_error", "resolved": False, "reasons": []}
        result["agent"] = {"first_error": "500 upstream exploded", "exit_code": 1}
        with open(RunPaths.of(run_dir).result, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        page = page_of(run_dir)
        self.assertIn("— agent error</h1>", page)
        self.assertIn("500 upstream exploded", page)
        self.assertIn('<p class="error">The agent failed on its own', page)
        self.assertIn("No verdict", page)

    def test_a_captured_run_without_a_result_is_regraded_from_its_fixture(self):
        page = page_of(materialize("child-fail", self.tmp))
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


class WhyTableTest(unittest.TestCase):
    """A forgery that fails every shard five ways is not a forty-row Why table: a code's
    first rows, how many more, and every row folded below."""

    def test_a_code_of_many_rows_shows_its_first_and_folds_the_rest(self):
        headers = ("reason code", "shard", "child", "found")
        first = [Cell("child_did_no_work x8")] + [Cell("")] * 7
        rows = [(first[i], Cell(f"s{i}"), Cell("c"), Cell("no work")) for i in range(8)]
        rows.append((Cell("wrong_answer x1"), Cell("s0"), Cell("c"), Cell("wrong")))
        codes = ["child_did_no_work"] * 8 + ["wrong_answer"]
        table, fold = evidence_page._why_table(headers, rows, codes, "bad")
        shown = evidence_page.WHY_ROWS_PER_CODE
        self.assertEqual(table.rows[:shown], tuple(rows[:shown]))
        self.assertEqual(
            table.rows[shown][0].text, f"and {8 - shown} more child_did_no_work: every row is below"
        )
        self.assertEqual(table.rows[shown + 1], rows[8])
        self.assertEqual(len(table.rows), shown + 2)
        self.assertEqual(fold.summary, "every reason: 9 rows")
        self.assertEqual(fold.blocks[0].rows, tuple(rows))

    def test_a_short_why_table_is_shown_whole(self):
        rows = [(Cell("wrong_answer x1"), Cell("s0"))]
        (table,) = evidence_page._why_table(("reason code", "shard"), rows, ["wrong_answer"], "bad")
        self.assertEqual(table.rows, tuple(rows))


class CheckCountTest(unittest.TestCase):
    """The "N of M checks pass" lines count checks only: the witness's `kernel_record` beside
    them is a status record (how many kernels recorded what they did), with no `passed`, and no
    check."""

    def test_a_resolved_witnessed_run_says_every_check_passes_in_every_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = os.path.join(tmp, "run")
            build = RunBuilder(run_dir)
            build.fan_out(FIXTURE)
            build.correct_index(FIXTURE)
            result = write_result(run_dir)
            # As the scorer records a run whose kernels recorded what they did.
            result["verdict"]["witness"]["kernel_record"] = {"sessions": 0}
            with open(RunPaths.of(run_dir).result, "w", encoding="utf-8") as handle:
                json.dump(result, handle)
            page = page_of(run_dir)
        rows = {row[0]: row[1:] for row in check_html(page).rows if row}
        integrity_n, witness_n = len(integrity.INTEGRITY_CHECKS), len(witness_checks.WITNESS_CHECKS)
        self.assertEqual(rows["integrity checks"], [f"{integrity_n} of {integrity_n} checks pass"])
        self.assertEqual(rows["witness checks"], [f"{witness_n} of {witness_n} checks pass"])
        total = integrity_n + witness_n
        self.assertIn(f"All {total} checks pass.", page)
        self.assertIn(f"every check: {total} of {total} pass", page)
        self.assertNotIn("failing:", page)
        self.assertNotIn("kernel_record", page)


if __name__ == "__main__":
    unittest.main()
