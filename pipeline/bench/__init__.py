"""Bench internals (the stage entry is pipeline.stages.bench; the run, step by step, is pipeline.bench.run).

    inputs.py    request rows from the model's samples
    baseline.py  in-process ONNX Runtime: baseline and the gauges of paired rounds
    sweep.py     perf_analyzer sweeps with Triton's counters
    pairing.py   bracketed rounds: served runs between in-process gauges
    tune.py      the throughput variant's scheduling, by measurement
    servers.py   where requests go: embedded tritonserver or an external Triton
    ratios.py    headline numbers        diagnose.py  one function per rule
    render.py    report.md, bench.png, curves
    measured.py  typed measurements      results.py   the whole result; bench.json at its one edge
    machine.py   CPU, cores, load, tool versions
"""
