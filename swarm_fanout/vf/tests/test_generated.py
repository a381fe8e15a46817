"""Generated tasks: deterministic from (split, seed, index), train and eval never sharing a
seed, the knobs obeyed, no answer in a task's data, and a generated task played and scored
as a committed fixture is."""

from __future__ import annotations

import json
import unittest

from pydantic import ValidationError

from swarm_fanout import generate
from swarm_fanout.tasks import GENERATED_QUESTIONS, parse_shards
from swarm_fanout.vf import generated
from swarm_fanout.vf.taskset import SwarmFanoutConfig, SwarmFanoutTaskset
from swarm_fanout.vf.tests.test_taskset import RolloutCase, reward_of, run


def generated_tasks(split: str = "train", **config) -> list:
    config = {"num_tasks": 12, **config}
    return list(SwarmFanoutTaskset(SwarmFanoutConfig(id="swarm-fanout", split=split, **config)))


def shard_seeds(base: int, kind: str, shard_count: int) -> set[int]:
    """The seeds the generator draws a fixture's shards from (its first attempts)."""
    of_kind = generate.KINDS_BY_NAME[kind]
    return {
        generate.shard_seed(base, of_kind, shard, attempt)
        for shard in range(1, shard_count + 1)
        for attempt in range(3)
    }


class SplitTest(unittest.TestCase):
    def test_a_task_is_the_same_for_the_same_split_seed_and_index(self):
        first, again = generated_tasks(seed=3), generated_tasks(seed=3)
        self.assertEqual(
            [task.data.model_dump() for task in first], [task.data.model_dump() for task in again]
        )
        self.assertEqual(len({task.data.prompt for task in first}), len(first))

    def test_eval_seeds_never_meet_train_seeds(self):
        # The layout's arithmetic, checked over every pair of splits, seeds and indices here:
        # base seeds are one-to-one in (split, seed, index), and say their own split.
        seen = {}
        for split in generated.SPLITS:
            for seed in (0, 1, 2, 7, 499, 500, 10**6):
                for index in (0, 1, 2, 999, 500_000, generated.MAX_TASKS - 1):
                    base = generated.base_seed(split, seed, index)
                    self.assertNotIn(base, seen, (split, seed, index, seen.get(base)))
                    seen[base] = (split, seed, index)
                    self.assertEqual(generated.split_of(base), split)
        self.assertGreater(min(seen), generate.DEFAULT_BASE_SEED)
        # ... and the seeds the generator draws shards from, for the first tasks of both.
        drawn = {}
        for split in generated.SPLITS:
            for seed in (0, 1):
                for task in generated_tasks(split, seed=seed, num_tasks=20):
                    spec = task.data.generation
                    drawn[split] = drawn.get(split, set()) | shard_seeds(
                        spec.base_seed, spec.kind, spec.shard_count
                    )
        self.assertFalse(drawn["train"] & drawn["eval"])
        committed = set()
        for kind in generate.FIXTURE_KINDS:
            committed |= shard_seeds(generate.DEFAULT_BASE_SEED, kind.name, 8)
        self.assertFalse(committed & (drawn["train"] | drawn["eval"]))

    def test_train_and_eval_prompts_differ_under_the_same_seed(self):
        train = {task.data.prompt for task in generated_tasks("train")}
        evaluation = {task.data.prompt for task in generated_tasks("eval")}
        self.assertFalse(train & evaluation)

    def test_the_knobs_bound_shards_kinds_questions_and_records(self):
        tasks = generated_tasks(
            min_shards=3,
            max_shards=5,
            fixture_kinds=["csv-metrics"],
            question_kinds=[1, 3],
            min_records=60,
            max_records=70,
            num_tasks=8,
        )
        allowed = {GENERATED_QUESTIONS[0].pattern(), GENERATED_QUESTIONS[2].pattern()}
        for task in tasks:
            made = generated.generated(task.data.generation)
            self.assertEqual(made.fixture.name, "csv-metrics")
            self.assertTrue(3 <= len(made.fixture.shards) <= 5)
            for shard in parse_shards(task.data.prompt):
                self.assertTrue(any(p.fullmatch(shard.question) for p in allowed), shard)
            for path, content in made.files.items():
                records = content.decode().count("\n") - 1  # the header row is not a record
                self.assertTrue(60 <= records <= 70, (path, records))

    def test_shard_counts_cover_the_range_asked(self):
        counts = {len(generated.generated(t.data.generation).fixture.shards) for t in
                  generated_tasks(min_shards=2, max_shards=4, num_tasks=30)}  # fmt: skip
        self.assertEqual(counts, {2, 3, 4})

    def test_knobs_out_of_range_are_refused(self):
        for bad in (
            {"min_shards": 1},
            {"max_shards": 65},
            {"min_shards": 9, "max_shards": 3},
            {"fixture_kinds": ["xml-logs"]},
            {"question_kinds": [0]},
            {"question_kinds": [len(GENERATED_QUESTIONS) + 1]},
            {"min_records": 10, "max_records": 20},
            {"max_records": 1001},
            {"seed": -1},
        ):
            with self.subTest(bad), self.assertRaises(ValidationError):
                SwarmFanoutConfig(id="swarm-fanout", split="train", **bad)

    def test_no_answer_is_in_a_generated_tasks_data(self):
        for task in generated_tasks(num_tasks=6):
            dumped = json.dumps(task.data.model_dump(mode="json"))
            for shard in generated.generated(task.data.generation).fixture.shards:
                self.assertNotIn(str(shard.expected), dumped, shard.file)

    def test_a_generated_fixture_is_made_once_per_process(self):
        spec = generated_tasks(num_tasks=1)[0].data.generation
        self.assertIs(generated.generated(spec), generated.generated(spec))


class GeneratedRolloutTest(RolloutCase):
    def first(self, **config):
        return generated_tasks(num_tasks=1, **config)[0]

    def test_setup_writes_a_generated_tasks_shards_and_commits_them(self):
        task = self.first()
        task, _ = self.played(None, task)
        made = generated.generated(task.data.generation)
        for path, content in made.files.items():
            self.assertEqual((self.runtime.workdir / path).read_bytes(), content)
        self.assertFalse((self.runtime.workdir / "fixture.json").exists())

    def test_an_honest_fan_out_over_a_generated_task_earns_one(self):
        task, trace = self.rollout("oracle", task=self.first(min_shards=5, max_shards=5))
        self.assertEqual(reward_of(task, trace), {"resolved": 1.0})
        self.assertEqual(run(task.verdict(trace))["children"], 5.0)

    def test_a_parent_that_answers_a_generated_task_itself_earns_zero(self):
        task, trace = self.rollout("no-spawn", task=self.first(split="eval"))
        self.assertEqual(reward_of(task, trace), {"resolved": 0.0})
        self.assertEqual(run(task.verdict(trace))["delegation_evidence"], 0.0)


if __name__ == "__main__":
    unittest.main()
