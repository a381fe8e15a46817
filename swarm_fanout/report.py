"""Turn run sets into a report people want to look at: report.md and a self-contained report.html.

    uv run --locked python report.py runs/<run-id> [more run sets, or dirs of them] [--out DIR]
    uv run --locked python report.py --compare A B [--out DIR]
    uv run --locked python report.py <run dir> [--out DIR]

The pages are built in reporting/: the report of run sets (reporting/report_page.py) with
an evidence page per trial, the comparison of two sides (reporting/compare_page.py) and
one run's evidence page (reporting/evidence_page.py). This parses the command line, calls
them, writes the pages and prints their absolute paths as JSON.

Everything is written into a temp dir in the output dir, then moved into place at the end:
a Ctrl-C (SIGINT) or SIGTERM before then leaves the output dir as it was (exit 130/143,
one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile

from swarm_fanout.evidence import runsets
from swarm_fanout.reporting import evidence_page
from swarm_fanout.reporting.compare_page import COMPARE_EVIDENCE, build_compare, write_flipped_pages
from swarm_fanout.reporting.render import render_html, render_markdown
from swarm_fanout.reporting.report_page import build_report, write_evidence_pages
from swarm_fanout.reporting.run_set_views import is_run_dir, load_run_set, run_sets_under
from swarm_fanout.rules.exit_codes import EXIT_INVALID, EXIT_RESOLVED, EXIT_SIGNAL
from swarm_fanout.shell.cli import ArgumentParser, print_json, print_note

EVIDENCE_DIR = "evidence"  # beside report.html: each trial's evidence page
STOPPING = (signal.SIGINT, signal.SIGTERM)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="report.py",
        description="Write report.md and a self-contained report.html for run sets (with an "
        "evidence page per trial under evidence/ beside it), or with --compare A B a comparison "
        "(compare.md, compare.html) of two run sets or two dirs of run sets, or for one run "
        "dir its evidence page (evidence.html). Prints the written paths as JSON. Exit 0 "
        "written, 2 unusable input, 130/143 interrupted (nothing written).",
    )
    parser.add_argument(
        "run_sets", nargs="*", help="run set dirs (runs/<run-id>), dirs of them, or one run dir"
    )
    parser.add_argument(
        "--compare", nargs=2, metavar=("A", "B"), help="compare two run sets, or two dirs of them"
    )
    parser.add_argument(
        "--out",
        help="dir to write into (default the first run set, A for --compare, the run dir itself)",
    )
    args = parser.parse_args(argv)
    if bool(args.compare) == bool(args.run_sets):
        parser.error("give run set dirs, one run dir, or --compare A B")
    runs = [path for path in args.run_sets if is_run_dir(path)]
    if runs and len(args.run_sets) > 1:
        parser.error("give one run dir, or run set dirs")
    return args


class Interrupted(Exception):
    """SIGINT or SIGTERM before the pages were moved into place."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    made: list[str] = []  # what to remove unless it is moved into place: temp dirs, a new --out
    previous = {signum: signal.signal(signum, _stop) for signum in STOPPING}
    try:
        written = _write(args, made)
    except Interrupted as stop:
        name = signal.Signals(stop.signum).name
        print_note(f"report.py: {name}: stopped; nothing was written")
        detail = f"stopped by {name}; nothing was written"
        print_json(json.dumps({"error": "interrupted", "detail": detail}))
        return EXIT_SIGNAL[stop.signum]
    except (runsets.RunSetError, OSError) as error:
        print_note(f"report.py: {error}")
        return EXIT_INVALID
    finally:
        # Neither signal may stop the clean-up half way: they are ignored from here on.
        for signum in STOPPING:
            signal.signal(signum, signal.SIG_IGN)
        for path in reversed(made):
            shutil.rmtree(path, ignore_errors=True)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print_json(json.dumps(written, indent=2))
    return EXIT_RESOLVED


def _stop(signum, _frame) -> None:
    # One line and no traceback: a second signal while the temp dir goes is ignored.
    for stopping in STOPPING:
        signal.signal(stopping, signal.SIG_IGN)
    raise Interrupted(signum)


def _write(args: argparse.Namespace, made: list[str]) -> dict:
    """Build the pages into a temp dir in the output dir, then move them into place; the
    written paths, absolute."""
    if args.run_sets and is_run_dir(args.run_sets[0]):
        out = os.path.realpath(args.out or args.run_sets[0])
        staging = _staging(out, made)
        page = os.path.join(out, evidence_page.PAGE_FILE)
        staged = os.path.join(staging, evidence_page.PAGE_FILE)
        evidence_page.write_page(args.run_sets[0], staged, at=page)
        _move_into_place(staging, out, made)
        return {"html": page}
    written: dict = {}
    if args.compare:
        sides = [[load_run_set(p) for p in _run_sets_of(side, True)] for side in args.compare]
        out = os.path.realpath(args.out or args.compare[0])
        names = tuple(os.path.basename(os.path.normpath(side)) for side in args.compare)
        stem, folder = "compare", COMPARE_EVIDENCE
        staging = _staging(out, made)
        written["evidence"] = write_flipped_pages(sides, out, staging)
        blocks = build_compare(sides[0], sides[1], names, out)
    else:
        paths = [found for path in args.run_sets for found in _run_sets_of(path, False)]
        sets = [load_run_set(path) for path in paths]
        out = os.path.realpath(args.out or args.run_sets[0])
        stem, folder = "report", EVIDENCE_DIR
        staging = _staging(out, made)
        written["evidence"] = write_evidence_pages(sets, out, staging)
        blocks = build_report(sets, out)
    for suffix, text in (
        ("md", render_markdown(blocks)),
        ("html", render_html(blocks, f"swarm-fanout {stem}")),
    ):
        with open(os.path.join(staging, f"{stem}.{suffix}"), "w", encoding="utf-8") as handle:
            handle.write(text)
        written[suffix] = os.path.join(out, f"{stem}.{suffix}")
    if not os.path.isdir(os.path.join(staging, folder)):
        os.mkdir(os.path.join(staging, folder))  # none flipped: the old pages go all the same
    _move_into_place(staging, out, made)
    return written


def _staging(out: str, made: list[str]) -> str:
    """A new temp dir in `out` (made, and noted for removal, when it does not exist)."""
    missing = out
    while not os.path.exists(os.path.dirname(missing)) and os.path.dirname(missing) != missing:
        missing = os.path.dirname(missing)
    if not os.path.exists(out):
        os.makedirs(out)
        made.append(missing)
    staging = tempfile.mkdtemp(prefix=".report-", dir=out)
    made.append(staging)
    return staging


def _move_into_place(staging: str, out: str, made: list[str]) -> None:
    """Each file and dir written into `staging` replaces its namesake in `out`; a signal
    waits until all of them have (then the pages are written, and it is ignored)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        old = os.path.join(staging, ".old")
        os.mkdir(old)
        for name in sorted(os.listdir(staging)):
            source, target = os.path.join(staging, name), os.path.join(out, name)
            if name == ".old":
                continue
            if os.path.isdir(source) and os.path.isdir(target) and not os.path.islink(target):
                os.rename(target, os.path.join(old, name))
            os.replace(source, target)
        made.clear()
        made.append(staging)  # now holds only what was replaced
        for signum in STOPPING:
            signal.signal(signum, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)


def _run_sets_of(path: str, compare: bool) -> list[str]:
    """The run sets at `path`: a run set, or a dir of them (a --compare side, or a report's
    argument)."""
    if not os.path.isdir(path):
        said = "is not a directory" if os.path.exists(path) else "does not exist"
        raise runsets.RunSetError(f"{path} {said}")
    found = run_sets_under(path)
    if not found:
        what = "" if compare else ", nor one run's dir (no result.json or sessions/ in it)"
        raise runsets.RunSetError(
            f"{path} holds no run set: no {runsets.RUN_SET_FILE} in it or in a dir directly "
            f"in it{what}"
        )
    return found


if __name__ == "__main__":
    sys.exit(main())
