"""Rules: pure judgements over collected evidence (the run view, answers, provenance, integrity and
witness checks, triage, exit codes), below the rubric in scorer.py; they import the evidence
layer only.
"""
