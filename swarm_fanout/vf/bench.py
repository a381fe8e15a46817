"""`python -m swarm_fanout.vf.bench [N] [--min-shards A] [--max-shards B]`: what generating a
split costs. Loads N tasks (default 1000) of the train split twice in one process, the first
time generating every fixture, the second from the process's cache, and prints the seconds
each took, the shards generated, the bytes of shard files held per task and the process's
peak memory. A measurement, not a test: nothing here asserts on time (docs/verifiers.md,
"Measured").
"""

from __future__ import annotations

import argparse
import resource
import time

from swarm_fanout.vf import generated
from swarm_fanout.vf.taskset import SwarmFanoutConfig, SwarmFanoutTaskset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="?", type=int, default=1000)
    parser.add_argument("--min-shards", type=int, default=2)
    parser.add_argument("--max-shards", type=int, default=16)
    args = parser.parse_args()
    config = SwarmFanoutConfig(
        id="swarm-fanout",
        split="train",
        num_tasks=args.tasks,
        min_shards=args.min_shards,
        max_shards=args.max_shards,
    )
    started = time.perf_counter()
    tasks = list(SwarmFanoutTaskset(config))
    cold = time.perf_counter() - started
    started = time.perf_counter()
    list(SwarmFanoutTaskset(config))
    warm = time.perf_counter() - started
    made = [generated.generated(task.data.generation) for task in tasks]
    shards = sum(len(one.fixture.shards) for one in made)
    held = sum(len(content) for one in made for content in one.files.values())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(tasks)} tasks ({args.min_shards}-{args.max_shards} shards, {shards} shards in all): "
        f"generated in {cold:.1f} s ({cold / len(tasks) * 1000:.1f} ms a task), "
        f"again from the cache in {warm:.2f} s; shard files {held / len(tasks) / 1024:.0f} KiB "
        f"a task; peak memory {peak_mb:.0f} MiB; cache {generated.generated.cache_info()}"
    )


if __name__ == "__main__":
    main()
