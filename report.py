"""Turn run sets into a report people want to look at: report.md and a self-contained report.html.

    uv run --locked python report.py runs/<run-id> [more run sets] [--out DIR]
    uv run --locked python report.py --compare A B [--out DIR]
    uv run --locked python report.py <run dir> [--out DIR]

The pages are built in reporting/: the report of run sets (reporting/report_page.py) with
an evidence page per trial, the comparison of two sides (reporting/compare_page.py) and
one run's evidence page (reporting/evidence_page.py). This parses the command line, calls
them, writes the pages and prints their paths as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from evidence import runsets
from reporting import evidence_page
from reporting.compare_page import build_compare, write_flipped_pages
from reporting.render import render_html, render_markdown
from reporting.report_page import build_report, write_evidence_pages
from reporting.run_set_views import is_run_dir, load_run_set, run_sets_under
from shell.cli import ArgumentParser, print_json, print_note


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="report.py",
        description="Write report.md and a self-contained report.html for run sets (with an "
        "evidence page per trial under evidence/), or with --compare A B a comparison "
        "(compare.md, compare.html) of two run sets or two dirs of run sets, or for one run "
        "dir its evidence page (evidence.html). Prints the written paths as JSON.",
    )
    parser.add_argument("run_sets", nargs="*", help="run set dirs (runs/<run-id>), or one run dir")
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    written: dict = {}
    try:
        if args.run_sets and is_run_dir(args.run_sets[0]):
            out = args.out or args.run_sets[0]
            page = os.path.join(out, evidence_page.PAGE_FILE)
            evidence_page.write_page(args.run_sets[0], page)
            print_json(json.dumps({"html": page}, indent=2))
            return 0
        if args.compare:
            sides = [[load_run_set(p) for p in _run_sets_of(side)] for side in args.compare]
            out = args.out or args.compare[0]
            names = tuple(os.path.basename(os.path.normpath(side)) for side in args.compare)
            blocks = build_compare(sides[0], sides[1], names, os.path.realpath(out))
            stem = "compare"
            written["evidence"] = write_flipped_pages(sides, os.path.realpath(out))
        else:
            sets = [load_run_set(path) for path in args.run_sets]
            out = args.out or args.run_sets[0]
            blocks = build_report(sets, os.path.realpath(out))
            stem = "report"
            written["evidence"] = write_evidence_pages(sets, os.path.realpath(out))
    except (runsets.RunSetError, OSError) as error:
        print_note(f"report.py: {error}")
        return 2
    os.makedirs(out, exist_ok=True)
    for suffix, text in (
        ("md", render_markdown(blocks)),
        ("html", render_html(blocks, f"swarm-fanout {stem}")),
    ):
        path = os.path.join(out, f"{stem}.{suffix}")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        written[suffix] = path
    print_json(json.dumps(written, indent=2))
    return 0


def _run_sets_of(side: str) -> list[str]:
    """The run sets of one side of --compare: a run set, or a dir of them."""
    if not os.path.isdir(side):
        said = "is not a directory" if os.path.exists(side) else "does not exist"
        raise runsets.RunSetError(f"{side} {said}")
    found = run_sets_under(side)
    if not found:
        raise runsets.RunSetError(
            f"{side} holds no run set: no {runsets.RUN_SET_FILE} in it or in a dir directly in it"
        )
    return found


if __name__ == "__main__":
    sys.exit(main())
