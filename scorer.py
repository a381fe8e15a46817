#!/usr/bin/env python3
"""`python scorer.py`: the command, kept where it always was; its code is
swarm_fanout/scorer.py."""

import runpy

if __name__ == "__main__":
    runpy.run_module("swarm_fanout.scorer", run_name="__main__", alter_sys=True)
