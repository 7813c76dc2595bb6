"""The tune: the throughput variant's scheduling, searched by measurement (stage entry: pipeline.stages.tune).

Its parts, in dependency order:

space.py     the knobs, the values each may take from an incumbent (instances x threads within the cores)
search.py    coordinate descent with successive halving, ranked by paired rounds, within a time budget
arena.py     where candidates run: one embedded tritonserver per step, rendered by the repository's own code
analyzer.py  Model Analyzer's search beside ours, on the same server, stand-in, rows, objective and constraint
run.py       the stage end to end: search, confirmation rounds (winner vs configured, runner-up, Model Analyzer)
report.py    tune.md, the console line and dvc metrics (rendering only)

The record it writes (pipeline/records/tune.py) is what the repository stage and the bench report read.
"""
