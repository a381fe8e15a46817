#!/usr/bin/env python3
"""`python scorer.py RUN_DIR`: regrade a stored run dir (swarm_fanout/shell/regrade.py), with
the fixture generator's twins for `--replay`; the rubric itself is swarm_fanout/scorer.py."""

import sys

from swarm_fanout import generate
from swarm_fanout.shell import regrade

if __name__ == "__main__":
    sys.exit(regrade.main(make_twins=generate.twins))
