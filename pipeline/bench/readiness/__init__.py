"""Production readiness: cold start, overload and bursts, soak, and memory over time, measured around the rounds."""
