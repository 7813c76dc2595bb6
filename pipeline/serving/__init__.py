"""Running Triton here: process supervision, tritonserver, the embedded server's stand-in backends, perf_analyzer.

Dependencies run one way: ``install`` (where the binary is, its environment, its log) and ``client``
(the one Triton client) at the bottom; ``process`` (start, readiness, stop) on both; ``tritonserver``
(repository validation) on top. ``embedded`` builds the stand-in repository with ``native_backend``;
``python_standin`` runs inside Triton's python stub and imports nothing from ``pipeline``.
"""
