"""Seeded random mutations of the captured runs, fed through the readers and the scorer: none
may raise. A fixed number of cases, the same ones on every run however loaded the machine is,
so a failure names a case that fails again; SWARM_FANOUT_FUZZ_CASES=<n> runs more of the same
sequence (`SWARM_FANOUT_FUZZ_CASES=5000 uv run --locked python -m unittest tests.test_fuzz`).
"""

from __future__ import annotations

import glob
import json
import os
import random
import tempfile
import unittest

from swarm_fanout import scorer
from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import load_manifest
from tests.test_real_runs import RUNS, materialize

FUZZ_SEED = 20261202
# A count, not a time budget: the same cases run on a loaded machine as on an idle one, so
# a failure names a case that fails again (SWARM_FANOUT_FUZZ_CASES=5000 for a longer run).
FUZZ_CASES_ENV = "SWARM_FANOUT_FUZZ_CASES"
FUZZ_CASES = 100


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One edit an agent, a crash or a bad disk could make to a file."""
    if not data:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    lines = data.split(b"\n")
    choice = rng.randrange(7)
    if choice == 0:  # flip bytes
        raw = bytearray(data)
        for _ in range(rng.randrange(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    if choice == 1:  # truncate anywhere
        return data[: rng.randrange(len(data))]
    if choice == 2:  # drop a line
        del lines[rng.randrange(len(lines))]
    elif choice == 3:  # repeat a line
        index = rng.randrange(len(lines))
        lines.insert(index, lines[index])
    elif choice == 4:  # change a JSON value's type
        index = rng.randrange(len(lines))
        for old, new in ((b'"', b"["), (b":1", b':"1"'), (b"{", b"[{"), (b":", b":null,")):
            if old in lines[index]:
                lines[index] = lines[index].replace(old, new, 1)
                break
    elif choice == 5:  # swap two lines
        first, second = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[first], lines[second] = lines[second], lines[first]
    else:  # insert random bytes
        index = rng.randrange(len(lines))
        lines.insert(index, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))
    return b"\n".join(lines)


class FuzzTest(unittest.TestCase):
    def test_seeded_mutations_of_the_captured_runs_never_raise(self):
        rng = random.Random(FUZZ_SEED)
        count = int(os.environ.get(FUZZ_CASES_ENV) or FUZZ_CASES)
        with tempfile.TemporaryDirectory() as tmp:
            runs = {name: materialize(name, tmp) for name in RUNS}
            fixtures = {name: load_manifest(root) for name, root in runs.items()}
            files = {
                name: sorted(
                    path
                    for path in glob.glob(os.path.join(root, "**", "*"), recursive=True)
                    if os.path.isfile(path) and path.endswith((".jsonl", ".json", ".md"))
                )
                for name, root in runs.items()
            }
            for case in range(count):
                name = rng.choice(RUNS)
                path = rng.choice(files[name])
                with open(path, "rb") as handle:
                    original = handle.read()
                with open(path, "wb") as handle:
                    handle.write(mutate(original, rng))
                try:
                    run = collect(runs[name], fixtures[name].artifact)
                    json.dumps(scorer.score(fixtures[name], run).to_json())
                except Exception as error:
                    self.fail(f"case {case}: {name} {os.path.relpath(path, tmp)}: {error!r}")
                finally:
                    with open(path, "wb") as handle:
                        handle.write(original)
