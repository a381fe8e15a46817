"""The tests, run either way from the repo root:

    python -m unittest discover -s tests     # CI (.ci/run): tests/ is the top-level directory
    python -m unittest tests.test_runner     # one module, imported as part of this package

The modules import their helpers as top-level modules (`from builders import ...`,
`import test_real_runs`) and the harness's as top-level modules too (`import scorer`). Discovery
puts tests/ on sys.path and never imports this file; importing one module as `tests.test_X`
runs this file first, which puts tests/ and the repo root on sys.path as discovery would.
"""

import os
import sys

_TESTS = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(_TESTS), _TESTS):  # tests/ ends up first, as discovery has it
    if _path not in sys.path:
        sys.path.insert(0, _path)
