"""What the command-line entry points share: stdout carries only the JSON result."""

from __future__ import annotations

import os
import sys


def print_json(text: str) -> None:
    """Print a result; a reader that closed stdout early (`| head`) loses only the rest.

    The files a run writes are written before this, and the exit code stays the
    run's: a closed pipe is no reason for a traceback.
    """
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at devnull, so that the interpreter's own flush at exit does
        # not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
