"""Bench internals (the stage entry is pipeline.stages.bench; the run, step by step, is pipeline.bench.run).

inputs.py    request rows from the model's samples
baseline.py  in-process ONNX Runtime (timed by pipeline.stats.ort): baseline, the in-process side of rounds and tuning
sweep.py     perf_analyzer runs with Triton's counters
inserver.py  short request bursts timed by the server's own clock inside ORT
pairing.py   the headline rounds: ratios of neighbours, groups interleaved until their intervals are narrow
rounds.py    typed records of the rounds and the estimates they give
tune.py      the throughput variant's scheduling, by measurement
servers.py   where requests go: embedded tritonserver or an external Triton
ratios.py    headline numbers        diagnose.py  one function per rule
render.py    report.md, bench.png, curves, the console line; render_rounds.py: headline, method, rounds tables
progress.py  the live progress line
measured.py  typed measurements      results.py   the whole result; bench.json at its one edge
machine.py   CPU, cores, load, tool versions
"""
