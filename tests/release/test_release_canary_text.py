"""``release canary`` on a text endpoint (``<model>_text``), sending text to a real tritonserver.

The store holds releases of the tiny text model as the repository stage writes them (tests/helpers/tiny_text.py):
``tinytext`` (the tensor model, served by the ONNX Runtime stand-in) and ``tinytext_text`` (the tokenizer and the
BLS model.py, python backend). The text releases:

    1  max_length 12   the live version
    2  max_length 12   the same files: passes and is promoted
    3  max_length 6    the long sentences cut shorter: other embeddings, fails on outputs

The canary's copies of the text model call the tensor model the environment serves, as the served text model does.
The latency bound is loose here: this test judges the text path; tests/release/test_release_canary.py judges latency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as th

from pipeline.core.config import ParityConfig, load_config
from pipeline.core.config.enums import CanaryTraffic
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.core.errors import ReleaseError
from pipeline.release.canary.prepare import Candidate
from pipeline.release.canary.run import run_canary
from pipeline.release.promote import SwitchOptions, promote
from pipeline.release.store import pointer
from pipeline.release.verify import verify_store
from pipeline.release.store.store import ReleaseStore
from pipeline.serving.process import EmbeddedServer
from tests.repository.test_text_endpoint import infer
from tests.helpers.tiny_text import release_text_repository, text_model_overrides

pytestmark = pytest.mark.triton
SENTENCES = "# a text canary's sentences\nThe cat sat on the mat.\nA dog ran fast\nred blue green\nthe model server batch queue token text long short the cat sat\nslow\n"
LOOSE = CanaryConfig(duration_s=3, rounds=3, min_round_requests=5, max_p99_ratio=5.0)


def _release(store: ReleaseStore, cfg_of: Callable[[int], object], tmp: Path, n: int, max_length: int, text_only: bool) -> None:
    """Write the repository for ``max_length`` and release it (the text model alone when ``text_only``)."""
    release_text_repository(store, cfg_of(max_length), tmp / f"set{n}", tmp, ("tinytext_text",) if text_only else ("tinytext", "tinytext_text"))


def test_a_text_canary_sends_sentences_fails_other_embeddings_and_promotes_the_same(make_params: Callable[..., Path], tmp_path: Path) -> None:
    model_dir = tmp_path / "model"

    def cfg_of(max_length: int) -> object:
        return load_config(make_params(*text_model_overrides(model_dir, 12), f"model.tokenizer.max_length={max_length}", name=f"p{max_length}.yaml"))

    store = ReleaseStore(tmp_path / "store")
    _release(store, cfg_of, tmp_path, 1, 12, text_only=False)  # tinytext 1 and tinytext_text 1
    _release(store, cfg_of, tmp_path, 2, 12, text_only=True)
    _release(store, cfg_of, tmp_path, 3, 6, text_only=True)
    promote(store, "dev", model="tinytext", version=1)
    promote(store, "dev", model="tinytext_text", version=1)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text(SENTENCES, encoding="utf-8")

    with EmbeddedServer(store.env_repository("dev"), "tinytext", also_load=("tinytext_text",), ort_standin=True, log_dir=tmp_path / "logs") as srv:
        opts = SwitchOptions.of(srv.http_url)
        with pytest.raises(ReleaseError, match="takes text, and no --inputs was given"):
            run_canary(store, Candidate("dev", 2, "tinytext_text"), opts, LOOSE, ParityConfig())

        cut = run_canary(store, Candidate("dev", 3, "tinytext_text"), opts, LOOSE, ParityConfig(), inputs=sentences)
        rep = cut.report.to_json()
        assert not cut.passed and "outputs" in rep["verdict"]["summary"], rep["verdict"]
        assert rep["traffic"]["rows"] == 5 and rep["errors"]["failed"] == 0, rep["errors"]
        assert rep["outputs"]["outputs"]["embedding"]["max_abs"] > 1e-3  # the long sentence, cut at 6 tokens instead of 12
        assert store.env_state("dev", "tinytext_text").live == 1

        # Real traffic this time: perf_analyzer sends the sentences as BYTES to both copies.
        same = run_canary(
            store, Candidate("dev", 2, "tinytext_text"), opts, replace(LOOSE, traffic=CanaryTraffic.real, request_rate=60.0, share=0.4), ParityConfig(), inputs=sentences
        )
        rep = same.report.to_json()
        assert same.passed, rep["verdict"]
        assert rep["outputs"]["outputs"]["embedding"]["max_abs"] == 0.0 and rep["errors"]["failed"] == 0, rep
        assert rep["errors"]["triton"]["candidate"]["success"] > 5, rep["errors"]
        assert store.env_state("dev", "tinytext_text").live == 2 and store.env_state("dev", "tinytext").live == 1

        # A canary of the tensor model: on a pass the endpoint keeps its version and calls the model's new one.
        _release(store, cfg_of, tmp_path, 4, 12, text_only=False)  # tinytext 2 (the same files), tinytext_text 4
        rows = tmp_path / "rows.npz"
        np.savez(rows, input_ids=np.array([[2, 4, 5, 3]], np.int64), attention_mask=np.ones((1, 4), np.int64))
        before = infer(th.InferenceServerClient(srv.http_url), ["The cat sat on the mat."])
        tensor = run_canary(store, Candidate("dev", 2, "tinytext"), opts, LOOSE, ParityConfig(), inputs=rows)
        assert tensor.passed, tensor.report.to_json()["verdict"]
        served = pointer.parse_config(store.fs.read_text(f"{store.model_rel('dev', 'tinytext_text')}/config.pbtxt"), "pointer")
        assert store.env_state("dev", "tinytext").live == 2 and store.env_state("dev", "tinytext_text").live == 2 and pointer.pin_of(served) == 2
        assert [e["version"] for e in store.env_state("dev", "tinytext_text").history][-1] == 2  # re-pinned, not switched
        np.testing.assert_array_equal(infer(th.InferenceServerClient(srv.http_url), ["The cat sat on the mat."]), before)
        verify_store(store)
