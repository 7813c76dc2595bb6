"""Running Triton here: process supervision, tritonserver, the embedded server's stand-in backends, perf_analyzer."""
