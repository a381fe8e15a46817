"""Benchmark: scoring time and peak memory at the product's limits (not a test).

For each shape and scale, writes a synthetic run dir in the product's formats to a temp
dir (a parent transcript and the root's `--mode json` stdout stream, N children with their
transcripts and display files, a spawn ledger padded with valid rename records, a combined
index) and times, as a user runs them, two fresh processes in alternating pairs:

- the scorer: `uv run --locked python scorer.py --fixture F RUN`;
- the floor: `uv run --locked python -c FLOOR_PROGRAM FILES`, which reads every line of
  the same JSON files (transcripts, stdout stream, display records, ledger) and
  `json.loads` it.

The ratio is the median over the pairs of scorer / floor (a shared VM's slow spells last
longer than a pair, so they move both times of a pair alike); the times shown are the
best. The scorer's peak RSS comes from one more process whose parent ran nothing else.
The shapes (SHAPES) are what the cells print: letters, rows of numbers, non-ASCII text,
and an honest parent whose polling cells print every reply received so far.

The run is written with the tests' own builders (tests/builders.py), whose records
tests pin to the captured real runs. The simulated agent (simulated/) keeps writers of
its own on purpose: it stands in for the product, and were it to share the builders a
mistake in one would hide in both.

    uv run --locked python -m tools.bench                          # every shape and scale
    uv run --locked python -m tools.bench --shapes progress --scales 100,1000
    uv run --locked python -m tools.bench --no-stream              # without the stdout stream
    uv run --locked python -m tools.bench --shapes numbers --scales 1000 --keep /tmp/runs
    uv run --locked python -m tools.bench --proxy                  # the recording proxy (below)

The recording proxy (--proxy; shell/proxy.py): time to first byte of the scripted model, direct
and through the proxy; the delay of each event of a paced SSE stream, from its send to its
arrival, direct and through the proxy (goal: under 1 ms added at the median); and the
proxy's CPU seconds while a fan-out's model calls flow through it (each child's calls and
a root call per reply, the conversations growing as the product's do).

Why one script of this size: each measurement (scoring, the recording proxy, the observer)
needs its own process harness to be measured fairly, and they share the run builders and the
reporting; it is not imported by the harness.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from swarm_fanout.evidence.fixture import MANIFEST
from swarm_fanout.evidence.runpaths import RunPaths, display_file
from swarm_fanout.shell import kernel_record
from swarm_fanout.shell.observer import POLL_S, Observer
from tests import builders

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
# What cells print, by the bench's shapes of a run:
# - ascii: letters only;
# - numbers: rows of numbers, nearly all distinct, the numbers of interest (the shards'
#   answers are their indexes) among them;
# - unicode: lines with em dashes, ellipses and check marks;
# - progress: as unicode, and the parent's polling cells print every reply received so
#   far, as an honest parent reporting its progress does (each reply repeated in every
#   later output).
SHAPES = ("ascii", "numbers", "unicode", "progress")


def cell_output(shape: str, size: int) -> str:
    """`size` characters of what a child's cell prints in `shape`."""
    if shape == "numbers":
        rows = (
            f"row {n} took {n * 7919 % 1000} ms; total {n * 104729 % 100000} events, "
            f"id={n * 2654435761 % 65536:04x}\n"
            for n in range(size // 40 + 1)
        )
    elif shape in ("unicode", "progress"):
        rows = (f"\u2713 chunk {n % 97} read \u2014 {n % 89} rows\u2026 ok\n" for n in range(size))
    else:
        rows = ("x" * 64 + "\n" for _ in range(size // 65 + 1))
    text, length = [], 0
    for row in rows:
        text.append(row)
        length += len(row)
        if length >= size:
            break
    return "".join(text)[:size]


def progress_report(shards: list[dict], received: int) -> str:
    """A polling cell's output in the progress shape: every reply received so far."""
    lines = [f"Received {received} of {len(shards)} replies \u2014 so far:"]
    lines += [f"\u2713 {s['file']}: {s['expected']}" for s in shards[:received]]
    return "\n".join(lines) + "\n"


SPAWN_CODE = "for shard in shards:\n    await rlm(task(shard), name=worker(shard))\n"
POLL_CODE = "await asyncio.sleep(2)"


def worker(index: int) -> str:
    return f"worker-{index:04d}"


def spawn_children(
    build: builders.RunBuilder, children: int, records: int, transcripts: bool = True
) -> list[builders.Child]:
    """One parent cell spawns every child; renames that keep each child's name pad the
    ledger to `records` lines in all (its meta, a spawn per child, the renames); child k
    counts shard `s<k>.jsonl`."""
    build.shard_files.update({worker(index): f"s{index:04d}.jsonl" for index in range(children)})
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
    shape: str = "ascii",
):
    """Write an honest run dir (it scores resolved, every integrity check passing).

    Returns the fixture manifest path and the JSON files the floor reads: every
    transcript, display record, stdout stream and ledger the scorer reads (the
    ledger last). `stream=False` leaves out the stdout stream that every real run has.
    `shape`: what the cells print (SHAPES).
    """
    build = builders.RunBuilder(root, stream=stream)
    spawned = spawn_children(build, children, ledger_records)
    filler = cell_output(shape, output_bytes)
    shards = [
        {"file": f"s{index:04d}.jsonl", "worker": worker(index), "question": "q", "expected": index}
        for index in range(children)
    ]
    # Replies arrive spread over the polling turns, each starting a new run (§7).
    delivered = 0
    for turn in range(polls + 1):
        if turn < polls:
            build.assistant(f"poll {turn}", code=POLL_CODE)
            if shape == "progress":
                build.tool_result(progress_report(shards, delivered))
            else:
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


def rss_main(argv: list[str]) -> int:
    """`--rss ARGV_JSON`: runs the program once, a child of a fresh process that waited for
    nothing else, and prints its peak RSS in MiB."""
    print(json.dumps({"peak_rss_mib": timed_process(json.loads(argv[0]))[1]}))
    return 0


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed_process(argv: list[str]) -> tuple[float, float]:
    """Wall seconds of a fresh process run to its end (its output discarded), and the peak
    RSS in MiB of it and the processes it waited for (`uv run` waits for its Python)."""
    began = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # wait4 reaps it and reports its resources; communicate first, so stderr never fills.
    _, stderr = process.communicate()
    elapsed = time.perf_counter() - began
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:6]} exited {process.returncode}: {stderr.decode()[-500:]}")
    return elapsed, usage.ru_maxrss / 1024


def process_pairs(run_dir: str, manifest: str, files: list[str], pairs: int) -> dict:
    """The scorer as a user runs it against the floor as a fresh process, in alternating
    pairs; the scorer's peak RSS from one more process whose parent ran nothing before."""
    uv = ["uv", "run", "--locked", "python"]
    score = [*uv, "scorer.py", "--fixture", manifest, run_dir]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(files, handle)
    floor = [*uv, "-c", FLOOR_PROGRAM, handle.name]
    bare = [*uv, "-c", "pass"]
    try:
        times = []
        starts = []
        for index in range(pairs):
            first, second = (score, floor) if index % 2 == 0 else (floor, score)
            a, b = timed_process(first)[0], timed_process(second)[0]
            times.append((a, b) if first is score else (b, a))
            starts.append(timed_process(bare)[0])
    finally:
        os.unlink(handle.name)
    done = subprocess.run(
        [sys.executable, __file__, "--rss", json.dumps(score)],
        capture_output=True,
        text=True,
        check=True,
    )
    ratios = [s / f for s, f in times]
    return {
        "scorer_s": round(min(s for s, _ in times), 3),
        "floor_s": round(min(f for _, f in times), 3),
        "ratio": round(statistics.median(ratios), 2),
        "ratio_range": [round(min(ratios), 2), round(max(ratios), 2)],
        "pairs": len(times),
        # What `uv run` and a bare interpreter cost before either program does anything.
        "start_s": round(min(starts), 3),
        "scorer_peak_rss_mib": round(json.loads(done.stdout)["peak_rss_mib"], 1),
    }


# The floor as a user would write it, run as a fresh process: `measure_floor`'s loop and
# nothing else imported (this module's own imports would be start-up the floor never needs).
FLOOR_PROGRAM = (
    "import json, sys\n"
    "with open(sys.argv[1], encoding='utf-8') as handle:\n"
    "    files = json.load(handle)\n"
    "for path in files:\n"
    "    with open(path, 'rb') as handle:\n"
    "        for line in handle:\n"
    "            json.loads(line)\n"
)


# --- the recording proxy (--proxy) --------------------------------------------------------------
#
# Three processes, so that none's threads wait on another's GIL: the upstreams (the scripted
# model, and a paced stream that stamps each SSE event with its send time), the proxy, and
# this one as the client. Time stamps are perf_counter, CLOCK_MONOTONIC on Linux, which every
# process shares. The proxy's CPU is its own process's, from getrusage at start and at stop.

PACED_EVENTS = 50  # SSE events per paced stream, each its own chunk
PACED_GAP_S = 0.002  # between two events of a paced stream
PROXY_CALLS_PER_CHILD = 3
PROXY_CLIENTS = 64  # requests in flight at once during the load
SYSTEM_PROMPT_BYTES = 6_000  # about the product's RLM system prompt with its skills
SHARD_LINE_BYTES = 90  # one line of the root's task per shard
REPLY_BYTES = 400  # a child's reply as the root's conversation carries it
CELL_BYTES = 1_200  # a child's cell and its output, per earlier call


class PacedStream(BaseHTTPRequestHandler):
    """An SSE stream of `events` chat chunks `gap` seconds apart, each stamped `t`."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response_only(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index in range(request["events"]):
            if index:
                time.sleep(request["gap"])
            chunk = {"id": "chatcmpl-paced", "choices": [], "t": time.perf_counter()}
            event = f"data: {json.dumps(chunk)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"5\r\ndata:\r\n0\r\n\r\n")


def serve_main(argv: list[str]) -> int:
    """`--serve upstream` or `--serve proxy ROUTES`: prints its addresses and CPU seconds so
    far as one JSON line, serves until stdin closes, then prints its CPU seconds again."""
    from swarm_fanout.scripted.model import ScriptedModelHandler, ScriptedModelServer
    from swarm_fanout.shell.proxy import RecordingProxy

    # The scripted model writes a reply's headers and body in two sends on a socket that
    # keeps Nagle's algorithm: a client that delays its ACK then gets the body 40 ms late,
    # which would hide the proxy's own cost in the time to the last byte.
    ScriptedModelHandler.disable_nagle_algorithm = True

    def cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    with contextlib.ExitStack() as stack:
        if argv[0] == "upstream":
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="sf-bench-"))
            model = stack.enter_context(ScriptedModelServer(os.path.join(tmp, "model-log.jsonl")))
            paced = ThreadingHTTPServer(("127.0.0.1", 0), PacedStream)
            paced.daemon_threads = True
            threading.Thread(target=paced.serve_forever, daemon=True).start()
            stack.callback(paced.server_close)
            stack.callback(paced.shutdown)
            paced_url = f"http://127.0.0.1:{paced.server_address[1]}/v1"
            ready = {"scripted": model.base_url, "paced": paced_url}
        else:
            recorder = stack.enter_context(RecordingProxy(json.loads(argv[1])))
            ready = {"port": recorder.port}
        print(json.dumps({**ready, "cpu_s": cpu_s()}), flush=True)
        sys.stdin.read()
    done = {"cpu_s": cpu_s()}
    if argv[0] == "proxy":
        done["errors"] = sum(1 for call in recorder.records() if call.error or call.status != 200)
    print(json.dumps(done), flush=True)
    return 0


@contextlib.contextmanager
def served(*argv: str):
    """A `--serve` process: yields its ready line and a dict that gets its last line."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    done: dict = {}
    try:
        yield json.loads(process.stdout.readline()), done
        process.stdin.close()
        done.update(json.loads(process.stdout.readline()))
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def post_json(client: http.client.HTTPConnection, path: str, request: dict) -> tuple:
    """Sends `request`; the seconds until the response's status line came, and its end."""
    body = json.dumps(request).encode()
    began = time.perf_counter()
    client.request("POST", path, body, {"Content-Type": "application/json"})
    response = client.getresponse()
    first_byte = time.perf_counter() - began
    response.read()
    return first_byte, time.perf_counter() - began


def event_delays(client: http.client.HTTPConnection, path: str) -> list[float]:
    """Each paced event's delay: when it was read here, less when the upstream sent it."""
    request = {"events": PACED_EVENTS, "gap": PACED_GAP_S}
    client.request("POST", path, json.dumps(request), {"Content-Type": "application/json"})
    response = client.getresponse()
    delays, pending = [], b""
    while piece := response.read1(65536):
        now = time.perf_counter()
        pending += piece
        *events, pending = pending.split(b"\n\n")
        delays += [now - json.loads(e[6:])["t"] for e in events if e.startswith(b"data: {")]
    return delays


def scripted_request(system: str, messages: list[dict]) -> dict:
    return {
        "model": "fanout",
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [{"type": "function", "function": {"name": "ipython"}}],
        "messages": [{"role": "system", "content": system}, *messages],
    }


def run_requests(children: int):
    """A fan-out's model calls: each child's PROXY_CALLS_PER_CHILD calls, its conversation
    growing by a cell a call, and a root call per reply, its conversation growing by it."""
    padding = "x" * SYSTEM_PROMPT_BYTES
    task = "".join(f"- `shards/s{n:04d}.jsonl` | worker `w-{n:04d}`\n" for n in range(children))
    task = task.ljust(children * SHARD_LINE_BYTES)
    root = f"Conversation log: /w/sessions/root.jsonl\nRecursive agent depth: 0\n{padding}"
    replies: list[dict] = []
    for child in range(children):
        system = (
            f"Conversation log: /w/session-artifacts/r/sub-{child:08x}/c.jsonl\n"
            f"Recursive agent depth: 1\n{padding}"
        )
        messages = [{"role": "user", "content": f"[task from parent]\n\nshard w-{child:04d}"}]
        for _ in range(PROXY_CALLS_PER_CHILD):
            yield scripted_request(system, messages)
            messages = [*messages, {"role": "tool", "content": "y" * CELL_BYTES}]
        replies = [*replies, {"role": "user", "content": "z" * REPLY_BYTES}]
        yield scripted_request(root, [{"role": "user", "content": task}, *replies])


def proxy_main(children: int, rounds: int) -> dict:
    with served("upstream") as (upstreams, _):
        routes = {"scripted": upstreams["scripted"], "paced": upstreams["paced"]}
        with served("proxy", json.dumps(routes)) as (ready, _):
            direct = {
                route: http.client.HTTPConnection("127.0.0.1", urllib.parse.urlsplit(url).port)
                for route, url in routes.items()
            }
            proxied = http.client.HTTPConnection("127.0.0.1", ready["port"])
            request = scripted_request("Conversation log: /w/s.jsonl", [])
            first_bytes: dict[str, list[float]] = {"direct": [], "proxy": []}
            last_bytes: dict[str, list[float]] = {"direct": [], "proxy": []}
            delays: dict[str, list[float]] = {"direct": [], "proxy": []}
            for _ in range(rounds):
                for name, client, path in (
                    ("direct", direct["scripted"], "/v1/chat/completions"),
                    ("proxy", proxied, "/scripted/chat/completions"),
                ):
                    first_byte, last_byte = post_json(client, path, request)
                    first_bytes[name].append(first_byte)
                    last_bytes[name].append(last_byte)
            for _ in range(max(1, rounds // 10)):
                delays["direct"] += event_delays(direct["paced"], "/v1/chat/completions")
                delays["proxy"] += event_delays(proxied, "/paced/chat/completions")
        with served("proxy", json.dumps(routes)) as (ready, done):
            local = threading.local()

            def send(request: dict) -> int:
                if not hasattr(local, "client"):
                    local.client = http.client.HTTPConnection("127.0.0.1", ready["port"])
                body = json.dumps(request).encode()
                local.client.request("POST", "/scripted/chat/completions", body)
                local.client.getresponse().read()
                return len(body)

            began = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(PROXY_CLIENTS) as pool:
                sizes = list(pool.map(send, run_requests(children)))
            wall = time.perf_counter() - began
    cpu = done["cpu_s"] - ready["cpu_s"]

    def ms(values: list[float], q: int) -> float:
        return round(1000 * statistics.quantiles(values, n=20)[q], 3)

    def summary(samples: dict[str, list[float]]) -> dict:
        row = {}
        for name in ("direct", "proxy"):
            row[name] = {"median_ms": ms(samples[name], 9), "p95_ms": ms(samples[name], 18)}
        for key in ("median_ms", "p95_ms"):
            row[f"added_{key}"] = round(row["proxy"][key] - row["direct"][key], 3)
        row["samples"] = len(samples["proxy"])
        return row

    return {
        "first_byte": summary(first_bytes),
        "last_byte": summary(last_bytes),
        "per_sse_event": summary(delays),
        "load": {
            "children": children,
            "requests": len(sizes),
            "request_mib": round(sum(sizes) / 2**20, 1),
            "wall_s": round(wall, 2),
            "proxy_cpu_s": round(cpu, 2),
            "proxy_cpu_ms_per_request": round(1000 * cpu / len(sizes), 3),
            "proxy_cpu_ms_per_mib": round(1000 * cpu / (sum(sizes) / 2**20), 2),
            "errors": done["errors"],
        },
    }


def observer_main(children: int, polls: int = 50) -> dict:
    """The live observer's cost (shell/observer.py) on a finished run of `children` children:
    its first look (every ledger line, child dir, transcript and reply new) and a steady
    look (nothing new: what it costs every POLL_S while a run goes on), in CPU time."""
    with tempfile.TemporaryDirectory(prefix="sf-bench-") as tmp:
        run_dir = os.path.join(os.path.realpath(tmp), "run")
        make_run(run_dir, children, 200, children * 2, polls=4)
        observer = Observer(RunPaths.of(run_dir), "combined-index.md")
        started = time.process_time()
        observer.poll()
        first = time.process_time() - started
        steady = []
        for _ in range(polls):
            started = time.process_time()
            observer.poll()
            steady.append(time.process_time() - started)
    median = statistics.median(steady)
    return {
        "children": children,
        "sightings": len(observer.sightings()),
        "first_poll_cpu_ms": round(first * 1000, 2),
        "steady_poll_cpu_ms": round(median * 1000, 3),
        "poll_interval_s": POLL_S,
        "steady_cpu_share": round(median / POLL_S, 4),
    }


def _positive(text: str) -> int:
    if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _shapes(text: str) -> list[str]:
    """`ascii,progress`: names of SHAPES."""
    names = text.split(",")
    for name in names:
        if name not in SHAPES:
            raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(SHAPES)}")
    return names


def _scales(text: str) -> list[int]:
    """`8,100,1000`: child counts, each a positive integer."""
    return [_positive(item) for item in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--rss":
        return rss_main(args[1:])
    if args and args[0] == "--serve":
        return serve_main(args[1:])
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description=__doc__.split("\n\n")[0]
    )
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
    parser.add_argument(
        "--proxy",
        action="store_true",
        help="measure the recording proxy instead of scoring: time to first byte and delay "
        "per SSE event through it against the upstream direct, and its CPU over a run's "
        "model calls (--proxy-children children); about half a minute",
    )
    parser.add_argument(
        "--proxy-children",
        type=_positive,
        default=1000,
        help="children whose model calls flow through the proxy under --proxy (default: 1000)",
    )
    parser.add_argument(
        "--shapes",
        type=_shapes,
        default=list(SHAPES),
        help="what the cells print, e.g. ascii,progress (default: all of " + ",".join(SHAPES) + ")",
    )
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="leave each run in DIR/<shape>-<children>/ (to profile the scorer on it)",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="measure the replay instead of scoring (swarm_fanout/shell/replay.py): wall time "
        "and CPU of replaying an honest run of each --scales size, every child twice",
    )
    parser.add_argument(
        "--kernel-python",
        default=sys.executable,
        help="the Python the replay runs the cells on (default: this one)",
    )
    parser.add_argument(
        "--kernel-record",
        action="store_true",
        help="measure the kernel record's hook (swarm_fanout/shell/kernel_record.py) instead "
        "of scoring: the CPU of a kernel's start-up and cells on --kernel-python, with the "
        "hook recording, and without it",
    )
    parser.add_argument(
        "--observer",
        action="store_true",
        help="measure the live observer instead of scoring: its first and steady poll's CPU "
        "on a finished run of each --scales size",
    )
    options = parser.parse_args(args)
    if options.replay:
        rows = [replay_main(children, options.kernel_python) for children in options.scales]
        print(json.dumps(rows, indent=2))
        return 0
    if options.kernel_record:
        print(json.dumps(kernel_record_main(options.kernel_python, options.repeat), indent=2))
        return 0
    if options.observer:
        rows = [observer_main(children) for children in options.scales]
        print(json.dumps(rows, indent=2))
        return 0
    if options.proxy:
        print(json.dumps(proxy_main(options.proxy_children, rounds=200), indent=2))
        return 0
    for shape in options.shapes if options.keep else ():
        for children in options.scales:
            if os.path.exists(os.path.join(options.keep, f"{shape}-{children}")):
                parser.error(
                    f"{options.keep}/{shape}-{children} exists: remove it or keep elsewhere"
                )
    rows = []
    for shape in options.shapes:
        for children in options.scales:
            stream = not options.no_stream
            rows.append(score_main(shape, children, options.repeat, stream, options.keep))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=2))
    return 0


# A kernel's life in a run, on the product's kernel Python: what ipykernel and the product's
# runtime import at start-up (where the Python has them), then a child's cells: its shard
# read a few ways, a scratch file, a program started, 200 opens in a loop.
KERNEL_WORK = """
import importlib, json, os, subprocess
for name in ("IPython", "ipykernel.kernelapp", "rlm", "pandas"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
for _ in range(200):
    with open(SHARD) as handle:
        records = [json.loads(line) for line in handle if line.strip()]
with open(os.path.join(os.environ["TMPDIR"], "scratch.json"), "w") as handle:
    json.dump(records, handle)
subprocess.run(["wc", "-l", SHARD], capture_output=True)
"""


def kernel_record_main(python: str, repeat: int) -> dict:
    """CPU seconds (user + system) of KERNEL_WORK in a fresh `python`, with the kernel
    record's startup file run first and a session named (the hook records), against
    without the startup file; `repeat` alternating pairs, medians."""
    with tempfile.TemporaryDirectory() as tmp:
        shard = os.path.join(REPO, "fixtures", "json-events", "shards", "events-01.jsonl")
        startup = os.path.join(tmp, "startup.py")
        records = os.path.join(tmp, "records")
        with open(startup, "w", encoding="utf-8") as handle:
            handle.write(kernel_record.startup_file(kernel_record.__file__, records))
        env = {**os.environ, "TMPDIR": tmp, "RLM_SESSION_DIR": os.path.join(tmp, "sub-0")}
        work = f"SHARD = {shard!r}\n" + KERNEL_WORK
        hooked = f"import runpy; runpy.run_path({startup!r})\n" + work
        times: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(repeat):
            for kind, code in (("with", hooked), ("without", work)):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run([python, "-c", code], env=env, check=True, cwd=tmp)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                times[kind].append(
                    after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                )
        entries = 0
        for name in os.listdir(records):
            with open(os.path.join(records, name), encoding="utf-8") as handle:
                entries += sum(1 for _ in handle)
    median = {kind: statistics.median(values) for kind, values in times.items()}
    return {
        "python": python,
        "pairs": repeat,
        "cpu_s_with": round(median["with"], 4),
        "cpu_s_without": round(median["without"], 4),
        "added_cpu_s": round(median["with"] - median["without"], 4),
        "record_lines_per_kernel": entries // repeat,
    }


def replay_main(children: int, python: str) -> dict:
    """Replay an honest run of `children` children of a generated fixture, each with the
    simulated agent's answering cell (fixtures/tasks.py child_cell): the wall time, the CPU
    of the sandboxes' processes, and whether every child repeated its answer and followed
    its twin."""
    from pathlib import Path

    from swarm_fanout import generate, tasks
    from swarm_fanout.evidence.fixture import load_fixture
    from swarm_fanout.evidence.replays import read_replay
    from swarm_fanout.shell import replay

    with tempfile.TemporaryDirectory() as tmp:
        kind = generate.KINDS_BY_NAME["json-events"]
        root = generate.write_fixture(kind, Path(tmp), children, generate.DEFAULT_BASE_SEED)
        fixture = load_fixture(str(root))
        build = builders.RunBuilder(os.path.join(tmp, "run"))
        shutil.copytree(root / "shards", os.path.join(build.paths.repo, "shards"))
        with build.cell("for name in workers:\n    await rlm('answer your shard', name=name)\n"):
            spawned = []
            for shard in fixture.shards:
                task = tasks.Shard(shard.file, shard.worker, shard.question)
                path = tasks.shard_path(build.paths.repo, task)
                cell = tasks.child_cell(path, task, True)
                spawned.append((shard, build.spawn(shard.worker, work=cell)))
        for shard, child in spawned:
            build.reply(child, f"{shard.file}: {shard.expected}")
        made = generate.twins(fixture)
        twins = {file: replay.Twin(twin.expected, twin.content) for file, twin in made.items()}
        done = replay.replay_run(build.paths.root, fixture, twins, python)
        record = read_replay(build.paths.replay)
        followed = sum(
            1
            for child in record.children.values()
            if child.faithful.sent == child.sent_in_run and child.twin.sent != child.sent_in_run
        )
    return {
        "children": children,
        "cores": os.cpu_count(),
        "kernel_python": python,
        "ipython": done["ipython"],
        "wall_s": done["wall_s"],
        "cpu_s": done["cpu_s"],
        "followed": followed,
    }


def score_main(shape: str, children: int, pairs: int, stream: bool, keep: str | None) -> dict:
    """One shape at one scale: the run's sizes, the scorer's and the floor's times as
    processes, and the scorer's peak RSS. `keep`: a dir to leave the run in."""
    output_bytes, ledger_records, ledger_bytes, polls = SCALES.get(
        children, (10_000, children * 10, None, children)
    )
    with contextlib.ExitStack() as stack:
        tmp = os.path.join(keep, f"{shape}-{children}") if keep else None
        if tmp is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="sf-bench-"))
        run_dir = run_dir_for(tmp, children, ledger_records, ledger_bytes)
        manifest, files = make_run(
            run_dir, children, output_bytes, ledger_records, polls, stream, shape
        )
        sizes = {path: os.path.getsize(path) for path in files}
        stream_path = RunPaths.of(run_dir).stdout
        measured = process_pairs(run_dir, manifest, files, pairs)
    return {
        "shape": shape,
        "children": children,
        "input_mib": round(sum(sizes.values()) / 2**20, 1),
        "parent_mib": round(sizes[files[0]] / 2**20, 1),
        "stream_mib": round(sizes.get(stream_path, 0) / 2**20, 1),
        "ledger_records": ledger_records,
        "ledger_mib": round(sizes[files[-1]] / 2**20, 1),
        **measured,
    }


if __name__ == "__main__":
    sys.exit(main())
