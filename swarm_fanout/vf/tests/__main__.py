"""`python -m swarm_fanout.vf.tests [-v]`: every test module of the package, as .ci/run runs
them."""

import sys
import unittest
from pathlib import Path

if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    suite = unittest.defaultTestLoader.discover(str(here), top_level_dir=str(here.parents[2]))
    result = unittest.TextTestRunner(verbosity=2 if "-v" in sys.argv[1:] else 1).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
