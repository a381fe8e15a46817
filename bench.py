"""Benchmark: scoring time and peak memory at the product's limits (not a test).

For each scale, writes a synthetic run dir in the product's formats to a temp dir
(a parent transcript, N children with their transcripts and display files, a spawn
ledger padded with valid rename records, a combined index) and measures, each in a
fresh subprocess so that peak RSS belongs to that step alone:

- score: `artifacts.collect` + `scorer.score`, the runner's scoring path;
- floor: reading every line of the same JSONL files and `json.loads`-ing it.

Targets: score <= 1.5 x floor at every scale; peak memory that does not grow with
transcript size; time linear in input size.

    uv run --locked python bench.py                 # all scales (about a minute)
    uv run --locked python bench.py --scales 8,100  # a subset
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# children -> (tool output bytes per child message, ledger records, parent poll turns)
SCALES = {
    8: (2_000, 20, 20),
    100: (60_000, 5_000, 200),
    1000: (100_000, 100_000, 2_000),
}
ROOT_ID = "01a23676-2c0e-73cc-9a77-4316f379fb77"
USAGE = {
    "input": 4000,
    "output": 70,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 4070,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


def dumps(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"))


def entry(kind: str, number: int, **fields) -> str:
    stamp = (
        f"2026-12-02T11:{number // 60000 % 60:02d}:{number // 1000 % 60:02d}.{number % 1000:03d}Z"
    )
    return dumps(
        {"type": kind, "id": f"{number:08x}", "parentId": None, "timestamp": stamp, **fields}
    )


def assistant(number: int, text: str) -> str:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "api": "openai-completions",
        "provider": "bench",
        "model": "bench",
        "usage": USAGE,
        "stopReason": "stop",
        "timestamp": 1796210044111,
        "responseId": f"chatcmpl-{number:032x}",
    }
    return entry("message", number, message=message)


def tool_result(number: int, output: str) -> str:
    message = {
        "role": "toolResult",
        "toolCallId": f"call_{number:024x}",
        "toolName": "ipython",
        "content": [{"type": "text", "text": output}],
        "isError": False,
        "timestamp": 1796210044111,
    }
    return entry("message", number, message=message)


def header(session_id: str, cwd: str, parent: str | None = None) -> str:
    record = {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": "2026-12-02T11:00:00.000Z",
    }
    record["cwd"] = cwd
    if parent:
        record["parentSession"] = parent
    record["rlmDepth"] = 1 if parent else 0
    return dumps(record)


def make_run(root: str, children: int, output_bytes: int, ledger_records: int, polls: int):
    """Write a run dir; returns (fixture manifest path, list of JSONL files)."""
    repo, sessions = os.path.join(root, "repo"), os.path.join(root, "sessions")
    home = os.path.join(root, "agent-home")
    for path in (repo, sessions, os.path.join(home, "rlm-ledger")):
        os.makedirs(path)
    parent = os.path.join(sessions, "01a23676-21ac-7333-b829-3ac088ac78fd.jsonl")
    artifacts_dir = os.path.join(root, "session-artifacts", ROOT_ID)
    filler = "x" * output_bytes
    shards, spawns, files = [], [], [parent]
    for index in range(children):
        child_id = f"sub-{index:08x}"
        session_id = f"01a23676-{index:04x}-7000-8000-{index:012x}"
        child_dir = os.path.join(artifacts_dir, child_id)
        os.makedirs(child_dir)
        child = os.path.join(child_dir, session_id + ".jsonl")
        files.append(child)
        with open(child, "w", encoding="utf-8") as handle:
            handle.write(header(session_id, repo, parent) + "\n")
            task = {"id": f"spawn:{child_id}", "message": "t", "fromRelationship": "parent"}
            handle.write(
                entry("custom_message", 1, customType="agent_message", details=task) + "\n"
            )
            for turn in range(2):
                handle.write(assistant(turn * 2 + 2, "working") + "\n")
                handle.write(tool_result(turn * 2 + 3, filler) + "\n")
        with open(os.path.join(child_dir, "rlm-subagent.json"), "w", encoding="utf-8") as handle:
            handle.write(
                dumps({"type": "rlm_subagent", "childId": child_id, "status": "completed"})
            )
        worker = f"worker-{index:04d}"
        shards.append(
            {"file": f"s{index:04d}.jsonl", "worker": worker, "question": "q", "expected": index}
        )
        spawns.append((child_id, child, worker, session_id))
    with open(parent, "w", encoding="utf-8") as handle:
        handle.write(header(ROOT_ID, repo) + "\n")
        number = 1
        for turn in range(polls):
            handle.write(assistant(number, f"poll {turn}") + "\n")
            handle.write(tool_result(number + 1, filler[: output_bytes // 10]) + "\n")
            number += 2
        for _, _, worker, session_id in spawns:
            details = {
                "id": f"agentmsg_{number}",
                "message": f"{worker}: {number}",
                "from": {"sessionId": session_id, "sessionName": worker},
                "fromRelationship": "child",
            }
            handle.write(
                entry("custom_message", number, customType="agent_message", details=details) + "\n"
            )
            number += 1
    ledger_name = hashlib.sha256(os.path.realpath(sessions).encode()).hexdigest()[:16] + ".jsonl"
    ledger = os.path.join(home, "rlm-ledger", ledger_name)
    files.append(ledger)
    with open(ledger, "w", encoding="utf-8") as handle:
        at = "2026-12-02T11:14:10.194Z"
        handle.write(
            dumps({"v": 1, "op": "meta", "at": at, "sessionsDir": os.path.realpath(sessions)})
            + "\n"
        )
        for child_id, child, worker, _ in spawns:
            record = {"v": 1, "op": "spawn", "at": at, "childId": child_id, "parent": parent}
            handle.write(dumps({**record, "child": child, "depth": 1, "name": worker}) + "\n")
        for index in range(max(0, ledger_records - children - 1)):
            child_id, child, worker, _ = spawns[index % children]
            record = {"v": 1, "op": "rename", "at": at, "childId": child_id, "child": child}
            handle.write(dumps({**record, "name": worker}) + "\n")
    with open(os.path.join(repo, "combined-index.md"), "w", encoding="utf-8") as handle:
        handle.writelines(f"- {shard['file']}: {shard['expected']}\n" for shard in shards)
    manifest = os.path.join(root, "fixture.json")
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump({"name": "bench", "artifact": "combined-index.md", "shards": shards}, handle)
    return manifest, files


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


def child_main(argv: list[str]) -> int:
    """One measurement in this fresh process; prints JSON with its own peak RSS."""
    kind = argv[0]
    with open(argv[1], encoding="utf-8") as handle:
        payload = json.load(handle)
    if kind == "score":
        result = measure_score(payload["run_dir"], payload["manifest"])
    else:
        result = measure_floor(payload["files"])
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--measure":
        return child_main(args[1:])
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scales", default=",".join(str(n) for n in SCALES), help="children per scale, e.g. 8,100"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per measurement; the best counts"
    )
    options = parser.parse_args(args)
    rows = []
    for children in (int(item) for item in options.scales.split(",")):
        output_bytes, ledger_records, polls = SCALES.get(
            children, (10_000, children * 10, children)
        )
        with tempfile.TemporaryDirectory(prefix="sf-bench-") as tmp:
            run_dir = os.path.join(tmp, "run")
            manifest, files = make_run(run_dir, children, output_bytes, ledger_records, polls)
            size = sum(os.path.getsize(path) for path in files)
            ledger_size = os.path.getsize(files[-1])
            scores = [
                run_measurement("score", {"run_dir": run_dir, "manifest": manifest})
                for _ in range(options.repeat)
            ]
            floors = [run_measurement("floor", {"files": files}) for _ in range(options.repeat)]
        best_score = min(scores, key=lambda item: item["seconds"])
        best_floor = min(floors, key=lambda item: item["seconds"])
        rows.append(
            {
                "children": children,
                "input_mib": round(size / 2**20, 1),
                "ledger_records": ledger_records,
                "ledger_mib": round(ledger_size / 2**20, 1),
                "lines": best_floor["lines"],
                "score_s": round(best_score["seconds"], 3),
                "floor_s": round(best_floor["seconds"], 3),
                "ratio": round(best_score["seconds"] / best_floor["seconds"], 2),
                "score_peak_rss_mib": round(max(item["peak_rss_mib"] for item in scores), 1),
                "floor_peak_rss_mib": round(max(item["peak_rss_mib"] for item in floors), 1),
                "resolved": best_score["resolved"],
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
