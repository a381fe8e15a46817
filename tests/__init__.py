"""The self-tests: `uv run --locked python -m tests` runs every module (tests/__main__.py);
`python -m unittest tests.test_X` or `python tests/test_X.py` runs one. The harness's packages
and these modules import each other by their full names (`from tests.builders import ...`),
found through the project's editable install (pyproject.toml)."""

import os
import tempfile

if os.environ.get("SWARM_FANOUT_KEEP_RUNS"):
    # Every run dir a test makes is copied there before it is removed, for tools/verdicts.py.
    from tests import keep_runs

    keep_runs.install(os.environ["SWARM_FANOUT_KEEP_RUNS"])


def temp_dir(test) -> str:
    """A temp dir removed when `test` ends (given a test case class, when its tests end)."""
    tmp = tempfile.TemporaryDirectory()
    if isinstance(test, type):
        test.addClassCleanup(tmp.cleanup)
    else:
        test.addCleanup(tmp.cleanup)
    return tmp.name


def executable(path: str, text: str) -> str:
    """`text` written to `path` as a program (a stand-in agent, a shim); returns `path`."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o755)
    return path
