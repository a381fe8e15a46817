"""Evidence: readers of what a run left on disk (transcripts, ledger, run dir, fixture, witness
file) that never raise; the layer below everything else, importing nothing above it.
"""
