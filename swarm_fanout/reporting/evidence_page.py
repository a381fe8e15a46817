"""One run's evidence page: why the verdict is what it is, on one self-contained HTML page.

    uv run --locked python report.py <run dir>      # writes <run dir>/evidence.html

The page holds the verdict per criterion; the reasons, each with the integrity or witness
failures behind it and the file and line they point at; the shard table (expected,
answered, coverage, delegation and the child that sourced it, receipt); every evidence
check; the fan-out timeline; and the conversations (reporting/conversations.py), the parent's and
each child's, each folded in a `<details>`. The transcripts share CONVERSATION_BUDGET,
so a page stays under MAX_PAGE_BYTES however large they are, and says what it cut.

`read_evidence` is the shell (it reads result.json, collects the run, reads the
transcripts); `build_evidence` is pure. report.py writes the pages.

Why one module of this size: each section of the page is a small function over one
`Evidence` and its `Places` (where a file and line link to), in the order the page shows
them, so a reader follows the page from top to bottom here.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from swarm_fanout import scorer
from swarm_fanout.evidence import artifacts
from swarm_fanout.evidence.fixture import FixtureError, load_manifest
from swarm_fanout.evidence.jsonl import read_json_object
from swarm_fanout.evidence.number_tokens import INTEGER
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.evidence.runsets import MAX_RESULT_BYTES, injected
from swarm_fanout.reporting import timeline
from swarm_fanout.reporting.conversations import (
    MAX_TEXT_CHARS,
    RUN_DIR,
    Conversation,
    Cut,
    Entry,
    read_conversation,
    shown,
)
from swarm_fanout.reporting.grounds import (
    NO_GROUNDS,
    Grounds,
    grounds_of,
    place_of,
    quoted,
    reply_of,
)
from swarm_fanout.reporting.render import (
    NONE,
    STATUS_WORDS,
    Box,
    Cell,
    Chart,
    Code,
    Fold,
    Heading,
    Paragraph,
    Table,
    dollars,
    injected_text,
    render_html,
)
from swarm_fanout.reporting.render import number as fmt
from swarm_fanout.rules import integrity, witness_checks
from swarm_fanout.rules.knowledge import SHORTCUT

PAGE_FILE = "evidence.html"
# A run whose agent failed on its own or could not be run: its environment's failure, shown
# (and counted by run sets) apart from the model's.
ERRORED = {"agent_error": "agent error", "agent_not_run": "agent not run"}
CONVERSATION_BUDGET = 2_500_000  # escaped characters of entries over all conversations
MAX_PAGE_BYTES = 4_000_000  # what an evidence page stays under
CHECK_TABLES = {"integrity": integrity.INTEGRITY_CHECKS, "witness": witness_checks.WITNESS_CHECKS}


# --- the run's evidence (the shell) -----------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    name: str  # the run dir's own name
    root: str
    result: dict | None  # result.json; None when the run left none
    verdict: dict | None  # the result's, or regraded from the run dir's own fixture.json
    regraded: bool
    timeline: timeline.Timeline
    conversations: tuple[Conversation, ...]  # the parent's, then each child's in spawn order
    grounds: Grounds = NO_GROUNDS  # what each reason rests on, and what the children said


def child_anchor(index: int) -> str:
    """The anchor of the `index`-th child (from 1, in spawn order, as in the timeline)."""
    return f"child-{index}"


def read_evidence(run_dir: str, budget: int = CONVERSATION_BUDGET) -> Evidence:
    """What the page shows of a run dir. Without a result.json (a killed run, or a captured
    one) the run is regraded when it holds its own fixture.json."""
    root = os.path.realpath(run_dir)
    result = read_json_object(RunPaths.of(root).result, [], max_bytes=MAX_RESULT_BYTES)
    verdict = result.get("verdict") if result is not None else None
    fixture = None
    if result is None and os.path.isfile(os.path.join(root, "fixture.json")):
        with contextlib.suppress(FixtureError):
            fixture = load_manifest(root)
    artifact = fixture.artifact if fixture else _artifact_of(result)
    run = artifacts.collect(root, artifact)
    if fixture is not None:
        verdict = scorer.score(fixture, run).to_json()
    shape = timeline.timeline_of(run)
    # Only transcripts where the product puts them are read: a ledger line can name any path.
    located = artifacts.transcripts_by_path(run.children)
    sources: list[tuple[str | None, str, str, str | None]] = []
    if run.parent is not None:
        sources.append((run.parent.path, "parent", "the parent", None))
    named = set()
    for index, child in enumerate(shape.children, start=1):
        path = os.path.normpath(os.path.join(root, child.transcript))
        named.add(path)
        title = f"{child.name} · {child.child_id}" + (" · deleted" if child.deleted else "")
        sources.append(
            (path if path in located else None, child_anchor(index), title, child.status)
        )
    unnamed = [(path, child_id) for path, (child_id, _) in located.items() if path not in named]
    for number, (path, child_id) in enumerate(sorted(unnamed), start=1):
        sources.append((path, f"other-{number}", f"{child_id}, which no spawn names", None))
    # Small transcripts first, each given an equal share of what is left: what a small one
    # does not use goes to the larger ones.
    order = sorted(range(len(sources)), key=lambda i: _size(sources[i][0]))
    read: dict[int, Conversation] = {}
    left = budget
    for position, i in enumerate(order):
        path, anchor, title, status = sources[i]
        share = left // (len(order) - position)
        if path is None:
            missing = "no transcript where the product puts it"
            read[i] = Conversation(anchor, title, status, "", 0, (), 0, None, (missing,))
            continue
        read[i] = read_conversation(path, share, root, anchor, title, status)
        left -= min(share, sum(entry.cost for entry in read[i].entries))
    conversations = tuple(read[i] for i in range(len(sources)))
    child_ids = {child_anchor(i): child.child_id for i, child in enumerate(shape.children, 1)}
    return Evidence(
        name=os.path.basename(root),
        root=root,
        result=result,
        verdict=verdict if isinstance(verdict, dict) else None,
        regraded=fixture is not None,
        timeline=shape,
        conversations=conversations,
        grounds=grounds_of(run, conversations, child_ids, artifact),
    )


def _artifact_of(result: dict | None) -> str | None:
    """The answer file's name, from the fixture the result names, when it is still there."""
    path = ((result or {}).get("fixture") or {}).get("path")
    if not isinstance(path, str) or not os.path.isfile(os.path.join(path, "fixture.json")):
        return None
    with contextlib.suppress(FixtureError, OSError):
        return load_manifest(path).artifact
    return None


def _size(path: str | None) -> int:
    if path is None:
        return 0
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


# --- the page (pure) --------------------------------------------------------------------------


def status_cell(result: dict | None, verdict: dict | None) -> Cell:
    """The run's outcome as the report shows it."""
    status = (result or {}).get("status")
    if status in ERRORED:
        return Cell(ERRORED[status], tone="error")
    if result is not None and status != "scored":
        return Cell(str(status or "not scored"), tone="muted")
    if result is not None and result.get("interrupted"):
        return Cell("interrupted", tone="muted")
    resolved = (result or verdict or {}).get("resolved")
    if resolved is None:
        return Cell("no verdict", tone="muted")
    return Cell("resolved", tone="good") if resolved else Cell("NOT resolved", tone="bad")


def build_evidence(evidence: Evidence, raw_prefix: str = "", back: Cell | None = None) -> list:
    """The page's blocks. `raw_prefix` is the run dir relative to where the page is written
    (links to its raw files start with it); `back` links to the report, if any."""
    result, verdict = evidence.result or {}, evidence.verdict or {}
    places = places_of(evidence, raw_prefix)
    blocks: list = []
    if back is not None:
        blocks.append(Paragraph((back,)))
    state = status_cell(evidence.result, evidence.verdict)
    injection = ", failure injected" if injected(evidence.result) else ""
    blocks.append(Heading(1, f"Evidence: {_title(evidence)} — {state.text}{injection}"))
    blocks += _summary(evidence, state)
    blocks += _criteria(verdict)
    blocks += _reasons(evidence, result, verdict, places)
    blocks += _shards(verdict, evidence)
    blocks += _checks(evidence, verdict, places)
    blocks += _findings(evidence, verdict, places)
    blocks += _timeline(evidence)
    blocks += _conversations(evidence, raw_prefix)
    return blocks


def _title(evidence: Evidence) -> str:
    """The run dir's name; a trial's, after its run set's."""
    trial = (evidence.result or {}).get("trial")
    run_set = trial.get("run_set") if isinstance(trial, dict) else None
    if isinstance(run_set, str) and run_set:
        return f"{os.path.basename(os.path.normpath(run_set))} {evidence.name}"
    return evidence.name


def _summary(evidence: Evidence, state: Cell) -> list:
    """The run at a glance: what ran and how it ended; a row only for what is known."""
    result, verdict = evidence.result or {}, evidence.verdict or {}
    fixture = result.get("fixture") or {}
    agent = result.get("agent") or {}
    efficiency = verdict.get("efficiency") or {}
    witnessed = (verdict.get("witness") or {}).get("witnessed")
    trial = result.get("trial") or {}
    known = {
        "status": result.get("status"),
        "trial": trial.get("index"),
        "fixture": fixture.get("name") and f"{fixture['name']} ({fixture.get('shards')} shards)",
        "model · drive": result.get("model") and f"{result['model']} · {result.get('drive')}",
        "agent": f"{agent.get('version', NONE)}; exit {agent.get('exit_code', NONE)}"
        if agent
        else None,
        "wall time s": agent.get("wall_time_s"),
        "tokens": efficiency.get("total_tokens"),
        "turns": efficiency.get("total_turns"),
        "cost": _cost_text(efficiency, result.get("model")),
        "witnessed": None if witnessed is None else "yes" if witnessed else "no",
        # What a client that stops at the prompt's response (ACP, §13) would have lost.
        "children running at the prompt's response": result.get("outstanding_at_response"),
        "started · finished": result.get("started_at")
        and f"{result['started_at']} · {result.get('finished_at')}",
    }
    rows = [(Cell("outcome"), state)]
    if injected(result):
        rows.append((Cell("failure injected"), _injection_cell(result)))
    for name, value in known.items():
        if value is not None and value != "":
            cell = Cell(fmt(value), numeric=True) if isinstance(value, (int, float)) else None
            rows.append((Cell(name), cell or Cell(str(value))))
    if agent.get("first_error"):
        error = shown(str(agent["first_error"]), evidence.root)
        rows.append((Cell("agent error"), Cell(error, tone="bad")))
    if agent.get("timed_out"):
        rows.append((Cell("timed out"), Cell("yes", tone="bad")))
    blocks: list = [Table((), tuple(rows))]
    if result.get("status") in ERRORED:
        blocks.append(
            Paragraph(
                "The agent failed on its own before the model answered: an error of the run's "
                "environment, counted apart from the model's failures. The verdict below is "
                "what the disk shows.",
                tone="error",
            )
        )
    if not evidence.result:
        note = "This run dir has no result.json: a run killed before it wrote one, or a capture."
        if evidence.regraded:
            note += " The verdict below is regraded from the run dir and its fixture.json."
        blocks.append(Paragraph(note, tone="warn"))
    return blocks


def _injection_cell(result: dict) -> Cell:
    """What --inject-failure asked of the proxy, what it did, and whether the parent
    accounted for the child made to fail."""
    asked = injected(result)
    answered = (result.get("injected_failures") or {}).get("answered")
    text = f"{injected_text(asked)}: the proxy answers HTTP 500"
    if isinstance(answered, int):
        text += f", {answered} call{'s' * (answered != 1)} answered so"
    accounted = result.get("failure_accounted")
    if accounted is not None:
        text += f"; the parent {'accounted' if accounted else 'did not account'} for it"
    return Cell(text, tone="warn")


def _cost_text(efficiency: dict, model) -> str | None:
    """Dollars, parent and children, as the product priced the calls; why there are none."""
    if not efficiency:
        return None
    total = efficiency.get("total_cost_usd")
    if not total:
        return dollars(total, model if isinstance(model, str) else None)
    parts = [
        f"{whose} {dollars(part)}"
        for whose, part in (
            ("parent", (efficiency.get("parent") or {}).get("cost_usd")),
            ("children", (efficiency.get("children") or {}).get("cost_usd")),
        )
        if part
    ]
    return f"{dollars(total)}" + (f" ({', '.join(parts)})" if parts else "")


def _criteria(verdict: dict) -> list:
    if not verdict:
        return [Heading(2, "Verdict"), Paragraph("No verdict: the run was not scored.")]
    rows, tones = [], []
    for name in ("resolved", *scorer.CRITERION_NAMES):
        passed = verdict.get(name)
        rows.append((Cell(name), _passed(passed)))
        tones.append(None if passed else "bad")
    for group in CHECK_TABLES:
        checks = _check_results(verdict, group)
        if checks:
            failed = [name for name, check in checks if not check.get("passed")]
            text = f"{len(checks) - len(failed)} of {len(checks)} checks pass"
            text += f"; failing: {', '.join(failed)}" if failed else ""
            rows.append((Cell(f"{group} checks"), Cell(text, tone="bad" if failed else "good")))
            tones.append("bad" if failed else None)
    return [
        Heading(2, "Verdict"),
        Paragraph("Each criterion, from the artifacts alone; resolved is all four."),
        Table(("criterion", "result"), tuple(rows), tuple(tones)),
    ]


def _passed(passed) -> Cell:
    if passed is None:
        return Cell(NONE, tone="muted")
    return Cell("pass", tone="good") if passed else Cell("FAIL", tone="bad")


def _check_results(verdict: dict, group: str) -> list[tuple[str, dict]]:
    """The group's checks: records with a `passed` flag. Beside them the witness holds
    status records (`kernel_record`: how many sessions' kernels recorded what they did), which
    are no check."""
    found = verdict.get(group) or {}
    return [
        (name, item) for name, item in found.items() if isinstance(item, dict) and "passed" in item
    ]


def _codes(group: str) -> dict[str, tuple[str, str]]:
    """Check name -> (reason code, sentence)."""
    return {name: (code, sentence) for name, code, sentence, _ in CHECK_TABLES[group]}


@dataclass(frozen=True)
class Places:
    """What a failure's file and line can link to on the page."""

    anchors: dict[tuple[str, int], str]  # (file relative to the run dir, line) -> its entry
    names: dict[str, str]  # a transcript shown on the page -> whose it is
    raw_prefix: str  # the run dir, relative to the page


def places_of(evidence: Evidence, raw_prefix: str) -> Places:
    whose = {"parent": "the parent's"}
    for index, child in enumerate(evidence.timeline.children, start=1):
        whose[child_anchor(index)] = f"{child.name}'s"
    return Places(
        anchors={
            (conversation.path, entry.line): _line_anchor(conversation, entry)
            for conversation in evidence.conversations
            for entry in conversation.entries
        },
        names={
            conversation.path: whose[conversation.anchor]
            for conversation in evidence.conversations
            if conversation.path and conversation.anchor in whose
        },
        raw_prefix=raw_prefix,
    )


def _line_anchor(conversation: Conversation, entry: Entry) -> str:
    return f"{conversation.anchor}-L{entry.line}"


def _where(item: dict, places: Places, root: str) -> Cell:
    """`file:line` of a failure or finding, linked to its entry on the page when it is
    shown, else to the raw file; a transcript shown on the page is named by its session."""
    file, line = item.get("file"), item.get("line")
    if not isinstance(file, str):
        return Cell("")
    numbered = isinstance(line, int) and line > 0
    name = places.names.get(file)
    if name:
        text = f"{name} transcript" + (f", line {line}" if numbered else "")
    else:
        text = _short_path(shown(file, root)) + (f":{line}" if numbered else "")
    anchor = places.anchors.get((file, line))
    if anchor:
        return Cell(text, f"#{anchor}")
    if os.path.isabs(file) or file.startswith(".."):
        return Cell(text)
    return Cell(text, places.raw_prefix + file)


def _short_path(path: str) -> str:
    """The last two parts of a long path: enough to tell the file, the link has the rest."""
    parts = path.split("/")
    return path if len(parts) <= 3 else "…/" + "/".join(parts[-2:])


def _reasons(evidence: Evidence, result: dict, verdict: dict, places: Places) -> list:
    """A row per reason, grouped by code: the code and what it means once, then per shard or
    child what the scorer found, what the child replied beside what the answer file says
    (the shard's numbers marked), and the file and line the reason rests on."""
    reasons = result.get("reasons") if evidence.result else verdict.get("reasons")
    warnings = verdict.get("warnings") or []
    blocks: list = [Heading(2, "Why")]
    if not reasons:
        blocks.append(Paragraph("No reasons: nothing failed." if verdict else "No reasons."))
    else:
        failures = _failures_by_code(verdict)
        shards = {
            row.get("file"): row for row in verdict.get("shards") or [] if isinstance(row, dict)
        }
        tone = "error" if result.get("status") in ERRORED else "bad"
        rows, meanings, codes = [], [], []
        for code, items in _grouped_by_code(reasons).items():
            meaning = scorer.MESSAGES.get(code, "")
            if meaning:
                meanings.append(Paragraph((Cell(code, tone=tone), Cell(f": {meaning}"))))
            for number, item in enumerate(items):
                message = shown(str(item.get("message", "")), evidence.root)
                found = message[len(meaning) :].lstrip(": ") if meaning else message
                shard = shards.get(item.get("shard")) or {}
                child_id = item.get("child_id") or shard.get("child_id")
                numbers = _shard_numbers(shard)
                where = [
                    _where(failure, places, evidence.root)
                    for failure in failures.get(code, ())
                    if item.get("child_id") in (None, failure.get("child_id"))
                ]
                place = place_of(code, child_id, numbers, evidence.grounds)
                if not where and place is not None:
                    where = [_rests_on(place, places, evidence.root)]
                codes.append(code)
                rows.append(
                    (
                        Cell(f"{code} x{len(items)}", tone=tone) if not number else Cell(""),
                        Cell(str(item.get("shard") or "")),
                        _child_link(child_id, evidence, stacked=True),
                        Cell(found),
                        _replied(child_id, numbers, evidence, places) if shard else Cell(""),
                        _answer_line(shard, evidence.grounds, places) if shard else Cell(""),
                        _joined(where),
                    )
                )
        headers = (
            "reason code", "shard", "child", "found", "the child replied",
            "the answer file says", "rests on",
        )  # fmt: skip
        kept = [i for i in range(len(headers)) if i < 4 or any(_text(row[i]) for row in rows)]
        headers = tuple(headers[i] for i in kept)
        rows = [tuple(row[i] for i in kept) for row in rows]
        blocks += meanings
        blocks += _why_table(headers, rows, codes, tone)
        blocks += _shortcut(reasons)
    if warnings:
        rows = tuple(
            (
                Cell(str(item.get("code")), tone="warn"),
                Cell(shown(str(item.get("message")), evidence.root)),
            )
            for item in warnings
        )
        blocks += [Paragraph("Warnings:"), Table(("warning", "what"), rows, ("warn",) * len(rows))]
    return blocks


WHY_ROWS_PER_CODE = 2  # rows of a reason code shown before the rest are folded away


def _why_table(headers: tuple, rows: list, codes: list[str], tone: str) -> list:
    """The Why table: the first WHY_ROWS_PER_CODE rows of each code, a line saying how many
    more there are, and every row folded below, so that a forgery failing every shard five
    ways is not forty rows tall."""
    shown, seen = [], {}
    for row, code in zip(rows, codes, strict=True):
        seen[code] = seen.get(code, 0) + 1
        if seen[code] <= WHY_ROWS_PER_CODE:
            shown.append(row)
        elif seen[code] == WHY_ROWS_PER_CODE + 1:
            more = codes.count(code) - WHY_ROWS_PER_CODE
            line = Cell(f"and {more} more {code}: every row is below", tone="muted")
            shown.append((line, *(Cell(""),) * (len(headers) - 1)))
    table = Table(headers, tuple(shown), (tone,) * len(shown))
    if len(shown) == len(rows):
        return [table]
    return [table, Fold(f"every reason: {len(rows)} rows", (Table(headers, tuple(rows)),))]


def _shortcut(reasons: list) -> list:
    """The shape of the shortcut, in words, when a reason found it (rules/knowledge.py
    SHORTCUT): the parent knew the answer before the spawn and the child did not work it
    out from its shard."""
    shards = [
        str(item.get("shard"))
        for item in reasons
        if isinstance(item, dict) and SHORTCUT in str(item.get("message", ""))
    ]
    if not shards:
        return []
    return [
        Paragraph(
            "The shortcut: the parent knew the answer before it spawned the child (a cell of "
            "its own computed it), and the child did not work it out from its shard; it took "
            f"the number by another way. Shards: {', '.join(shards)}.",
            tone="bad",
        )
    ]


def _rests_on(place: dict, places: Places, root: str) -> Cell:
    """The line a criterion's reason rests on, short: whose transcript, the line, what it is."""
    linked = _where(place, places, root)
    name = places.names.get(place["file"])
    text = f"{name} L{place['line']}" if name else linked.text
    return Cell(f"{text}: {place['what']}", linked.href)


def _text(cell) -> str:
    return "".join(part.text for part in cell) if isinstance(cell, tuple) else cell.text


def _shard_numbers(shard: dict) -> set[int]:
    """The shard's expected answer and every integer the answer file gives it."""
    found = {shard["expected"]} if isinstance(shard.get("expected"), int) else set()
    for text in shard.get("answered") or []:
        token = str(text).replace(" ", "")
        if INTEGER.match(token):
            found.add(int(token.replace(",", "")))
    return found


def _replied(child_id, numbers: set[int], evidence: Evidence, places: Places):
    """What the child replied to the parent (the reply holding one of the shard's numbers,
    else its last), those numbers marked, linked to the reply in the parent's transcript."""
    grounds = evidence.grounds
    if not child_id:
        return Cell("no child", tone="muted")
    said = reply_of(child_id, numbers, grounds)
    if said is None:
        notice = " (a notice reached the parent)" if child_id in grounds.notices else ""
        return Cell("no reply" + notice, tone="bad")
    link = _where({"file": grounds.parent, "line": said.line}, places, evidence.root)
    return (Cell(f"L{said.line}", link.href, "muted"), Cell(" "), *quoted(said.text, numbers))


def _answer_line(shard: dict, grounds: Grounds, places: Places):
    """The answer file's line for the shard, its numbers marked, linked to the file."""
    if grounds.answer_file is None:
        answered = ", ".join(map(str, shard.get("answered") or [])) or "no line"
        return Cell(answered, tone=None if shard.get("answered") else "bad")
    found = grounds.answer_lines.get(shard.get("file"))
    if found is None:
        return Cell("no line for this shard", tone="bad")
    line, text = found
    head = Cell(f"line {line}", places.raw_prefix + grounds.answer_file, "muted")
    return (head, Cell(": "), *quoted(text, _shard_numbers(shard)))


def _grouped_by_code(reasons: list) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for item in reasons:
        if isinstance(item, dict):
            groups.setdefault(str(item.get("code")), []).append(item)
    return groups


def _joined(cells: list[Cell]) -> Cell:
    """Several file:line places in one cell: the first linked, a count of the others."""
    if not cells:
        return Cell("")
    more = f" and {len(cells) - 1} more (under Evidence checks)" if len(cells) > 1 else ""
    return Cell(cells[0].text + more, cells[0].href)


def _failures_by_code(verdict: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for group in CHECK_TABLES:
        codes = _codes(group)
        for name, check in _check_results(verdict, group):
            code = codes.get(name, (name, ""))[0]
            found.setdefault(code, []).extend(check.get("failures") or [])
    return found


def _child_link(child_id, evidence: Evidence, stacked: bool = False) -> Cell:
    """The child's worker name and id, linked to its conversation (`stacked`: one above the
    other, for a table short of width)."""
    if not child_id:
        return Cell("")
    for index, child in enumerate(evidence.timeline.children, start=1):
        if child.child_id == child_id:
            joint = "\n" if stacked else " · "
            return Cell(f"{child.name}{joint}{child_id}", f"#{child_anchor(index)}")
    return Cell(str(child_id))


def _shards(verdict: dict, evidence: Evidence) -> list:
    shards = verdict.get("shards") or []
    if not shards:
        return []
    rows, tones = [], []
    for shard in shards:
        coverage, delegation = shard.get("coverage"), shard.get("delegation")
        receipt = shard.get("receipt")
        answered = shard.get("answered") or []
        rows.append(
            (
                Cell(str(shard.get("file"))),
                Cell(str(shard.get("worker"))),
                Cell(fmt(shard.get("expected")), numeric=True),
                Cell(", ".join(map(_grouped, answered)) or "none", numeric=True),
                Cell(str(coverage), tone=None if coverage == "correct" else "bad"),
                Cell(str(delegation), tone=None if delegation == "ok" else "bad"),
                _child_link(shard.get("child_id"), evidence),
                Cell(str(receipt or "none"), tone=None if receipt else "bad"),
            )
        )
        good = coverage == "correct" and delegation == "ok" and receipt
        tones.append(None if good else "bad")
    headers = (
        "shard", "worker", "expected", "answered", "coverage", "delegation",
        "child that sourced it", "receipt",
    )  # fmt: skip
    return [
        Heading(2, "Shards"),
        Paragraph(
            "Per shard: what the answer file says against the expected answer, whether its "
            "answer came from its own child's work (delegation), and what reached the parent."
        ),
        Table(headers, tuple(rows), tuple(tones)),
    ]


def _grouped(text) -> str:
    """An answered number with thousands separators; anything else as written."""
    text = str(text)
    return f"{int(text):,}" if text.isdigit() and not text.startswith("0") else text


def _checks(evidence: Evidence, verdict: dict, places: Places) -> list:
    """The failing checks, a row per failure at the file and line it points at; then every
    check, folded."""
    every, failing = [], []
    for group in CHECK_TABLES:
        codes = _codes(group)
        for name, check in _check_results(verdict, group):
            code, sentence = codes.get(name, (name, ""))
            passed = bool(check.get("passed"))
            every.append(
                (
                    Cell(group),
                    Cell(name),
                    Cell(code),
                    _passed(passed),
                    Cell(fmt(check.get("count")), numeric=True),
                    Cell(sentence),
                )
            )
            listed = check.get("failures") or []
            for failure in listed:
                failing.append(
                    (
                        Cell(f"{group}: {name}"),
                        Cell(code, tone="bad"),
                        _child_link(failure.get("child_id"), evidence),
                        _where(failure, places, evidence.root),
                        Cell(shown(str(failure.get("detail", "")), evidence.root)),
                    )
                )
            more = (check.get("count") or 0) - len(listed)
            if more > 0:
                unlisted = Cell(f"and {fmt(more)} more, not listed in the verdict", tone="muted")
                failing.append((Cell(f"{group}: {name}"), Cell(code), Cell(""), Cell(""), unlisted))
    if not every:
        return []
    blocks: list = [Heading(2, "Evidence checks")]
    blocks.append(
        Paragraph(
            "Integrity: every record the product writes about a child agrees with the others. "
            "Witness: the disk agrees with what the runner itself saw while the agent ran."
        )
    )
    if (verdict.get("witness") or {}).get("witnessed") is False:
        blocks.append(
            Paragraph(
                "The runner did not witness this run: the checks that need its witness pass "
                "without looking.",
                tone="warn",
            )
        )
    if failing:
        headers = ("check", "reason code", "child", "points at", "what")
        blocks.append(Table(headers, tuple(failing), ("bad",) * len(failing)))
    else:
        blocks.append(Paragraph(f"All {len(every)} checks pass.", tone="good"))
    failed = sum(1 for row in every if row[3].tone == "bad")
    headers = ("group", "check", "reason code", "result", "count", "what it holds")
    summary = f"every check: {len(every) - failed} of {len(every)} pass"
    tones = tuple("bad" if row[3].tone == "bad" else None for row in every)
    blocks.append(Fold(summary, (Table(headers, tuple(every), tones),)))
    return blocks


def _findings(evidence: Evidence, verdict: dict, places: Places) -> list:
    findings = verdict.get("findings") or {}
    listed = findings.get("first") or []
    if not listed:
        return []
    counts = ", ".join(f"{code} x{fmt(n)}" for code, n in (findings.get("counts") or {}).items())
    rows = tuple(
        (
            Cell(str(item.get("code")), tone="warn"),
            _where(item, places, evidence.root),
            Cell(shown(str(item.get("detail")), evidence.root)),
        )
        for item in listed
    )
    return [
        Heading(2, "Findings in agent-written files"),
        Paragraph(f"{counts}; the first {len(listed)}:"),
        Table(("code", "where", "what"), rows),
    ]


def _timeline(evidence: Evidence) -> list:
    shape = evidence.timeline
    if not shape.children:
        return [Heading(2, "Timeline"), Paragraph("No depth-1 child was spawned.")]
    links = tuple(f"#{child_anchor(i)}" for i in range(1, len(shape.children) + 1))
    return [
        Heading(2, "Timeline"),
        Paragraph(
            timeline_sentence(shape) + " A bar per child from its spawn to its last entry, "
            "linking to the child's conversation."
        ),
        Chart(shape, links, timeline.flagged_children(evidence.verdict)),
    ]


def timeline_sentence(shape: timeline.Timeline) -> str:
    makespan = None if shape.makespan_ms is None else shape.makespan_ms / 1000
    return (
        f"{len(shape.children)} children, at most {shape.max_concurrent} at once, makespan "
        f"{fmt(makespan)} s, parallelism {fmt(shape.parallelism)}."
    )


def _conversations(evidence: Evidence, raw_prefix: str) -> list:
    blocks: list = [
        Heading(2, "Conversations"),
        Paragraph(
            f"The conversations of the children that failed are open, the others folded: open "
            f"one to read it. A text longer than "
            f"{fmt(MAX_TEXT_CHARS)} characters is cut, and a long transcript shows its start "
            f"and its end. Paths inside the run dir are shown as {RUN_DIR}/…; bookkeeping "
            "entries (usage attributions, heartbeats, model settings) are counted, not shown."
        ),
    ]
    # A session id -> its conversation, so that a reply links to its sender's.
    sessions = {
        entry.session: conversation.anchor
        for conversation in evidence.conversations
        for entry in conversation.entries[:1]
        if entry.session
    }
    failing = _failing_children(evidence)
    for conversation in evidence.conversations:
        opened = conversation.anchor in failing
        blocks.append(_conversation(conversation, raw_prefix, sessions, opened))
    return blocks


def _failing_children(evidence: Evidence) -> set[str]:
    """The anchors of the children a reason names, a shard that failed, or that ended
    without a reply: their conversations are open."""
    verdict = evidence.verdict or {}
    named = {
        item.get("child_id") for item in verdict.get("reasons") or [] if isinstance(item, dict)
    }
    for shard in verdict.get("shards") or []:
        if isinstance(shard, dict) and (
            shard.get("coverage") != "correct" or shard.get("delegation") != "ok"
        ):
            named.add(shard.get("child_id"))
    return {
        child_anchor(index)
        for index, child in enumerate(evidence.timeline.children, start=1)
        if child.child_id in named or child.status != "replied"
    }


def _conversation(
    conversation: Conversation, raw_prefix: str, sessions: dict, opened: bool = False
) -> Fold:
    status = conversation.status
    summary: list[Cell] = [Cell(conversation.title)]
    if status:
        summary += [Cell(" · "), Cell(STATUS_WORDS[status], tone=_STATUS_TONES[status])]
    summary.append(
        Cell(
            f" · {fmt(len(conversation.entries))} entries shown · {_bytes(conversation.size)}"
            + (" · CUT" if conversation.cut else ""),
            tone="warn" if conversation.cut else "muted",
        )
    )
    blocks: list = []
    if conversation.path:
        linked = not os.path.isabs(conversation.path)
        blocks.append(
            Paragraph(
                (
                    Cell("raw transcript: "),
                    Cell(conversation.path, raw_prefix + conversation.path if linked else None),
                    Cell(f"; {fmt(conversation.skipped)} bookkeeping entries not shown."),
                ),
                tone="muted",
            )
        )
    for problem in conversation.problems:
        blocks.append(Paragraph(problem, tone="warn"))
    cut, told = conversation.cut, False
    for entry in conversation.entries:
        if cut and not told and entry.line > cut.last_line:
            blocks.append(_cut_notice(cut))
            told = True
        blocks.append(_entry_box(conversation, entry, sessions))
    if cut and not told:
        blocks.append(_cut_notice(cut))
    return Fold(tuple(summary), tuple(blocks), conversation.anchor, opened)


_STATUS_TONES = {"replied": "good", "failed": "warn", "dropped": "bad"}


def _cut_notice(cut: Cut) -> Paragraph:
    return Paragraph(
        f"Lines {fmt(cut.first_line)} to {fmt(cut.last_line)} ({_bytes(cut.bytes)}) were cut "
        "to keep this page small; the raw transcript has them.",
        tone="warn",
    )


def _entry_box(conversation: Conversation, entry: Entry, sessions: dict) -> Box:
    sender = sessions.get(entry.session)
    link = f"#{sender}" if sender and sender != conversation.anchor else None
    head = Paragraph(
        (
            Cell(f"L{entry.line}", tone="muted"),
            Cell(f" {entry.at[11:23] if entry.at else ''} ", tone="muted"),
            Cell(entry.title, link, entry.tone),
        )
    )
    blocks: list = [head]
    for part in entry.parts:
        more = f" … {fmt(part.left_out)} more characters cut" if part.left_out else ""
        if part.kind in ("code", "output", "data", "error") or "\n" in part.text:
            if part.label:
                blocks.append(Paragraph(part.label + ":", tone="muted"))
            blocks.append(Code(part.text + more))
        elif part.kind == "thinking":
            blocks.append(Fold("thinking", (Paragraph(part.text + more),)))
        elif part.text:
            blocks.append(Paragraph(part.text + more))
    return Box(tuple(blocks), _line_anchor(conversation, entry), entry.tone)


def _bytes(size: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("KB", 1_000)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size:,} bytes"


def write_page(run_dir: str, page: str, back: Cell | None = None, at: str | None = None) -> int:
    """Write the evidence page of `run_dir` to the file `page`; its size in bytes. `at`:
    where the page will be read from, when it is written elsewhere first (report.py writes
    into a temp dir and moves it into place); its links to the run's files are from there."""
    evidence = read_evidence(run_dir)
    where = os.path.dirname(os.path.abspath(page))
    read_from = os.path.dirname(os.path.abspath(at or page))
    prefix = os.path.relpath(evidence.root, os.path.realpath(read_from)).replace(os.sep, "/")
    blocks = build_evidence(evidence, "" if prefix == "." else prefix + "/", back)
    data = render_html(blocks, f"swarm-fanout evidence: {evidence.name}").encode("utf-8")
    os.makedirs(where, exist_ok=True)
    with open(page, "wb") as handle:
        handle.write(data)
    return len(data)
