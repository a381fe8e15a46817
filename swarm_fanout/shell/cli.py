"""What the command-line entry points share: stdout carries only the JSON result,
stderr the lines for a person."""

from __future__ import annotations

import argparse
import difflib
import os
import sys

from swarm_fanout.rules.exit_codes import EXIT_AGENT, EXIT_INVALID


def did_you_mean(name: str, choices, prefix: str = "") -> str:
    """`did you mean simulated/oracle?` for the choice closest to a typo'd `name`, else ""."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"did you mean {prefix}{close[0]}? " if close else ""


class RunRefused(Exception):
    """A run that cannot go on: its reason code and sentence, the result's status and the
    exit code. The entry point turns it into the result JSON, the exit code and one line on
    stderr, in one place."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: str = "invalid_invocation",
        said: str | None = None,
        detail: str | None = None,
        extra: dict | None = None,
        exit_code: int | None = None,
    ):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status
        default_exit = EXIT_AGENT if status == "agent_not_run" else EXIT_INVALID
        self.exit_code = default_exit if exit_code is None else exit_code
        # The stderr line: the message, or as `said` puts it.
        default = f"the agent could not be run: {message}" if status == "agent_not_run" else message
        self.said = said or default
        self.detail = detail  # a reason's detail code (a fixture's error)
        self.extra = extra or {}  # more fields of the result

    @property
    def reason(self) -> dict:
        detail = {"detail": self.detail} if self.detail else {}
        return {"code": self.code, **detail, "message": self.message}


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose refusal of an unknown flag names the closest one it has:
    `unrecognized arguments: --fixtrue (did you mean --fixture?)`. Still exit 2, usage
    first, as argparse does."""

    def error(self, message: str):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            flags = [word for word in message[len(prefix) :].split() if word.startswith("--")]
            known = [flag for action in self._actions for flag in action.option_strings]
            for flag in flags:
                hint = did_you_mean(flag.split("=", 1)[0], known)
                if hint:
                    message += f" ({hint.strip()})"
                    break
        super().error(message)


def print_json(text: str) -> None:
    """Print a result; a reader that closed stdout early (`| head`) loses only the rest.

    The files a run writes are written before this, and the exit code stays the
    run's: a closed pipe is no reason for a traceback.
    """
    _write(sys.stdout, text)


def print_note(text: str) -> None:
    """A line for the person at the terminal, on stderr; a closed stderr (`2>&1 | head`)
    loses it and nothing else."""
    _write(sys.stderr, text)


def _write(stream, text: str) -> None:
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        # Point the stream at devnull, so that the interpreter's own flush at exit
        # does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
