"""Tools a maintainer runs by hand, neither harness nor tests: `python -m tools.bench` (the
scoring benchmark, docs/benchmark.md) and `python -m tools.verdicts` (every case's verdict
bytes dumped, and two dumps compared). They may import any layer, the scripted model and the
tests' modules; only the tests that pin what they measure import them."""
