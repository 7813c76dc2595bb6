"""Bench internals: measurements, servers, tuning, reports (the stage is pipeline.stages.bench)."""
