"""The text endpoint (<model>_text): text in, the model's outputs out, from the same repository as the tensor model.

A real tritonserver serves the repository the stage writes (the tensor model through the native ONNX Runtime
stand-in, the text model through the python backend, as shipped). Parity: every answer equals each sentence run
alone in process (tokenizer + ONNX Runtime, no padding) within the fp32 tolerance, whatever the batch it rode in.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as th

from pipeline.core.config import PipelineConfig, load_config
from pipeline.core.errors import RepositoryError
from pipeline.repository import config as triton_config
from pipeline.repository.writer import write_repository
from pipeline.serving.process import EmbeddedServer
from tests.helpers.markers import starts
from tests.helpers.tiny_text import reference, text_model_overrides, tiny_tokenizer

MAX_LENGTH = 12
ATOL = 1e-5  # parity's fp32 tolerance
SENTENCES = [
    "The cat sat on the mat.",
    "A dog ran fast",
    "red blue green",
    "",  # empty: [CLS] [SEP] only
    "the model server batch queue token text long short the cat sat on the mat the dog ran",  # over MAX_LENGTH: cut
    "Café crème, naïve façade — 東京 ✓",  # non-ASCII: accents stripped, the rest [UNK]
    "slow",
    "The queue",
]


@pytest.fixture
def text_cfg(make_params: Callable[..., Path], tmp_path: Path) -> Callable[..., PipelineConfig]:
    """A config for the tiny text model (its tokenizer and ONNX file under tmp_path), with extra overrides."""
    base = text_model_overrides(tmp_path, MAX_LENGTH)

    def _cfg(*extra: str) -> PipelineConfig:
        return load_config(make_params(*base, *extra))

    return _cfg


def written(cfg: PipelineConfig, out: Path, onnx: Path | None = None) -> tuple[Path, dict]:
    out.mkdir()
    summary = write_repository(cfg, onnx or Path(str(cfg.model.path)), out)
    return out, summary


def test_the_repository_ships_the_text_endpoint_with_its_tokenizer(text_cfg: Callable[..., PipelineConfig], tmp_path: Path) -> None:
    cfg = text_cfg()
    repo, summary = written(cfg, tmp_path / "repo")
    d = repo / "tinytext_text"
    assert sorted(p.name for p in (d / "1").iterdir()) == ["model.py", "tokenizer.json"]
    assert (d / "1" / "tokenizer.json").read_bytes() == Path(str(cfg.model.tokenizer.path)).read_bytes()  # type: ignore[union-attr]
    text = summary["text_endpoint"]
    assert text["model"] == "tinytext_text" and len(text["tokenizer"]["sha256"]) == 64 and text["tokenizer"]["max_length"] == MAX_LENGTH
    for variant in ("latency", "throughput"):
        pb = triton_config.parse(d / "configs" / f"{variant}.pbtxt")
        tensor = triton_config.parse(repo / "tinytext" / "configs" / f"{variant}.pbtxt")
        assert pb.backend == "python" and [i.name for i in pb.input] == ["text"] and pb.input[0].data_type == triton_config.mc.TYPE_STRING
        assert [(o.name, list(o.dims)) for o in pb.output] == [("embedding", [8])]
        # Batched as the tensor model's variant of the same name: no queue on the latency one.
        assert pb.max_batch_size == tensor.max_batch_size and pb.HasField("dynamic_batching") == tensor.HasField("dynamic_batching")
        assert pb.parameters["tensor_model"].string_value == "tinytext" and pb.parameters["max_length"].string_value == str(MAX_LENGTH)
        assert json.loads(pb.parameters["inputs"].string_value) == {"attention_mask": "attention_mask", "input_ids": "ids"}
    assert (d / "config.pbtxt").read_text() == (d / "configs" / "latency.pbtxt").read_text()


def test_the_response_cache_option_turns_it_on_for_that_variant_of_the_text_endpoint_only(text_cfg: Callable[..., PipelineConfig], tmp_path: Path) -> None:
    repo, _ = written(text_cfg("variants.throughput.response_cache=true"), tmp_path / "repo")
    thr = (repo / "tinytext_text" / "configs" / "throughput.pbtxt").read_text()
    assert triton_config.parse(repo / "tinytext_text" / "configs" / "throughput.pbtxt").response_cache.enable and "--cache-config" in thr
    assert not triton_config.parse(repo / "tinytext_text" / "configs" / "latency.pbtxt").response_cache.enable
    assert not any(triton_config.parse(pb).response_cache.enable for pb in (repo / "tinytext" / "configs").glob("*.pbtxt"))


def test_text_instances_set_the_text_models_count_in_that_variant_only(text_cfg: Callable[..., PipelineConfig], tmp_path: Path) -> None:
    repo, _ = written(text_cfg("variants.throughput.text_instances=2"), tmp_path / "repo")
    text = {v: triton_config.parse(repo / "tinytext_text" / "configs" / f"{v}.pbtxt").instance_group[0].count for v in ("latency", "throughput")}
    tensor = {v: triton_config.parse(repo / "tinytext" / "configs" / f"{v}.pbtxt").instance_group[0].count for v in ("latency", "throughput")}
    assert text == {"latency": 1, "throughput": 2} and tensor == {"latency": 1, "throughput": 1}


def test_a_model_without_a_tokenizer_gets_no_text_endpoint(tiny_cfg: Callable[..., PipelineConfig], tiny_onnx: Path, tmp_path: Path) -> None:
    repo, summary = written(tiny_cfg(), tmp_path / "repo", tiny_onnx)
    assert summary["text_endpoint"] is None and not list(repo.glob("*_text"))


def test_a_corrupt_or_mismatched_tokenizer_is_refused_naming_it(text_cfg: Callable[..., PipelineConfig], tmp_path: Path) -> None:
    cfg = text_cfg()
    tok = Path(str(cfg.model.tokenizer.path))  # type: ignore[union-attr]
    tok.write_text('{"version": "1.0", "model": {"type": "WordLevel"')  # cut short
    with pytest.raises(RepositoryError, match="cannot load the tokenizer") as e:
        written(cfg, tmp_path / "repo")
    assert str(tok) in e.value.what
    tiny_tokenizer(tok)
    with pytest.raises(RepositoryError, match="feed every input of the graph"):
        written(text_cfg("~model.tokenizer.inputs.attention_mask"), tmp_path / "repo2")


def test_a_missing_tokenizer_fails_at_composition(text_cfg: Callable[..., PipelineConfig], tmp_path: Path) -> None:
    from pipeline.core.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        text_cfg(f"model.tokenizer.path={tmp_path / 'nope.json'}")
    assert "model.tokenizer.path" in str(e.value) and "nope.json" in str(e.value)
    with pytest.raises(ConfigError, match="not installed"):
        text_cfg("model.tokenizer.path=no_such_package_here:tokenizer.json")


# ---------------------------------------------------------------- served by a real tritonserver
def infer(client: th.InferenceServerClient, rows: list[bytes | str], model: str = "tinytext_text") -> np.ndarray:
    x = th.InferInput("text", [len(rows), 1], "BYTES")
    x.set_data_from_numpy(np.array([[r.encode() if isinstance(r, str) else r] for r in rows], dtype=object).reshape(len(rows), 1))
    return client.infer(model, [x]).as_numpy("embedding")


@pytest.fixture
@starts("triton")
def served(text_cfg: Callable[..., PipelineConfig], tmp_path: Path) -> Callable[..., tuple[EmbeddedServer, PipelineConfig]]:
    """Start a server on the written repository (tensor and text model) with variant ``config_name``."""
    started: list[EmbeddedServer] = []

    def _serve(config_name: str, *extra: str, cache_bytes: int = 0) -> tuple[EmbeddedServer, PipelineConfig]:
        cfg = text_cfg(*extra)
        repo, _ = written(cfg, tmp_path / f"repo-{config_name}-{len(started)}")
        srv = EmbeddedServer(repo, "tinytext", config_name, also_load=("tinytext_text",), ort_standin=True, log_dir=tmp_path / "logs")
        srv = srv.with_cache(cache_bytes).__enter__()
        started.append(srv)
        return srv, cfg

    yield _serve
    for s in started:
        s.stop()


def test_the_served_text_endpoint_answers_as_each_sentence_alone(served: Callable[..., tuple[EmbeddedServer, PipelineConfig]]) -> None:
    srv, cfg = served("latency")
    ref = reference(Path(str(cfg.model.path)), Path(str(cfg.model.tokenizer.path)), SENTENCES, MAX_LENGTH)  # type: ignore[union-attr]
    with th.InferenceServerClient(srv.http_url) as c:
        one_by_one = np.stack([infer(c, [s])[0] for s in SENTENCES])
        together = infer(c, SENTENCES)  # one request, rows of mixed lengths: padded to the longest
    assert np.abs(one_by_one - ref).max() <= ATOL and np.abs(together - ref).max() <= ATOL
    assert np.abs(ref[4] - ref[0]).max() > 0.01  # the long row was cut, not dropped to an empty one


def test_concurrent_requests_of_different_lengths_are_batched_and_answered_alike(served: Callable[..., tuple[EmbeddedServer, PipelineConfig]]) -> None:
    """The throughput variant's batcher merges requests of different lengths into one execution."""
    srv, cfg = served("throughput", "variants.throughput.dynamic_batching.max_queue_delay_us=50000")
    ref = reference(Path(str(cfg.model.path)), Path(str(cfg.model.tokenizer.path)), SENTENCES, MAX_LENGTH)  # type: ignore[union-attr]

    def call(i: int) -> tuple[int, np.ndarray]:
        with th.InferenceServerClient(srv.http_url) as c:
            return i, infer(c, [SENTENCES[i % len(SENTENCES)]])[0]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(call, range(32)))
    for i, got in answers:
        assert np.abs(got - ref[i % len(SENTENCES)]).max() <= ATOL, i
    with th.InferenceServerClient(srv.http_url) as c:
        stats = c.get_inference_statistics("tinytext_text")["model_stats"][0]
    assert int(stats["inference_count"]) == 32 and int(stats["execution_count"]) < 32, stats  # some requests shared an execution


def test_bad_requests_get_their_own_error_and_the_server_keeps_answering(served: Callable[..., tuple[EmbeddedServer, PipelineConfig]]) -> None:
    srv, cfg = served("latency", "model.tokenizer.truncation=false")
    with th.InferenceServerClient(srv.http_url) as c:
        with pytest.raises(th.InferenceServerException, match="not UTF-8"):
            infer(c, [b"ok", b"\xff\xfe broken"])
        with pytest.raises(th.InferenceServerException, match="over max_length 12"):
            infer(c, [SENTENCES[4]])
        empty = th.InferInput("text", [0, 1], "BYTES")
        empty.set_data_from_numpy(np.zeros((0, 1), dtype=object))
        with pytest.raises(th.InferenceServerException):
            c.infer("tinytext_text", [empty])
        assert infer(c, ["the cat"]).shape == (1, 8)  # still serving


def test_the_shipped_response_cache_answers_repeats_from_the_cache_only_on_a_server_with_one(served: Callable[..., tuple[EmbeddedServer, PipelineConfig]]) -> None:
    """variants.throughput.response_cache=true as shipped: on a server with --cache-config the second ask of a text is a
    hit with the same bytes; on a server without one the config loads and caches nothing (why the bench starts its own)."""
    for cache_bytes, hits in ((1 << 20, 1), (0, 0)):
        srv, _ = served("throughput", "variants.throughput.response_cache=true", cache_bytes=cache_bytes)
        with th.InferenceServerClient(srv.http_url) as c:
            first, again = infer(c, ["The cat sat on the mat."]), infer(c, ["The cat sat on the mat."])
            stats = c.get_inference_statistics("tinytext_text")["model_stats"][0]["inference_stats"]
        assert first.tobytes() == again.tobytes()
        assert int(stats["cache_hit"]["count"]) == hits and int(stats["cache_miss"]["count"]) == hits, stats  # a miss, then a hit
        srv.stop()
