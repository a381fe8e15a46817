"""The self-tests, their modules spread over worker processes: `python -m tests [-v]`.

Most of the suite's time is spent waiting on the runner's and the agent's processes, so
several modules at a time finish in about half the wall time of one after another on a
2-core machine; the end-to-end modules are split by topic so that none holds most of it.
Each module runs as `python -m unittest tests.<module>` would run it alone
(`tests/__init__.py` puts the repo on the path); its result line, with how long it took, is
printed the moment it ends (its whole output too with -v, or when it failed), and the last
lines total them as unittest does. `SWARM_FANOUT_TEST_JOBS` sets how many
at once (default: the CPU count plus one). Name modules to run only those:
`python -m tests test_scorer test_witness`.

Before the modules start, the repo's own sources are compiled to bytecode (`__pycache__/`,
git-ignored) once: an end-to-end run starts several interpreters (the runner, the agent, the
sandbox shim), and where $PYTHONDONTWRITEBYTECODE is set none of them would keep what it
compiled, so each would compile every module it imports anew. Interpreters still read
bytecode that is there, in a sandbox too (the tree is bound into it).

The modules keep their temp files (run dirs and their git repos, transcripts, fixtures) in
a dir of the suite's own in /dev/shm, in memory, unless $TMPDIR names a place: each run
makes and deletes a few hundred files, and on a disk file system under such churn (ext4
looks past every recently deleted inode for a new one) a new file cost a quarter of a
millisecond of CPU where memory takes a hundredth of that. The dir must be empty when the
last module ends (no test leaves a temp file behind); what is left is named, and fails the
suite.
"""

from __future__ import annotations

import compileall
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
# The slow modules first, so none starts last and sets the wall time alone: the runner's
# hygiene and resident tests, which mostly wait (runs that hang until their timeout), beside
# the replay's, which burns the most CPU, then the rest by how long they take.
FIRST = (
    "test_runner_hygiene",
    "test_replay",
    "test_runner_resident",
    "test_runner_cheats",
    "test_runner_acp",
    "test_runner_verdicts",
    "test_scripted_model",
    "test_cluster_files",
    "test_trials_cluster",
    "test_trials",
    "test_report",
    "test_simulated_agent",
    "test_runner_agent_errors",
    "test_sandbox",
    "test_layout",
    "test_bad_inputs",
    "test_simulated_resident",
    "test_fixtures",
    "test_real_runs",
)
RAN = re.compile(r"^Ran (\d+) tests? in", re.M)
FAILED = re.compile(r"^FAILED \((.*)\)$", re.M)
SKIPPED = re.compile(r"skipped=(\d+)")
BROKEN = re.compile(r"(?:failures|errors|unexpected successes)=(\d+)")
IN_MEMORY = "/dev/shm"
IN_MEMORY_FREE = 1 << 30  # the suite's temp files at their peak, with room to spare


def modules(named: list[str]) -> list[str]:
    found = sorted(
        name[:-3] for name in os.listdir(TESTS) if name.startswith("test_") and name.endswith(".py")
    )
    chosen = [name for name in found if not named or name in named]
    unknown = sorted(set(named) - set(found))
    if unknown:
        raise SystemExit(f"no test module {', '.join(unknown)} in tests/")
    return sorted(
        chosen,
        key=lambda name: (name not in FIRST, FIRST.index(name) if name in FIRST else 0, name),
    )


def compile_sources() -> None:
    """Bytecode for the repo's packages and top-level scripts, whatever the environment says
    about writing it (see the module docstring); a tree it cannot write to is left as it is."""
    skipped = re.compile(r"[/\\]\.(venv|git)([/\\]|$)")
    compileall.compile_dir(ROOT, quiet=2, rx=skipped, workers=1)


def scratch_dir() -> str | None:
    """The suite's own temp dir in memory (see the module docstring), or None: $TMPDIR is
    set, or there is no /dev/shm with room enough."""
    if os.environ.get("TMPDIR") or not os.path.isdir(IN_MEMORY):
        return None
    try:
        room = os.statvfs(IN_MEMORY)
        if room.f_bavail * room.f_frsize < IN_MEMORY_FREE:
            return None
        # Short: the simulated agent's worker socket goes below it, within 107 bytes.
        return tempfile.mkdtemp(prefix="sf-tests-", dir=IN_MEMORY)
    except OSError:
        return None


def run(module: str, verbose: bool, env: dict) -> tuple[str, int, str, float]:
    argv = [sys.executable, "-m", "unittest", *(["-v"] if verbose else []), f"tests.{module}"]
    started = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
    )
    return module, done.returncode, done.stdout + done.stderr, time.monotonic() - started


def outcome_line(module: str, code: int, output: str, seconds: float) -> str:
    """`tests.test_scorer: OK, 63 tests, 1.8 s`: one module's result as it ends."""
    counted = RAN.search(output)
    summary = FAILED.search(output)
    if code == 0 and counted:
        state = "OK"
    else:
        state = f"FAILED ({summary.group(1)})" if summary else f"FAILED (exit {code})"
    tests = f"{counted.group(1)} tests" if counted else "no tests counted"
    return f"tests.{module}: {state}, {tests}, {seconds:.1f} s"


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    chosen = modules([arg for arg in argv if arg != "-v"])
    jobs = int(os.environ.get("SWARM_FANOUT_TEST_JOBS") or (os.cpu_count() or 1) + 1)
    started = time.monotonic()
    compile_sources()
    scratch = scratch_dir()
    env = {**os.environ, **({"TMPDIR": scratch} if scratch else {})}
    ran = failed_modules = skipped = broken = 0
    problems: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        pending = [pool.submit(run, name, verbose, env) for name in chosen]
        for finished in concurrent.futures.as_completed(pending):
            module, code, output, seconds = finished.result()
            line = outcome_line(module, code, output, seconds)
            if verbose or code != 0:
                print(f"==== {line}\n{output.rstrip()}", flush=True)
            else:
                print(line, flush=True)
            counted = RAN.search(output)
            ran += int(counted.group(1)) if counted else 0
            skipped += sum(int(n) for n in SKIPPED.findall(output))
            if code != 0 or not counted:
                failed_modules += 1
                summary = FAILED.search(output)
                broken += sum(int(n) for n in BROKEN.findall(summary.group(1))) if summary else 1
                problems.append(
                    f"tests.{module}: {summary.group(1) if summary else f'exit {code}'}"
                )
    left = sorted(os.listdir(scratch)) if scratch else []
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    if left:
        problems.append(f"left in the temp dir {scratch}: {', '.join(left)}")
    elapsed = time.monotonic() - started
    print("\n" + "-" * 70)
    print(f"Ran {ran} tests in {elapsed:.3f}s ({len(chosen)} modules, {jobs} at a time)\n")
    for problem in problems:
        print(problem)
    failed = failed_modules or left
    ending = ", temp files left" if left else ""
    print(f"FAILED (modules={failed_modules}{ending})" if failed else "OK")
    passed = ran - broken - skipped
    print(f"{passed} passed, {broken} failed" + (f", {skipped} skipped" if skipped else ""))
    if failed:
        return 1
    return 0 if ran else 5


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
