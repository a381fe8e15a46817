"""The simulated product's kernel: the one process that plays every session's cells runs the
IPython startup files of its HOME, as each of the product's kernels does at start-up (the
run's kernel record among them, shell/kernel_record.py), and names the session whose cell
runs by `RLM_SESSION_DIR`, the session dir the product gives each session's kernel
(contract §11 "The kernel's session"), so the record attributes what the cell did as the
real one does."""

from __future__ import annotations

import contextlib
import glob
import os
import runpy
from collections.abc import Iterator

SESSION_DIR_ENV = "RLM_SESSION_DIR"


def run_startup_files() -> None:
    """IPython's startup files for the default profile, in name order, each in a namespace
    of its own."""
    home = os.environ.get("HOME") or ""
    for path in sorted(glob.glob(os.path.join(home, ".ipython/profile_default/startup/*.py"))):
        runpy.run_path(path, run_name="__main__")


@contextlib.contextmanager
def cell_of(session_dir: str) -> Iterator[None]:
    """While a cell of the session with `session_dir` runs."""
    before = os.environ.get(SESSION_DIR_ENV)
    os.environ[SESSION_DIR_ENV] = session_dir
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SESSION_DIR_ENV, None)
        else:
            os.environ[SESSION_DIR_ENV] = before
