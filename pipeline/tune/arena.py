"""Where the tune's candidates run: one embedded tritonserver per step, every candidate a model of its own in it.

The pairs of a round are then seconds apart on one server, and perf_analyzer measures each candidate with the
bench's real request rows. :class:`ServerArena` is the server and the measurement; what the candidates are is its
``render``: :class:`ShippedArena` renders them with the repository's own code (CandidateWriter) and serves them
through the ONNX Runtime stand-in as shipped, so the winner is the very config the repository then ships.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from pipeline.bench.measure import inputs as inputs_mod
from pipeline.bench.measure.servers import Target
from pipeline.bench.measure.sweep import Sweeper
from pipeline.core.config import BenchConfig, PipelineConfig, TuneConfig, VariantConfig
from pipeline.records.tune import TuneKnobs
from pipeline.repository.writer import CandidateWriter
from pipeline.serving import perf_analyzer as pa_mod
from pipeline.serving.embedded import read_config
from pipeline.serving.process import EmbeddedServer
from pipeline.tune.search import Measure, Sample

# perf_analyzer's stability check per run: loose, as in the bench's rounds (the rounds' spread, not one run, is the noise).
STABILITY = 50


class ServerArena:
    """Serves candidates in one embedded server per session and measures them with perf_analyzer.

    ``render(candidates, repo)`` writes each candidate as a model into the repository ``repo`` and returns candidate ->
    model name; ``input_json`` and ``shapes`` are perf_analyzer's request rows.
    """

    def __init__(
        self, t: TuneConfig, bench: BenchConfig, input_json: Path, shapes: dict[str, list[int]], work: Path, ort_standin: bool, log: Callable[[str], None] = print
    ) -> None:
        self.t, self.bench, self.input_json, self.shapes, self.work, self.ort_standin, self.log = t, bench, input_json, shapes, work, ort_standin, log
        self.pa = pa_mod.locate_perf_analyzer()
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.sessions = 0

    def render(self, candidates: dict[str, TuneKnobs], repo: Path) -> dict[str, str]:
        raise NotImplementedError

    @contextlib.contextmanager
    def session(self, candidates: dict[str, TuneKnobs]) -> Iterator[Measure]:
        """One server holding every candidate; yields a function that measures one of them once."""
        self.sessions += 1
        tag = f"s{self.sessions}"
        repo = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=self.work))
        models = self.render(candidates, repo)
        names = list(models.values())
        # The sweep's own line says [bench]; here it is the tune's.
        sweeper = Sweeper(self.pa, self.bench, self.input_json, self.shapes, self.logs, None, lambda line: self.log(line.replace("[bench]", "[tune]", 1)))
        runs = dict.fromkeys(candidates, 0)
        with EmbeddedServer(repo, names[0], timeout_s=self.bench.server_timeout_s, log_dir=self.logs, also_load=tuple(names[1:]), ort_standin=self.ort_standin) as srv:
            with srv.client() as client:
                version = client.server_version()
            url = srv.grpc_url if self.bench.protocol == "grpc" else srv.http_url
            targets = {
                c: Target(srv.http_url, url, m, c, version, f"127.0.0.1:{srv.metrics_port}", str(self.bench.protocol), False, None, srv.grpc_url, srv) for c, m in models.items()
            }

            def measure(name: str) -> Sample:
                runs[name] += 1
                points = sweeper.run(targets[name], list(self.t.concurrency), f"{tag}_{name}_r{runs[name]}", interval_ms=self.t.measurement_interval_ms, stability=STABILITY)
                return Sample(
                    {p.concurrency: p.metrics.get("throughput_infer_s") if p.valid else None for p in points},
                    {p.concurrency: p.metrics.get("p99_ms") if p.valid else None for p in points},
                    "; ".join(p.reason for p in points if not p.valid),
                )

            yield measure


class ShippedArena(ServerArena):
    """The throughput variant's candidates as the repository renders them, on the ONNX Runtime stand-in."""

    def __init__(self, cfg: PipelineConfig, writer: CandidateWriter, work: Path, log: Callable[[str], None] = print) -> None:
        self.writer, self.base = writer, cfg.variants.throughput
        self.base_knobs = TuneKnobs.of_variant(self.base)
        work.mkdir(parents=True, exist_ok=True)
        probe = Path(tempfile.mkdtemp(prefix="inputs-", dir=work))
        writer.write(probe, {"start": self.base})
        inputs = inputs_mod.prepare(cfg.model, writer.served.path, read_config(probe / "start" / "config.pbtxt"), cfg.bench.input_shapes)
        self.inputs = inputs
        input_json = pa_mod.write_input_data(work / "perf_input.json", inputs.rows, inputs.batched)
        super().__init__(cfg.tune, cfg.bench, input_json, inputs.shapes, work, True, log)

    def variant(self, k: TuneKnobs) -> VariantConfig:
        return k.onto_variant(self.base)

    def render(self, candidates: dict[str, TuneKnobs], repo: Path) -> dict[str, str]:
        return self.writer.write(repo, {n: self.variant(k) for n, k in candidates.items()})
