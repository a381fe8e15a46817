"""The simulated agent: a stand-in for the prime-agent v0.8.0 CLI with the product's command-line
surface (`simulated/agent.py`, the executable the runner launches with
`--agent-bin ./simulated/agent.py`). It writes the product's on-disk formats (transcripts, the
spawn ledger, the event streams, the daemon protocol) with its own writers, independent of the
harness's readers, so that the harness is tested against a second reading of the product rather
than against itself. Every result the harness reports from it says "simulated": true.

Harness modules never import this package: only the tests and the simulated executable do
(tests/test_layout.py checks this). The one module it shares with the harness is the
task language, fixtures/tasks.py, which the fixture generator and the scripted model read too.
"""

# Here rather than in product.py: the runner asks `agent.py --version` before every run, and
# it answers before the rest of the package is imported (most of its start-up).
APP_VERSION = "0.8.0"
VERSION_LINE = f"prime-agent {APP_VERSION} (simulated)"
