"""A model and its text endpoint switch as one set (pipeline/release/promote_set.py).

Two sets of the tiny text model are released, each from its own git commit: set 1 (``tinytext`` 1 with table seed 0,
``tinytext_text`` 1) and set 2 (``tinytext`` 2 with seed 1: other embeddings, ``tinytext_text`` 2). In an environment
the endpoint's config names the version of ``tinytext`` it calls, so it never answers with a model it was not switched
with.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pipeline.core.config import load_config
from pipeline.release.listing import describe
from pipeline.release.promote import SwitchOptions
from pipeline.release.promote_set import promote_set, rollback_set
from pipeline.release.store import faults, pointer
from pipeline.release.store.history import live_stack
from pipeline.release.store.store import ReleaseStore
from pipeline.core.errors import ReleaseError
from pipeline.release.verify import verify_store
from tests.helpers.project import GIT
from tests.helpers.tiny_text import reference, release_text_repository, text_model_overrides, tiny_text_onnx

SET = ["tinytext", "tinytext_text"]
SENTENCES = ["The cat sat on the mat.", "a red dog ran fast", "slow"]


def _pin(store: ReleaseStore, env: str) -> int | None:
    return pointer.pin_of(pointer.parse_config(store.fs.read_text(f"{store.model_rel(env, 'tinytext_text')}/config.pbtxt"), "pointer"))


def _served(store: ReleaseStore, env: str, model: str = "tinytext") -> list[int]:
    return pointer.live_versions(pointer.parse_config(store.fs.read_text(f"{store.model_rel(env, model)}/config.pbtxt"), "pointer"))


@pytest.fixture
def two_sets(make_params: Callable[..., Path], tmp_path: Path) -> tuple[ReleaseStore, Path]:
    """A store with sets 1 and 2, and the folder of the model files (``tinytext.onnx`` is set 2's, ``seed0.onnx`` set 1's)."""
    model_dir = tmp_path / "model"
    overrides = text_model_overrides(model_dir, 12)
    store = ReleaseStore(tmp_path / "store")
    subprocess.run([*GIT, "init", "-q"], cwd=tmp_path, check=True)
    for n, seed in ((1, 0), (2, 1)):
        tiny_text_onnx(model_dir / "tinytext.onnx", seed=seed)
        if seed == 0:
            tiny_text_onnx(model_dir / "seed0.onnx", seed=0)
        subprocess.run([*GIT, "commit", "-qm", f"set {n}", "--allow-empty"], cwd=tmp_path, check=True)
        release_text_repository(store, load_config(make_params(*overrides, name=f"p{n}.yaml")), tmp_path / f"set{n}", tmp_path)
    return store, model_dir


def test_a_set_switches_as_one_and_a_failure_between_its_members_puts_the_model_back(two_sets: tuple[ReleaseStore, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = two_sets
    none = SwitchOptions()
    res = promote_set(store, "dev", SET, 1, None, none)
    assert [(r.model, r.version) for r in res] == [("tinytext", 1), ("tinytext_text", 1)]
    assert _served(store, "dev") == [1] and _pin(store, "dev") == 1
    serve = [ln for ln in describe(store, "tinytext_text")[1] if ln.strip().startswith("dev: serve")]
    assert serve and serve[0].endswith("--load-model=tinytext --load-model=tinytext_text"), serve  # a fleet server loads the set

    # A disk that fills after the model switched (serving 1 beside 2) and before the endpoint did: the model goes back.
    monkeypatch.setenv(faults.ENV, "between_set_members:enospc")
    with pytest.raises(OSError, match="No space left"):
        promote_set(store, "dev", SET, 2, None, none)
    monkeypatch.delenv(faults.ENV)
    assert _served(store, "dev") == [1] and _pin(store, "dev") == 1 and store.env_state("dev", "tinytext_text").live == 1
    events = store.env_state("dev", "tinytext").history
    assert [(e["action"], e["version"]) for e in events] == [("promote", 1), ("promote", 2), ("rollback", 1)]
    assert "the set's switch failed" in events[-1]["note"] and live_stack(events) == [1]
    verify_store(store)

    res = promote_set(store, "dev", SET, 2, None, none)
    assert [(r.action, r.model, r.previous, r.version) for r in res] == [("promote", "tinytext", 1, 2), ("promote", "tinytext_text", 1, 2)]
    assert _served(store, "dev") == [2] and _pin(store, "dev") == 2  # settled: 1 is no longer served beside 2
    verify_store(store)

    res = rollback_set(store, "dev", SET, none)
    assert [(r.action, r.model, r.version) for r in res] == [("rollback", "tinytext", 1), ("rollback", "tinytext_text", 1)]
    assert _served(store, "dev") == [1] and _pin(store, "dev") == 1

    # The model switched alone: the endpoint keeps its version and calls the model's new one.
    res = promote_set(store, "dev", SET, 2, None, none, follow=True)
    assert [(r.model, r.version, r.repin) for r in res] == [("tinytext", 2, False), ("tinytext_text", 1, True)]
    assert _served(store, "dev") == [2] and _pin(store, "dev") == 2 and store.env_state("dev", "tinytext_text").live == 1
    verify_store(store)

    # An endpoint calling a version its environment does not serve (a hand edit) is no set: verify says so.
    rel = f"{store.model_rel('dev', 'tinytext_text')}/config.pbtxt"
    store.fs.write_atomic(rel, store.fs.read_bytes(rel).replace(b'string_value: "2"', b'string_value: "7"'))
    with pytest.raises(ReleaseError) as e:
        verify_store(store)
    assert "calls version 7 of 'tinytext'" in str(e.value.details) and "not one set" in str(e.value.details), e.value.details


@pytest.mark.triton
def test_a_fleet_server_answers_with_the_set_it_was_switched_to(two_sets: tuple[ReleaseStore, Path], tmp_path: Path) -> None:
    """With --reload: the endpoint answers with set 2's embeddings after the promote and set 1's after the rollback,
    and the model's old version is unloaded once the set settled."""
    import tritonclient.http as th

    from pipeline.serving.process import EmbeddedServer
    from tests.repository.test_text_endpoint import infer

    store, model_dir = two_sets
    promote_set(store, "dev", SET, 1, None, SwitchOptions())
    tok = model_dir / "tok" / "tokenizer.json"
    want = {1: reference(model_dir / "seed0.onnx", tok, SENTENCES, 12), 2: reference(model_dir / "tinytext.onnx", tok, SENTENCES, 12)}
    assert np.abs(want[1] - want[2]).max() > 0.1  # the two sets answer differently

    with EmbeddedServer(store.env_repository("dev"), "tinytext", also_load=("tinytext_text",), ort_standin=True, log_dir=tmp_path / "logs") as srv:
        client = th.InferenceServerClient(srv.http_url)

        def embed() -> np.ndarray:
            return np.concatenate([infer(client, [s]) for s in SENTENCES])

        np.testing.assert_allclose(embed(), want[1], atol=1e-5)
        promote_set(store, "dev", SET, 2, None, SwitchOptions.of(srv.http_url))
        np.testing.assert_allclose(embed(), want[2], atol=1e-5)
        assert client.is_model_ready("tinytext", "2") and not client.is_model_ready("tinytext", "1")
        rollback_set(store, "dev", SET, SwitchOptions.of(srv.http_url))
        np.testing.assert_allclose(embed(), want[1], atol=1e-5)
        assert client.is_model_ready("tinytext", "1") and not client.is_model_ready("tinytext", "2")


@pytest.mark.triton
def test_a_text_canary_of_a_new_set_calls_its_own_model_and_promotes_the_set(two_sets: tuple[ReleaseStore, Path], make_params: Callable[..., Path], tmp_path: Path) -> None:
    """A text candidate built with another version of the model than the environment serves: its copy calls a copy of
    that version. Set 2 (other embeddings) fails on outputs and changes nothing; set 3 (set 1's files again, new
    versions) passes, and both switch as one set."""
    from pipeline.core.config import ParityConfig
    from pipeline.core.config.schema_release import CanaryConfig
    from pipeline.release.canary.prepare import Candidate
    from pipeline.release.canary.run import run_canary
    from pipeline.serving.process import EmbeddedServer

    store, model_dir = two_sets
    (model_dir / "tinytext.onnx").write_bytes((model_dir / "seed0.onnx").read_bytes())
    subprocess.run([*GIT, "commit", "-qm", "set 3", "--allow-empty"], cwd=tmp_path, check=True)
    release_text_repository(store, load_config(make_params(*text_model_overrides(model_dir, 12), name="p3.yaml")), tmp_path / "set3", tmp_path)
    promote_set(store, "dev", SET, 1, None, SwitchOptions())
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    loose = CanaryConfig(duration_s=2, rounds=2, min_round_requests=5, max_p99_ratio=5.0)

    with EmbeddedServer(store.env_repository("dev"), "tinytext", also_load=("tinytext_text",), ort_standin=True, log_dir=tmp_path / "logs") as srv:
        opts = SwitchOptions.of(srv.http_url)
        other = run_canary(store, Candidate("dev", 2, "tinytext_text"), opts, loose, ParityConfig(), inputs=sentences)
        assert not other.passed and "outputs" in other.report.to_json()["verdict"]["summary"]
        assert store.env_state("dev", "tinytext").live == 1 and store.env_state("dev", "tinytext_text").live == 1 and _pin(store, "dev") == 1

        same = run_canary(store, Candidate("dev", 3, "tinytext_text"), opts, loose, ParityConfig(), inputs=sentences)
        assert same.passed, same.report.to_json()["verdict"]
        assert same.report.to_json()["outputs"]["outputs"]["embedding"]["max_abs"] == 0.0
        assert store.env_state("dev", "tinytext").live == 3 and store.env_state("dev", "tinytext_text").live == 3
        assert _served(store, "dev") == [3] and _pin(store, "dev") == 3
        verify_store(store)
