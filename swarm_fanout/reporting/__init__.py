"""Reporting: what people read (run-set summaries, statistics, timelines, evidence pages and their
markup), computed from evidence and verdicts without touching processes.
"""
