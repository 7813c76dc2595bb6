"""The bench: the shipped model against a real Triton, beside ONNX Runtime in process (stage entry: pipeline.stages.bench).

Its parts, in dependency order (each imports only parts listed before it; tests/test_architecture.py holds this):

progress.py the live progress line every phase reports to
measure/    one measurement: request rows, servers (embedded or external), perf_analyzer sweeps with Triton's counters,
            in-process ORT, in-server bursts, the machine; the typed measurements (results.py)
rounds/     the headline rounds: ratios of neighbours, groups interleaved until their intervals are narrow, their plan
            and server in the run; their records
readiness/  production readiness: cold start, overload and bursts, soak, memory over time; their records
peers/      the side by side with TorchServe: archives, serving, rounds; their records
results.py  the whole result (every part's records); bench.json's header and summary go through pipeline.records.bench
analysis/   what the result says: the headline ratios and the diagnosis rules (readiness's among them)
report/     how people read it: report.md, bench.png, curves, the console line (rendering only)
run.py      the run end to end, step by step
"""
