"""The exit codes of runner.py, scorer.py and report.py, and what each means: the one place
they are defined (README "Exit codes", docs/results.md#exit-codes)."""

from __future__ import annotations

import signal

EXIT_RESOLVED = 0  # resolved (a scripted run: product and harness agree; a run set: every trial)
EXIT_UNRESOLVED = 1  # scored, not resolved: the model ran (a timeout included)
EXIT_INVALID = 2  # an invalid invocation, fixture or run dir
EXIT_AGENT = 3  # the agent could not be run, or failed on its own before the model answered
# Interrupted: 128 + the signal's number, as a shell reports a process a signal ended.
EXIT_SIGNAL = {sig: 128 + sig for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
