"""Bench internals: measurements, servers, tuning, reports (the stage entry is pipeline.stages.bench; the run is pipeline.bench.run)."""
