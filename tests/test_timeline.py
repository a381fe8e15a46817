"""Fan-out timelines from timestamps, on the captured real runs; the numbers are worked out by
hand from the capture's files (ledger `at`, child transcript entries, parent replies)."""

from __future__ import annotations

import unittest
from datetime import datetime, timezone

from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.ledger import Edge
from swarm_fanout.reporting.timeline import (
    ChildTrace,
    build_timeline,
    max_concurrent,
    read_timeline,
    timeline_of,
)
from tests import temp_dir
from tests.test_real_runs import materialize


def ms(clock: str) -> int:
    """Epoch ms of a time of day on the capture's day, 2026-12-02, UTC."""
    moment = datetime.fromisoformat(f"2026-12-02T{clock}").replace(tzinfo=timezone.utc)
    return round(moment.timestamp() * 1000)


class CapturedTimelineTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = temp_dir(self)

    def test_main_capture_children_overlapped(self):
        shape = read_timeline(materialize("main", self.tmp))
        self.assertEqual(len(shape.children), 8)
        first = shape.children[0]
        # ledger spawn of shard-01; its header, first assistant message, last entry before the
        # agent_status heartbeats (11:14:20.161, 11:14:28.874); the parent's reply entry.
        self.assertEqual(first.name, "shard-01")
        self.assertEqual(first.spawn_ms, ms("11:14:10.194"))
        self.assertEqual(first.start_ms, ms("11:14:10.148"))
        self.assertEqual(first.first_response_ms, ms("11:14:10.276"))
        self.assertEqual(first.end_ms, ms("11:14:18.161"))
        self.assertEqual(first.reply_ms, ms("11:14:26.943"))
        self.assertEqual({child.status for child in shape.children}, {"replied"})
        # All 8 spawned (10.194 to 11.801) before the first ended (shard-07 at 17.608).
        self.assertEqual(shape.max_concurrent, 8)
        # First spawn 11:14:10.194 to last end, shard-05 at 11:14:18.263.
        self.assertEqual(shape.makespan_ms, 8069)
        # Σ (end - spawn): 7967 + 7221 + 7427 + 6687 + 7128 + 6789 + 6048 + 6411
        self.assertEqual(shape.child_time_ms, 55678)
        self.assertEqual(shape.parallelism, round(55678 / 8069, 3))

    def test_endturn_capture_shows_three_noticed_and_five_dropped_children(self):
        shape = read_timeline(materialize("endturn-oneshot", self.tmp))
        statuses = [child.status for child in shape.children]
        self.assertEqual(statuses, ["failed"] * 3 + ["dropped"] * 5)
        self.assertEqual(shape.children[0].notice_ms, ms("11:15:30.504"))
        # First spawn 11:15:28.985, last end (shard-08, torn down) 11:15:30.721.
        self.assertEqual(shape.makespan_ms, 1736)
        self.assertEqual(shape.max_concurrent, 8)

    def test_child_fail_capture_heartbeats_do_not_extend_a_child(self):
        shape = read_timeline(materialize("child-fail", self.tmp))
        failed = [child.name for child in shape.children if child.status == "failed"]
        self.assertEqual(failed, ["shard-05", "shard-06"])
        # shard-06's one assistant message (11:16:31.884) is its end, before shard-07 spawned
        # at 32.195: its agent_status heartbeats until 11:19:16.417 do not keep it alive.
        self.assertEqual(shape.children[5].end_ms, ms("11:16:31.884"))
        self.assertEqual(shape.max_concurrent, 7)

    def test_a_collected_run_gives_the_same_timeline_as_its_dir(self):
        root = materialize("child-fail", self.tmp)
        self.assertEqual(timeline_of(collect(root, None)), read_timeline(root))

    def test_a_run_without_children_has_an_empty_timeline(self):
        shape = read_timeline(materialize("nospawn", self.tmp))
        self.assertEqual((shape.children, shape.max_concurrent, shape.makespan_ms), ((), 0, None))


def edge(number: int, spawned: int) -> Edge:
    return Edge(
        child_id=f"sub-{number:08x}",
        child=f"/run/c{number}.jsonl",
        parent="/run/p.jsonl",
        depth=1,
        name=f"w{number}",
        spawned_at_ms=spawned,
        ledger="/l",
        spawn_line=number,
    )


class SequentialTimelineTest(unittest.TestCase):
    def test_children_that_ran_one_after_another_show_as_such(self):
        edges = [edge(1, 0), edge(2, 100), edge(3, 200)]
        traces = {
            f"/run/c{n}.jsonl": ChildTrace(f"h{n}", start, start + 10, start + 100)
            for n, start in ((1, 0), (2, 100), (3, 200))
        }
        shape = build_timeline(edges, traces, {"h1": 100, "h2": 200}, {}, "/run")
        self.assertEqual(shape.max_concurrent, 1)
        self.assertEqual(
            (shape.makespan_ms, shape.child_time_ms, shape.parallelism), (300, 300, 1.0)
        )
        self.assertEqual([c.status for c in shape.children], ["replied", "replied", "dropped"])
        self.assertEqual(shape.children[0].transcript, "c1.jsonl")

    def test_touching_intervals_do_not_overlap(self):
        self.assertEqual(max_concurrent([(0, 5), (5, 9), (2, 4)]), 2)


if __name__ == "__main__":
    unittest.main()
