"""Benchmark: scoring time and peak memory at the product's limits (not a test).

For each scale, writes a synthetic run dir in the product's formats to a temp dir
(a parent transcript and the root's `--mode json` stdout stream, N children with
their transcripts and display files, a spawn ledger padded with valid rename
records, a combined index) and measures two steps:

- score: `artifacts.collect` + `scorer.score`, the runner's scoring path;
- floor: reading every line of the same JSON files (transcripts, stdout stream,
  display records, ledger) and `json.loads`-ing it.

The run is written with the tests' own builders (tests/builders.py), whose records
tests pin to the captured real runs. The simulated agent (simulated/) keeps writers of
its own on purpose: it stands in for the product, and were it to share the builders a
mistake in one would hide in both.

Time: each of `--repeat` fresh processes times its first score and floor (cold),
then times the two back to back, in pairs, for about a second. The ratio is the
median over all pairs of score / floor: a shared VM's slow spells last longer than
a pair, so they move both times of a pair alike. The times shown are the best.
Memory: one more fresh process per step runs it once, so that its peak RSS
belongs to that step alone.

Targets: score <= 1.5 x floor at every scale; peak memory that does not grow with
transcript size; time linear in input size.

    uv run --locked python bench.py                 # all scales (one to four minutes)
    uv run --locked python bench.py --scales 8,100  # a subset
    uv run --locked python bench.py --no-stream     # without the stdout stream
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from fixture import MANIFEST
from runpaths import RunPaths, display_file

# The builders live with the tests, in tests/; appended, so they shadow no harness module.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
import builders

# The product rejects a ledger of more than 32 MiB or 100 000 records (§4 "Strictness");
# the top scale's ledger comes as close to both as it can.
PRODUCT_LEDGER_LIMIT = 32 * 1024 * 1024
# children -> (what each child's replying cell prints, in bytes, ledger records, ledger
# bytes or None for whatever the records take, parent poll turns). A cell's output is in
# its toolResult twice, as `content` and as `details.stdout` (captured runs).
SCALES = {
    8: (1_000, 20, None, 20),
    100: (30_000, 5_000, None, 200),
    1000: (90_000, 100_000, PRODUCT_LEDGER_LIMIT - 64 * 1024, 2_000),
}
SPAWN_CODE = "for shard in shards:\n    await rlm(task(shard), name=worker(shard))\n"
POLL_CODE = "await asyncio.sleep(2)"


def worker(index: int) -> str:
    return f"worker-{index:04d}"


def spawn_children(
    build: builders.RunBuilder, children: int, records: int, transcripts: bool = True
) -> list[builders.Child]:
    """One parent cell spawns every child; renames that keep each child's name pad the
    ledger to `records` lines in all (its meta, a spawn per child, the renames)."""
    with build.cell(SPAWN_CODE):
        spawned = [
            build.spawn(worker(index), write_transcript=transcripts) for index in range(children)
        ]
    for index in range(max(0, records - children - 1)):
        build.rename(spawned[index % children])
    return spawned


def run_dir_for(parent: str, children: int, records: int, ledger_bytes: int | None) -> str:
    """A run dir path under `parent` whose ledger will fill `ledger_bytes` (just under
    it): every path in the ledger starts with the run dir, so its length sets the
    ledger's size, measured on the ledgers the builders write under two names. None:
    a plain `run`."""
    parent = os.path.realpath(parent)
    base = os.path.join(parent, "run")
    if ledger_bytes is None:
        return base

    def size(run_dir: str) -> int:
        build = builders.RunBuilder(run_dir)
        spawn_children(build, children, records, transcripts=False)
        written = os.path.getsize(build.ledger)
        shutil.rmtree(run_dir)
        return written

    fixed = size(base)
    per_char = size(base + "-") - fixed
    pad = max(0, (ledger_bytes - fixed) // per_char)
    if pad > 200:  # a path component has at most 255 bytes
        raise ValueError(f"a {ledger_bytes}-byte ledger needs longer paths than a dir name gives")
    return base + "-" * pad


def make_run(
    root: str,
    children: int,
    output_bytes: int,
    ledger_records: int,
    polls: int,
    stream: bool = True,
):
    """Write an honest run dir (it scores resolved, every integrity check passing).

    Returns the fixture manifest path and the JSON files the floor reads: every
    transcript, display record, stdout stream and ledger the scorer reads (the
    ledger last). `stream=False` leaves out the stdout stream that every real run has.
    """
    build = builders.RunBuilder(root, stream=stream)
    spawned = spawn_children(build, children, ledger_records)
    filler = "x" * output_bytes
    shards = [
        {"file": f"s{index:04d}.jsonl", "worker": worker(index), "question": "q", "expected": index}
        for index in range(children)
    ]
    # Replies arrive spread over the polling turns, each starting a new run (§7).
    delivered = 0
    for turn in range(polls + 1):
        if turn < polls:
            build.assistant(f"poll {turn}", code=POLL_CODE)
            build.tool_result(filler[: output_bytes // 10])
        due = children if turn == polls else (turn + 1) * children // (polls + 1)
        for index in range(delivered, due):
            shard = shards[index]
            build.reply(spawned[index], f"{shard['file']}: {shard['expected']}", output=filler)
            build.child_turn(spawned[index])  # its last call: the captured children make two
        delivered = due
    build.finish()
    build.write_index([f"- {shard['file']}: {shard['expected']}" for shard in shards])
    manifest = os.path.join(build.paths.root, MANIFEST)
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump({"name": "bench", "artifact": "combined-index.md", "shards": shards}, handle)
    files = [build.parent_path] + ([build.paths.stdout] if stream else [])
    for child in spawned:
        files += [child.path, display_file(os.path.dirname(child.path))]
    return manifest, [*files, build.ledger]


def measure_score(run_dir: str, manifest: str) -> dict:
    from artifacts import collect
    from fixture import load_manifest
    from scorer import score

    fixture = load_manifest(manifest)
    began = time.perf_counter()
    verdict = score(fixture, collect(run_dir, fixture.artifact))
    elapsed = time.perf_counter() - began
    return {"seconds": elapsed, "resolved": verdict.resolved}


def measure_floor(files: list[str]) -> dict:
    began = time.perf_counter()
    lines = 0
    for path in files:
        with open(path, "rb") as handle:
            for line in handle:
                json.loads(line)
                lines += 1
    return {"seconds": time.perf_counter() - began, "lines": lines}


# Within one process, score and floor are timed in back-to-back pairs until this
# much time has passed (at least MIN_PAIRS, at most MAX_PAIRS pairs). Each pair's
# ratio compares the two under the same conditions: on a shared VM a slow spell
# lasts longer than one pair, so it moves both of a pair's times alike.
WARM_BUDGET_S = 1.0
MIN_PAIRS = 2
MAX_PAIRS = 100


def child_main(argv: list[str]) -> int:
    """One fresh process; prints JSON with the process's own peak RSS.

    `pair`: the first (cold) score and floor, then warm pairs, alternating which of
    the two runs first. `score` or `floor`: that step once, for its peak RSS alone.
    """
    kind = argv[0]
    with open(argv[1], encoding="utf-8") as handle:
        payload = json.load(handle)

    def step(name: str) -> dict:
        if name == "score":
            return measure_score(payload["run_dir"], payload["manifest"])
        return measure_floor(payload["files"])

    if kind != "pair":
        result = step(kind)
    else:
        score, floor = step("score"), step("floor")
        result = {
            "resolved": score["resolved"],
            "lines": floor["lines"],
            "cold": [score["seconds"], floor["seconds"]],
            "pairs": [],
        }
        began = time.perf_counter()
        while len(result["pairs"]) < MIN_PAIRS or (
            len(result["pairs"]) < MAX_PAIRS and time.perf_counter() - began < WARM_BUDGET_S
        ):
            if len(result["pairs"]) % 2:
                floor_s = step("floor")["seconds"]
                score_s = step("score")["seconds"]
            else:
                score_s = step("score")["seconds"]
                floor_s = step("floor")["seconds"]
            result["pairs"].append([score_s, floor_s])
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))
    return 0


def run_measurement(kind: str, payload: dict) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(payload, handle)
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--measure", kind, handle.name],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        os.unlink(handle.name)
    return json.loads(done.stdout)


def _positive(text: str) -> int:
    if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _scales(text: str) -> list[int]:
    """`8,100,1000`: child counts, each a positive integer."""
    return [_positive(item) for item in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--measure":
        return child_main(args[1:])
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scales",
        type=_scales,
        default=list(SCALES),
        help="children per scale, e.g. 8,100 (default: 8,100,1000)",
    )
    parser.add_argument(
        "--repeat",
        type=_positive,
        default=5,
        help="fresh processes that time score and floor in pairs (default: 5)",
    )
    parser.add_argument(
        "--no-stream",
        action="store_true",
        help="leave out the root's stdout stream, which every real run has, to time "
        "the transcripts and the ledger alone",
    )
    options = parser.parse_args(args)
    rows = []
    for children in options.scales:
        output_bytes, ledger_records, ledger_bytes, polls = SCALES.get(
            children, (10_000, children * 10, None, children)
        )
        with tempfile.TemporaryDirectory(prefix="sf-bench-") as tmp:
            run_dir = run_dir_for(tmp, children, ledger_records, ledger_bytes)
            manifest, files = make_run(
                run_dir, children, output_bytes, ledger_records, polls, not options.no_stream
            )
            size = sum(os.path.getsize(path) for path in files)
            ledger_size = os.path.getsize(files[-1])
            stream = RunPaths.of(run_dir).stdout
            stream_size = os.path.getsize(stream) if stream in files else 0
            payload = {"run_dir": run_dir, "manifest": manifest, "files": files}
            runs = [run_measurement("pair", payload) for _ in range(options.repeat)]
            score_rss = run_measurement("score", payload)["peak_rss_mib"]
            floor_rss = run_measurement("floor", {"files": files})["peak_rss_mib"]
        pairs = [pair for run in runs for pair in run["pairs"]]
        per_process = [statistics.median(s / f for s, f in run["pairs"]) for run in runs]
        rows.append(
            {
                "children": children,
                "input_mib": round(size / 2**20, 1),
                "stream_mib": round(stream_size / 2**20, 1),
                "ledger_records": ledger_records,
                "ledger_mib": round(ledger_size / 2**20, 1),
                "lines": runs[0]["lines"],
                "score_s": round(min(s for s, _ in pairs), 4),
                "floor_s": round(min(f for _, f in pairs), 4),
                "ratio": round(statistics.median(s / f for s, f in pairs), 2),
                "ratio_range": [round(min(per_process), 2), round(max(per_process), 2)],
                "pairs": len(pairs),
                "cold_score_s": round(min(run["cold"][0] for run in runs), 4),
                "cold_floor_s": round(min(run["cold"][1] for run in runs), 4),
                "score_peak_rss_mib": round(score_rss, 1),
                "floor_peak_rss_mib": round(floor_rss, 1),
                "resolved": all(run["resolved"] for run in runs),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
