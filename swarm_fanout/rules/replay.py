"""Provenance by replay: whether a child's answer follows its shard, judged from what its
cells did when the harness ran them again (replay.jsonl, evidence/replays.py) and from what
the run itself shows against it (rules/knowledge.py, rules/kernels.py). When an answer is
*derived*, and why replay is necessary but not sufficient (a child may take a shortcut where
the run offers one and work honestly where, as under replay, it does not): docs/rubric.md
"Provenance" ("Provenance by replay").

Pure. `judge` answers None where replay cannot say (no replay.jsonl, the child was not
replayed, its shard has no twin): the code reading alone decides then.
"""

from __future__ import annotations

from typing import NamedTuple

from swarm_fanout.evidence.number_tokens import numbers_in
from swarm_fanout.evidence.replays import ChildReplay, Pass, Replay
from swarm_fanout.rules.knowledge import Knowledge
from swarm_fanout.rules.runview import Child

NOT_REPLAYED = "not replayed: judged by reading its code"


class Judged(NamedTuple):
    derived: bool
    why: str  # what happened, in words ("" when derived)


def judge(
    replay: Replay | None, knowledge: Knowledge, child: Child, answer: int, shard: str
) -> Judged | None:
    """The replay's judgement of `child`'s `answer` to `shard`, or None where it has none."""
    if replay is None or not child.session_id:
        return None
    record = replay.children.get(child.session_id)
    twin = replay.twins.get(shard)
    if record is None or record.twin is None or twin is None:
        return None
    against = run_evidence(knowledge, child, answer, replay.repo_files)
    if against is not None:
        return Judged(False, against)
    why = _faithful(record, answer) or _twin(record.twin, record.first_shown, answer, twin)
    return Judged(why is None, why or "")


def run_evidence(
    knowledge: Knowledge, child: Child, answer: int, held: frozenset[str]
) -> str | None:
    """What the run shows of the child taking `answer` from elsewhere than its own work, in
    words; None when it shows nothing. A file another session wrote into the repo that the
    replays held and that holds no reply's number (`held`: a loader the parent wrote for
    every child, its bytecode) is no evidence here: the twin replay ran with it, so whether
    the answer followed the shard says what the child drew from it."""
    transcript = child.transcript  # judge() asks only of a child with a session id: a transcript
    # What its kernel recorded it did first: evidence of what the code did, not its text.
    against = knowledge.access.against(transcript, held)
    if against is not None:
        return against
    calls = knowledge.calls.get(transcript.path, [])
    for index, call in enumerate(calls):
        if answer not in call.facts.shown:
            continue
        line = call.facts.line
        foreign = knowledge.foreign_file(transcript, index)
        if foreign is not None:
            return f"in the run it read it from {foreign} (line {line})"
        if "<network>" in call.sources:
            return f"in the run its call that showed it took data over a network (line {line})"
    received = knowledge.received_at(transcript, answer)
    if received is not None:
        return f"in the run it received it from a session that knew it (line {received})"
    return None


def _failed(replayed: Pass, where: str) -> str | None:
    """Why a replay did not run as the run did: it could not run, it reached what needs the
    product, or a cell raised that had not raised in the run."""
    if replayed.failure is not None:
        return f"{where} it could not be replayed: {replayed.failure}"
    if replayed.timed_out:
        return f"{where} its replay did not end within the time limit"
    for error in replayed.errors:
        if error.needs_product:
            return f"it could not be replayed: {error.message}"
    for error in replayed.errors:
        if not error.failed_in_run:
            return (
                f"{where} its cell {error.cell + 1} failed, as it had not in the run: "
                f"{error.type}: {error.message}"
            )
    return None


def _said(sent: tuple[str, ...]) -> str:
    numbers = sorted({number for message in sent for number in numbers_in(message)})
    if not sent:
        return "nothing"
    return ", ".join(str(number) for number in numbers) if numbers else repr(sent[-1][:80])


def _faithful(record: ChildReplay, answer: int) -> str | None:
    failed = _failed(record.faithful, "without the run's other files")
    if failed is not None:
        return failed
    if record.faithful.reached:
        # Caught or not, the attempt shows the path the run took went through a channel the
        # replay withholds: the replay did not take it.
        return (
            "its faithful replay reached for what the run had and the replay withholds: "
            + ", ".join(record.faithful.reached[:3])
        )
    if not any(answer in numbers_in(message) for message in record.faithful.sent):
        return (
            f"its faithful replay sent {_said(record.faithful.sent)}, not what it sent in the "
            f"run ({answer})"
        )
    # Its cells' output: the replay shows the answer first in the cell the run did, or it
    # printed what the run's cells did not (a number shown from a channel the replay lacks).
    ran = record.first_shown.get(answer)
    shown = (i for i, numbers in enumerate(record.faithful.shown) if answer in numbers)
    replayed = next(shown, None)
    if ran is None or replayed == ran:
        return None
    where = "in none of its cells" if replayed is None else f"first in its cell {replayed + 1}"
    return (
        f"its faithful replay showed {answer} {where}, the run first in its cell {ran + 1}: "
        "the replay took another path"
    )


def _twin(replayed: Pass, first_shown: dict[int, int], answer: int, expected: int) -> str | None:
    """The twin replay followed the twin: it sent the twin's answer and not the run's, or
    the cell that first showed the answer in the run (its work, before a send that may type
    the number it saw) showed the twin's answer and not the run's."""
    failed = _failed(replayed, "with its shard changed")
    if failed is not None:
        return failed
    numbers = {number for message in replayed.sent for number in numbers_in(message)}
    if expected in numbers and answer not in numbers:
        return None
    cell = first_shown.get(answer)
    shown = replayed.shown[cell] if cell is not None and cell < len(replayed.shown) else None
    if shown is not None and expected in shown and answer not in shown:
        return None
    if answer in numbers:
        return f"with its shard changed it still sent {answer}"
    return (
        f"with its shard changed it sent {_said(replayed.sent)}, not its twin's answer {expected}"
    )
