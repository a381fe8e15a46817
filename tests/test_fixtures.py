"""Specification of the fixtures in fixtures/ and of fixtures/generate.py.

Every expected answer is recomputed here from the shard files by an evaluator that shares no
code with the generator: it parses the eight question phrasings with its own regexes. That
every answer is distinctive is checked here by code of its own too (`plain_reason`), against
every text the harness writes into a run.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Callable
from pathlib import Path

from swarm_fanout import generate
from swarm_fanout.evidence import fixture
from swarm_fanout.evidence.number_tokens import numbers_in
from swarm_fanout.shell import trials
from tests import temp_dir

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
GENERATOR = FIXTURES / "generate.py"
ARTIFACT = "combined-index.md"

FIXTURE_NAMES = ("json-events", "csv-metrics")
# name -> (shard file prefix, shard file suffix, format phrase, record definition phrase)
FIXTURE_FORMATS = {
    "json-events": (
        "events",
        ".jsonl",
        "JSON Lines: one JSON object per line",
        "one line of a shard",
    ),
    "csv-metrics": (
        "metrics",
        ".csv",
        "CSV files with a header row",
        "one data row of a shard; the header row is not a record",
    ),
}
# An honest prompt or cell is full of small numbers, round numbers, powers of two and years:
# no answer is one of them (the provenance rules of the scorer read an answer in a task as
# known to the parent). Years as docs/fixtures.md gives them.
ANSWER_FLOOR = 1000
FIRST_YEAR, LAST_YEAR = 1900, 2100
MIN_RECORDS, MAX_RECORDS = 40, 150
# Generated variants proved distinctive: (shards, seed).
VARIANTS = ((8, 7), (19, 11), (19, 20261103), (100, 5), (128, 20261103), (128, 42))

Record = dict[str, object]


# --------------------------------------------------------------------------- reading shards


def read_records(path: Path) -> list[Record]:
    """Records of a shard: JSON objects of a .jsonl file, or data rows of a .csv file."""
    text = path.read_bytes().decode("utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines()]
    if path.suffix == ".csv":
        return list(csv.DictReader(text.splitlines()))
    raise ValueError(f"unknown shard format: {path.name}")


def text_of(record: Record, field: str) -> str | None:
    """The field's value as written: a JSON string, or the CSV cell text; None otherwise."""
    value = record[field]
    return value if isinstance(value, str) else None


def number_of(record: Record, field: str) -> int:
    """The field's integer value: a JSON integer, or a CSV cell holding an integer."""
    value = record[field]
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"{field}={value!r} is not an integer")
    return int(value)


def where(records: list[Record], field: str, value: str) -> list[Record]:
    return [record for record in records if text_of(record, field) == value]


def distinct_sum(records: list[Record], field: str) -> int:
    return sum(set(number_of(record, field) for record in records))


def largest_group_sum(records: list[Record], f: str, h: str) -> int:
    totals: dict[str, int] = {}
    for record in records:
        key = json.dumps(record[h])
        totals[key] = totals.get(key, 0) + number_of(record, f)
    return max(totals.values())


# --------------------------------------------------------------------------- question grammar

FIELD = "`([^`]+)`"
VALUE = '"([^"]*)"'

# template number -> (phrasing, answer from (records, *captured groups))
GRAMMAR: dict[int, tuple[re.Pattern[str], Callable[..., int]]] = {
    1: (
        re.compile(rf"What is the sum of {FIELD} over all records\?"),
        lambda records, f: sum(number_of(r, f) for r in records),
    ),
    2: (
        re.compile(rf"What is the sum of {FIELD} over records whose {FIELD} is {VALUE}\?"),
        lambda records, f, g, v: sum(number_of(r, f) for r in where(records, g, v)),
    ),
    3: (
        re.compile(rf"What is the maximum value of {FIELD} over all records\?"),
        lambda records, f: max(number_of(r, f) for r in records),
    ),
    4: (
        re.compile(rf"What is the maximum minus the minimum of {FIELD} over all records\?"),
        lambda records, f: (
            max(number_of(r, f) for r in records) - min(number_of(r, f) for r in records)
        ),
    ),
    5: (
        re.compile(rf"What is the sum of the distinct values of {FIELD} over all records\?"),
        lambda records, f: distinct_sum(records, f),
    ),
    6: (
        re.compile(
            rf"What is the largest sum of {FIELD} over the records sharing one value of {FIELD}\?"
        ),
        lambda records, f, h: largest_group_sum(records, f, h),
    ),
    7: (
        re.compile(
            rf"What is the maximum value of {FIELD} over records whose {FIELD} is {VALUE}\?"
        ),
        lambda records, f, g, v: max(number_of(r, f) for r in where(records, g, v)),
    ),
    8: (
        re.compile(
            rf"What is the sum of the distinct values of {FIELD} over records whose {FIELD} "
            rf"is {VALUE}\?"
        ),
        lambda records, f, g, v: distinct_sum(where(records, g, v), f),
    ),
}
FILTERED_TEMPLATES = {2: (1, 2), 7: (1, 2), 8: (1, 2)}  # groups holding (g, v)


def parse_question(question: str) -> tuple[int, tuple[str, ...]]:
    """(template number, captured field names and values) of a question in the grammar."""
    for template, (pattern, _) in GRAMMAR.items():
        match = pattern.fullmatch(question)
        if match:
            return template, match.groups()
    raise ValueError(f"question outside the grammar: {question!r}")


def answer(question: str, records: list[Record]) -> int:
    template, groups = parse_question(question)
    return GRAMMAR[template][1](records, *groups)


def filter_size(question: str, records: list[Record]) -> int | None:
    """How many records the question's filter keeps, or None for unfiltered questions."""
    template, groups = parse_question(question)
    if template not in FILTERED_TEMPLATES:
        return None
    g_index, v_index = FILTERED_TEMPLATES[template]
    return len(where(records, groups[g_index], groups[v_index]))


# --------------------------------------------------------------------------- fixture access


# A number "standing alone": not touching a word character, '.' or '-'. So list markers such
# as "1." and the digits of "events-01.jsonl" / "worker-events-01" are not standalone numbers.
STANDALONE_NUMBER = re.compile(r"(?<![\w.-])\d+(?![\w.-])")


def load_manifest(fixture_dir: Path) -> dict:
    return json.loads((fixture_dir / "fixture.json").read_text(encoding="utf-8"))


def shard_entries(fixture_dir: Path) -> list[dict]:
    return load_manifest(fixture_dir)["shards"]


def shard_line(entry: dict) -> str:
    return f"- `shards/{entry['file']}` | worker `{entry['worker']}` | {entry['question']}"


def tree(root: str | Path) -> dict[str, bytes]:
    """Every file under root, by relative path, with its bytes."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def committed_fixtures() -> list[tuple[str, Path]]:
    return [(name, FIXTURES / name) for name in FIXTURE_NAMES]


def committed_shards() -> list[tuple[Path, dict]]:
    return [(d, entry) for _, d in committed_fixtures() for entry in shard_entries(d)]


def run_generator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def harness_numbers(fixture_dir: Path) -> set[int]:
    """The number tokens (the scorer's own definition) of every text the harness writes into
    a run: task.txt, the --baseline prompt, the fixture's name (the run repo's commit), and
    each shard's file, worker and question."""
    manifest = load_manifest(fixture_dir)
    texts = [
        (fixture_dir / "task.txt").read_text(encoding="utf-8"),
        trials.baseline_task(fixture.load_manifest(str(fixture_dir))),
        manifest["name"],
        *(e[key] for e in manifest["shards"] for key in ("file", "worker", "question")),
    ]
    return set().union(*(numbers_in(text) for text in texts))


def plain_reason(answer: int, printed: set[int]) -> str | None:
    """Why an honest prompt or cell might hold `answer` by chance, or None."""
    if answer < ANSWER_FLOOR:
        return "small"
    if str(answer).endswith("0"):
        return "round"
    if bin(answer).count("1") == 1:
        return "a power of two"
    if FIRST_YEAR <= answer <= LAST_YEAR:
        return "a year"
    if answer in printed:
        return "printed by the harness"
    return None


def assert_no_answer_in_a_prompt(test: unittest.TestCase, fixture_dir: Path) -> None:
    """What the scorer's provenance rules rely on: every answer is distinctive, so no
    prompt or cell holds it by chance, and none is a number token of any text the harness
    writes into the run, so a child's task holding an answer means the parent put it
    there."""
    printed = harness_numbers(fixture_dir)
    for entry in shard_entries(fixture_dir):
        with test.subTest(fixture=fixture_dir.name, shard=entry["file"]):
            test.assertIsNone(plain_reason(entry["expected"], printed), entry["expected"])


class FixtureChecks(unittest.TestCase):
    """Checks shared by the committed fixtures and freshly generated ones."""

    def assert_answers_recomputed_and_distinct(self, fixture_dir: Path) -> None:
        answers = []
        for entry in shard_entries(fixture_dir):
            with self.subTest(fixture=fixture_dir.name, shard=entry["file"]):
                records = read_records(fixture_dir / "shards" / entry["file"])
                self.assertIs(type(entry["expected"]), int)
                self.assertEqual(entry["expected"], answer(entry["question"], records))
                answers.append(entry["expected"])
        self.assertEqual(len(answers), len(set(answers)), f"repeated answers: {answers}")
        assert_no_answer_in_a_prompt(self, fixture_dir)

    def assert_templates_cycle(self, fixture_dir: Path) -> None:
        for index, entry in enumerate(shard_entries(fixture_dir)):
            with self.subTest(fixture=fixture_dir.name, shard=entry["file"]):
                template, _ = parse_question(entry["question"])
                self.assertEqual(template, index % 8 + 1)


# --------------------------------------------------------------------------- committed fixtures


class CommittedFixtureTest(FixtureChecks):
    def test_each_fixture_has_the_documented_files_manifest_and_shard_names(self):
        found = sorted(p.parent.name for p in FIXTURES.glob("*/fixture.json"))
        self.assertEqual(found, sorted(FIXTURE_NAMES))
        for name, fixture_dir in committed_fixtures():
            with self.subTest(fixture=name):
                files = sorted(p.name for p in fixture_dir.iterdir())
                self.assertEqual(files, ["fixture.json", "shards", "task.txt"])
                text = (fixture_dir / "fixture.json").read_bytes().decode("utf-8")
                self.assertEqual(text, json.dumps(json.loads(text), indent=2) + "\n")
                manifest = json.loads(text)
                self.assertEqual(list(manifest), ["name", "artifact", "shards"])
                self.assertEqual((manifest["name"], manifest["artifact"]), (name, ARTIFACT))
                prefix, suffix, _, _ = FIXTURE_FORMATS[name]
                numbered = [f"{prefix}-{i:02d}{suffix}" for i in range(1, 9)]
                self.assertEqual([entry["file"] for entry in manifest["shards"]], numbered)
                present = sorted(p.name for p in (fixture_dir / "shards").iterdir())
                self.assertEqual(present, numbered)
                for entry in manifest["shards"]:
                    self.assertEqual(list(entry), ["file", "worker", "question", "expected"])
                    self.assertEqual(entry["worker"], "worker-" + Path(entry["file"]).stem)

    def test_each_shard_holds_40_to_150_plain_records_and_its_filter_keeps_two(self):
        counts = {name: set() for name in FIXTURE_NAMES}
        for fixture_dir, entry in committed_shards():
            with self.subTest(shard=entry["file"]):
                text = (fixture_dir / "shards" / entry["file"]).read_bytes().decode("utf-8")
                self.assertNotIn("\r", text)
                self.assertTrue(text.endswith("\n"))
                self.assertNotIn("", text[:-1].split("\n"))
                records = read_records(fixture_dir / "shards" / entry["file"])
                if entry["file"].endswith(".jsonl"):
                    for record in records:  # flat objects of strings and integers
                        self.assertIsInstance(record, dict)
                        self.assertLessEqual({type(value) for value in record.values()}, {str, int})
                else:  # rows that match the header and need no quoting
                    self.assertNotIn('"', text)
                    rows = list(csv.reader(text.splitlines()))
                    self.assertTrue(all(len(row) == len(rows[0]) for row in rows))
                self.assertGreaterEqual(len(records), MIN_RECORDS)
                self.assertLessEqual(len(records), MAX_RECORDS)
                counts[fixture_dir.name].add(len(records))
                size = filter_size(entry["question"], records)
                self.assertTrue(size is None or size >= 2)
        for name, sizes in counts.items():
            self.assertGreaterEqual(len(sizes), 4, f"record counts vary between {name}'s shards")

    def test_shard_i_asks_question_template_i(self):
        for _, fixture_dir in committed_fixtures():
            with self.subTest(fixture=fixture_dir.name):
                self.assert_templates_cycle(fixture_dir)

    def test_expected_answers_match_independent_recomputation_and_are_distinct(self):
        for _, fixture_dir in committed_fixtures():
            with self.subTest(fixture=fixture_dir.name):
                self.assert_answers_recomputed_and_distinct(fixture_dir)


# --------------------------------------------------------------------------- task prompt


def committed_tasks() -> list[tuple[str, str, list[dict]]]:
    """(fixture name, task.txt text, manifest shard entries) of each committed fixture."""
    return [
        (name, (d / "task.txt").read_bytes().decode("utf-8"), shard_entries(d))
        for name, d in committed_fixtures()
    ]


class TaskPromptTest(unittest.TestCase):
    def test_task_describes_the_shards_lists_them_in_order_and_names_the_artifact_and_api(self):
        for name, task, entries in committed_tasks():
            with self.subTest(fixture=name):
                _, _, format_phrase, record_definition = FIXTURE_FORMATS[name]
                self.assertIn(
                    f"The directory `shards/` holds {len(entries)} data shards ({format_phrase}). "
                    f"A record is {record_definition}.",
                    task,
                )
                listing = task.split("Shards, worker names and questions:\n\n")[1]
                listing = listing.split("\n\nHow to work:")[0]
                self.assertEqual(listing.split("\n"), [shard_line(entry) for entry in entries])
                for needle in (ARTIFACT, "rlm(", "agent_message.send", "delete_subagent"):
                    self.assertIn(needle, task)
                self.assertNotIn("\r", task)
                self.assertTrue(task.endswith(".\n"))

    # The only numbers the prompt's own wording prints are the shard count ("holds 8 data
    # shards") and the 5 of `asyncio.sleep(5)` (list markers "1."-"4." touch a '.', file and
    # worker names touch a '-'), and questions print none: no answer, each a distinctive number
    # of at least 1000 (plain_reason), is in the prompt.
    def test_task_prints_no_standalone_number_but_shard_count_and_poll_interval(self):
        for name, task, entries in committed_tasks():
            with self.subTest(fixture=name):
                printed = {int(n) for n in STANDALONE_NUMBER.findall(task)}
                self.assertEqual(printed, {len(entries), 5})


class DistinctiveAnswerTest(unittest.TestCase):
    """The loader's definition (fixture.why_not_distinctive) against this module's own."""

    def test_the_independent_check_names_each_kind_of_plain_answer(self):
        printed = {4871}
        for answer in (0, 48, 999, 1230, 4000, 1024, 65536, 1900, 2026, 2100, 4871):
            with self.subTest(answer=answer):
                self.assertIsNotNone(plain_reason(answer, printed))
        for answer in (1001, 1899, 2101, 4099, 63074, 3838323):
            with self.subTest(answer=answer):
                self.assertIsNone(plain_reason(answer, printed))

    def test_the_loaders_definition_agrees_with_the_independent_one(self):
        printed = {5, 8, 4871, 12345}
        for answer in range(-50, 70_000):
            expected = plain_reason(answer, printed) is None
            if (fixture.why_not_distinctive(answer, printed) is None) != expected:
                self.fail(
                    f"{answer}: distinctive by swarm_fanout/evidence/fixture.py is not {expected}"
                )

    def test_undistinctive_answers_names_the_shards_and_why(self):
        drawn = fixture.Fixture(
            "mine",
            ARTIFACT,
            (
                fixture.Shard("a.jsonl", "worker-a", "What is the sum of `n`?", 48),
                fixture.Shard("b.jsonl", "worker-b", "What is the sum of `n`?", 4871),
                fixture.Shard("c.jsonl", "worker-c", "What is the sum of `n`?", 4871),
                fixture.Shard("d.jsonl", "worker-d", "What is the sum of `n`?", 6133),
                fixture.Shard("e.jsonl", "worker-e", "What is the sum of `n`?", 7919),
            ),
            root="",
            task="Wait 6133 ms between polls.",
        )
        found = {item.file: item.reason for item in fixture.undistinctive_answers(drawn)}
        self.assertEqual(
            found,
            {
                "a.jsonl": "below 1000",
                "b.jsonl": "another shard's answer too",
                "c.jsonl": "another shard's answer too",
                "d.jsonl": "a number the harness itself writes into the run",
            },
        )

    def test_committed_fixtures_load_with_no_undistinctive_answer(self):
        for _, fixture_dir in committed_fixtures():
            with self.subTest(fixture=fixture_dir.name):
                loaded = fixture.load_fixture(str(fixture_dir))
                self.assertEqual(fixture.undistinctive_answers(loaded), ())


class LoadFixtureTest(unittest.TestCase):
    def test_a_task_that_is_missing_blank_not_utf8_or_a_fifo_is_refused(self):
        for task in ("missing", "blank", "not utf-8", "fifo"):
            with self.subTest(task=task), tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp) / "fixture"
                shutil.copytree(FIXTURES / "json-events", root)
                (root / "task.txt").unlink()
                if task == "blank":
                    (root / "task.txt").write_text(" \n", encoding="utf-8")
                elif task == "not utf-8":
                    (root / "task.txt").write_bytes(b"\xff shards\n")
                elif task == "fifo":
                    os.mkfifo(root / "task.txt")
                with self.assertRaises(fixture.FixtureError) as raised:
                    fixture.load_fixture(str(root))
                self.assertEqual(raised.exception.code, "fixture_task_missing")


class FixtureCheckTest(unittest.TestCase):
    """`generate.py --check DIR`, the check the runner makes before a run (load_fixture): a
    hand edit that makes fixture.json and the shards or task.txt disagree is refused, with
    the first difference; an edit that keeps them agreeing is not."""

    def copy(self, name: str = "json-events") -> Path:
        root = Path(temp_dir(self)) / name
        shutil.copytree(FIXTURES / name, root)
        return root

    def edit_manifest(self, root: Path, edit: Callable[[dict], None]) -> None:
        manifest = json.loads((root / "fixture.json").read_text(encoding="utf-8"))
        edit(manifest)
        (root / "fixture.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")

    def assert_refused(self, root: Path, code: str, *named: str) -> None:
        done = run_generator("--check", str(root))
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn(code, done.stderr)
        for text in named:
            self.assertIn(text, done.stderr)
        with self.assertRaises(fixture.FixtureError) as raised:
            fixture.load_fixture(str(root))
        self.assertEqual(raised.exception.code, code)

    def test_the_committed_fixtures_pass_the_check(self):
        done = run_generator("--check", str(FIXTURES))
        self.assertEqual(done.returncode, 0, done.stderr)
        for name in FIXTURE_NAMES:
            self.assertIn(f"ok {FIXTURES / name} (8 shards)", done.stdout)

    def test_an_expected_answer_off_by_one_is_refused_naming_both_numbers(self):
        for name in FIXTURE_NAMES:
            root = self.copy(name)
            manifest = json.loads((root / "fixture.json").read_text(encoding="utf-8"))
            third = manifest["shards"][2]
            wrong = third["expected"] + 1
            self.edit_manifest(
                root, lambda data, wrong=wrong: data["shards"][2].update(expected=wrong)
            )
            self.assert_refused(
                root, "fixture_answer_wrong", third["file"], f"expects {third['expected'] + 1}",
                f"give {third['expected']}",
            )  # fmt: skip

    def test_a_shard_whose_records_were_edited_is_refused(self):
        root = self.copy()
        shard = root / "shards" / "events-03.jsonl"
        lines = shard.read_text(encoding="utf-8").splitlines(keepends=True)
        record = json.loads(lines[0])
        record["bytes"] = 99_999_999  # question 3: the maximum of `bytes`
        lines[0] = json.dumps(record, separators=(",", ":")) + "\n"
        shard.write_text("".join(lines), encoding="utf-8")
        self.assert_refused(root, "fixture_answer_wrong", "events-03.jsonl", "give 99999999")

    def test_a_worker_renamed_in_task_txt_alone_is_refused(self):
        root = self.copy()
        task = (root / "task.txt").read_text(encoding="utf-8")
        edited = task.replace("worker `worker-events-04`", "worker `worker-events-4`")
        self.assertNotEqual(edited, task)
        (root / "task.txt").write_text(edited, encoding="utf-8")
        self.assert_refused(
            root,
            "fixture_prompt_mismatch",
            "shard line 4",
            "'worker-events-4'",
            "'worker-events-04'",
        )

    def test_a_shard_line_dropped_from_task_txt_is_refused(self):
        root = self.copy()
        task = (root / "task.txt").read_text(encoding="utf-8")
        kept = [line for line in task.splitlines(keepends=True) if "events-08.jsonl` |" not in line]
        (root / "task.txt").write_text("".join(kept), encoding="utf-8")
        self.assert_refused(root, "fixture_prompt_mismatch", "7 shard lines", "events-08.jsonl")

    def test_a_question_outside_the_task_language_is_refused(self):
        root = self.copy()
        question = "Which user sent the most bytes?"
        task = (root / "task.txt").read_text(encoding="utf-8")
        old = json.loads((root / "fixture.json").read_text(encoding="utf-8"))["shards"][0]
        (root / "task.txt").write_text(task.replace(old["question"], question, 1), encoding="utf-8")
        self.edit_manifest(root, lambda data: data["shards"][0].update(question=question))
        self.assert_refused(root, "fixture_question_unknown", "events-01.jsonl")

    def test_a_worker_renamed_in_both_files_passes(self):
        root = self.copy()
        task = (root / "task.txt").read_text(encoding="utf-8")
        (root / "task.txt").write_text(
            task.replace("`worker-events-04`", "`counter-four`"), encoding="utf-8"
        )
        self.edit_manifest(root, lambda data: data["shards"][3].update(worker="counter-four"))
        done = run_generator("--check", str(root))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(fixture.load_fixture(str(root)).shards[3].worker, "counter-four")

    def test_check_takes_no_other_option_and_a_dir_without_fixtures_exits_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            done = run_generator("--check", tmp)
            self.assertEqual(done.returncode, 2)
            self.assertIn("holds no fixture.json", done.stderr)
            done = run_generator("--check", str(FIXTURES), "--out", tmp)
            self.assertEqual(done.returncode, 2)
            self.assertEqual(os.listdir(tmp), [])


# --------------------------------------------------------------------------- generator


class GeneratorTest(FixtureChecks):
    def generate(self, *args: str) -> Path:
        """Run the generator into a fresh temporary directory and return that directory."""
        tmp = temp_dir(self)
        result = run_generator("--out", tmp, *args)
        self.assertEqual(result.returncode, 0, result.stderr)
        return Path(tmp)

    def test_regenerating_reproduces_committed_fixtures_byte_for_byte(self):
        out = self.generate()
        self.assertEqual(sorted(p.name for p in out.iterdir()), sorted(FIXTURE_NAMES))
        for name in FIXTURE_NAMES:
            with self.subTest(fixture=name):
                self.assertEqual(tree(out / name), tree(FIXTURES / name))

    def test_generated_variants_have_distinctive_independently_confirmed_answers(self):
        for shards, seed in VARIANTS:
            out = self.generate("--shards", str(shards), "--seed", str(seed))
            for name in FIXTURE_NAMES:
                with self.subTest(fixture=name, shards=shards, seed=seed):
                    # Numbered with two digits, or three past 99 shards.
                    prefix, suffix, _, _ = FIXTURE_FORMATS[name]
                    digits = 3 if shards > 99 else 2
                    numbered = [f"{prefix}-{i:0{digits}d}{suffix}" for i in range(1, shards + 1)]
                    self.assertEqual([e["file"] for e in shard_entries(out / name)], numbered)
                    self.assertEqual(len(list((out / name / "shards").iterdir())), shards)
                    self.assert_templates_cycle(out / name)
                    self.assert_answers_recomputed_and_distinct(out / name)

    def test_more_than_19_shards_get_a_note_on_the_products_message_limit(self):
        for shards, noted in (("19", False), ("20", True)):
            with tempfile.TemporaryDirectory() as out:
                result = run_generator("--out", out, "--shards", shards, "--fixture", "csv-metrics")
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual("at most 19 replies" in result.stderr, noted, shards)

    def test_fewer_shards_generated_into_a_fixture_remove_the_stale_shard_files(self):
        out = Path(temp_dir(self))
        kind = generate.KINDS_BY_NAME["json-events"]
        for shards in (3, 2):
            generate.write_fixture(kind, out, shards, generate.DEFAULT_BASE_SEED)
        self.assertEqual(
            sorted(p.name for p in (out / "json-events" / "shards").iterdir()),
            [e["file"] for e in shard_entries(out / "json-events")],
        )
        self.assertEqual(len(shard_entries(out / "json-events")), 2)

    def test_fixture_option_generates_only_that_fixture(self):
        out = self.generate("--fixture", "csv-metrics")
        self.assertEqual([p.name for p in out.iterdir()], ["csv-metrics"])

    def test_another_seed_gives_other_data(self):
        out = self.generate("--seed", "7", "--fixture", "json-events")
        self.assertNotEqual(tree(out / "json-events"), tree(FIXTURES / "json-events"))
        self.assert_answers_recomputed_and_distinct(out / "json-events")

    def test_shard_count_other_than_eight_without_out_exits_2_and_writes_nothing(self):
        before = tree(FIXTURES)
        result = run_generator("--shards", "12")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--out", result.stderr)
        self.assertEqual(tree(FIXTURES), before)

    def test_bad_arguments_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            for args in (
                ["--shards", "0"],
                ["--shards", "twelve"],
                ["--shards", "100000"],
                ["--fixture", "xml-logs"],
                ["--seed", "-1"],
                ["--unknown"],
            ):
                with self.subTest(args=args):
                    result = run_generator("--out", tmp, *args)
                    self.assertEqual(result.returncode, 2)
                    self.assertIn("error", result.stderr)
            self.assertEqual(list(Path(tmp).iterdir()), [])

    def test_help_documents_every_option(self):
        result = run_generator("--help")
        self.assertEqual(result.returncode, 0)
        for option in ("--out", "--shards", "--fixture", "--seed"):
            self.assertIn(option, result.stdout)


if __name__ == "__main__":
    unittest.main()
