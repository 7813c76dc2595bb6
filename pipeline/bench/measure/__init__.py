"""What takes one measurement: request rows, where they go, perf_analyzer and Triton's counters, in-process ORT."""
