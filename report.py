#!/usr/bin/env python3
"""`python report.py`: the command, kept where it always was; its code is
swarm_fanout/report.py."""

import runpy

if __name__ == "__main__":
    runpy.run_module("swarm_fanout.report", run_name="__main__", alter_sys=True)
