"""The parity gate covers the text endpoint, and nothing ships a tokenizer the gate did not check.

What the endpoint computes (a padded batch of mixed lengths) must equal each sentence alone; a model that does not
mask its padding answers differently in a batch, and is stopped here. The repository and a release ship the text
endpoint only with the very tokenizer.json parity checked (by sha256).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.core.atomic import file_digest
from pipeline.core.config import PipelineConfig, load_config
from pipeline.core.errors import ParityError, ReleaseError, RepositoryError
from pipeline.parity.report import gate
from pipeline.parity.text import endpoint_parity
from pipeline.records.parity import ParityReport, TextParity
from pipeline.release.evidence.reports import parity_section
from pipeline.repository.writer import check_text_parity
from tests.helpers.tiny_text import WORDS, text_model_overrides, tiny_text_onnx

SENTENCES = ["the cat sat on the mat", "a dog ran fast", "red", "the model server batch queue token text long short"]


@pytest.fixture
def text_cfg(make_params: Callable[..., Path], tmp_path: Path) -> PipelineConfig:
    return load_config(make_params(*text_model_overrides(tmp_path, 12)))


def test_a_masked_model_passes_with_every_edge_case(text_cfg: PipelineConfig) -> None:
    tok = text_cfg.model.tokenizer
    assert tok is not None
    res = endpoint_parity(tok, Path(tok.path), Path(str(text_cfg.model.path)), SENTENCES, text_cfg.parity.fp32.atol)
    assert res.passed and res.max_abs <= 1e-6 and res.rows == len(SENTENCES) + 3, res
    assert res.cases == ["empty", "non-ASCII", "over max_length"] and res.longest_tokens == 12  # the long row was cut to max_length
    assert res.tokenizer_sha256 == file_digest(Path(tok.path))[0]
    assert TextParity.from_json(json.loads(json.dumps(res.to_json()))) == res


def test_a_model_that_does_not_mask_its_padding_fails_the_gate(text_cfg: PipelineConfig, tmp_path: Path) -> None:
    tok = text_cfg.model.tokenizer
    assert tok is not None
    unmasked = tiny_text_onnx(tmp_path / "unmasked.onnx", masked=False)
    res = endpoint_parity(tok, Path(tok.path), unmasked, SENTENCES, text_cfg.parity.fp32.atol)
    assert not res.passed and res.max_abs > 1e-2 and "mask its padding" in res.reason
    with pytest.raises(ParityError, match="text endpoint") as e:
        gate(ParityReport(artifacts={}, passed=True, gating=[], text_endpoint=res), "parity.json")
    assert "model.tokenizer=null" in (e.value.fix or "")


def test_truncation_off_leaves_the_over_length_row_to_the_endpoint_error(text_cfg: PipelineConfig) -> None:
    tok = dataclasses.replace(text_cfg.model.tokenizer, truncation=False)  # type: ignore[type-var]
    res = endpoint_parity(tok, Path(tok.path), Path(str(text_cfg.model.path)), [" ".join(WORDS[:5])], text_cfg.parity.fp32.atol)
    assert res.passed and "over max_length" not in res.cases


def _report(sha: str, passed: bool = True) -> ParityReport:
    return ParityReport(artifacts={}, passed=passed, text_endpoint=TextParity(sha, passed, 0.0 if passed else 1.0, 1e-4, 7, reason="" if passed else "broken"))


def test_the_repository_and_a_release_ship_only_the_tokenizer_parity_checked(tmp_path: Path) -> None:
    version = tmp_path / "tinytext_text" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text("# the endpoint\n")
    (version / "tokenizer.json").write_text('{"v": 1}\n')
    sha = file_digest(version / "tokenizer.json")[0]
    check_text_parity(_report(sha), tmp_path / "parity.json", sha)  # the very file, passed: ships
    for report, words in ((_report("0" * 64), "another tokenizer"), (_report(sha, passed=False), "did not pass"), (ParityReport(artifacts={}), "no verdict")):
        with pytest.raises(RepositoryError, match=words):
            check_text_parity(report, tmp_path / "parity.json", sha)

    parity = tmp_path / "parity.json"
    parity.write_text(json.dumps(_report(sha).to_json()))
    section = parity_section(parity, version, ["embedding"])
    assert section.passed and section.served["tokenizer.json"].artifact == "text_endpoint"
    parity.write_text(json.dumps(_report("f" * 64).to_json()))
    with pytest.raises(ReleaseError) as e:
        parity_section(parity, version, ["embedding"])
    assert "is not the tokenizer parity checked" in str(e.value)


@pytest.mark.parametrize("truncation", [True, False])
def test_the_bench_and_the_gate_tokenize_alike(make_params: Callable[..., Path], tmp_path: Path, truncation: bool) -> None:
    """bench/text.py and parity/text.py each load the shipped tokenizer.json as the endpoint configures it: on the tiny
    tokenizer and MiniLM's own, they encode every edge case alike, and a batch of one needs no padding on either side."""
    from pipeline.bench.text import _tokenizer as bench_tokenizer
    from pipeline.core.config.files import tokenizer_file
    from pipeline.parity.text import EDGE_CASES, _feeds, _tokenizer as gate_tokenizer

    flag = f"model.tokenizer.truncation={str(truncation).lower()}"
    for cfg in (load_config(make_params(*text_model_overrides(tmp_path / "tiny", 12), flag)), load_config(make_params(flag, name="minilm.yaml"))):
        tok = cfg.model.tokenizer
        assert tok is not None
        path = tokenizer_file(tok.path, None)
        bench, gate_tok = bench_tokenizer(cfg, path), gate_tokenizer(path, tok)
        for s in [*EDGE_CASES.values(), *SENTENCES]:
            a, b = bench.encode(s), gate_tok.encode(s)
            assert (a.ids, a.attention_mask) == (b.ids, b.attention_mask), (cfg.model.name, s)
            if s == EDGE_CASES["over max_length"]:
                assert (len(a.ids) == tok.max_length) == truncation, len(a.ids)  # cut only when the config says so, whatever the file says
            fed = _feeds([b], tok, pad_id=0)
            assert {n: v[0].tolist() for n, v in fed.items()} == {n: list(getattr(a, str(f))) for n, f in tok.inputs.items()}
