"""The rules of bench.peers (the side by side with TorchServe): what the peers need of the bench and of the model.

Called from checks.check_config with the same :class:`Problems`; none raises.
"""

from __future__ import annotations

import re

from pipeline.core.config.enums import BenchServer
from pipeline.core.config.problems import Problems
from pipeline.core.config.schema import PipelineConfig

_TORCHSERVE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-.]*$")  # torch-model-archiver's rule for a model name


def check_bench_peers(cfg: PipelineConfig, p: Problems) -> None:
    """bench.peers: servers measured beside Triton (the embedded one: the bench starts them all), and their rounds."""
    b = cfg.bench
    if len(set(b.peers)) != len(b.peers):
        p.add("bench.peers", [str(x) for x in b.peers], "lists a server twice; give each once, e.g. [torchserve]")
    if b.peers and b.server != BenchServer.embedded:
        p.add(
            "bench.peers",
            [str(x) for x in b.peers],
            f"the side by side starts its own Triton beside the peers: needs bench.server=embedded (not '{b.server}'), or set bench.peers=[]",
        )
    if "torchserve" in b.peers and not _TORCHSERVE_NAME.match(cfg.model.name or ""):
        p.add(
            "model.name",
            cfg.model.name,
            "TorchServe model names must start with a letter or digit and hold only letters, digits, _ - . (torch-model-archiver's rule): rename the model, or set bench.peers=[]",
        )
    if p.number("bench.peer_rounds", b.peer_rounds, 2):
        p.number("bench.peer_max_rounds", b.peer_max_rounds, b.peer_rounds)
    p.number("bench.peer_budget_s", b.peer_budget_s, 0, low_open=True)
