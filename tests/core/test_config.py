"""Config composition per group, and typos failing at load with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.config import load_config
from pipeline.core.errors import ConfigError
from pipeline.params import compose, write_params
from tests.helpers.project import copy_checkout
from tests.helpers.project import ROOT


@pytest.mark.parametrize("model", ["minilm", "cnn"])
def test_model_group(make_params, model: str) -> None:
    cfg = load_config(make_params(f"model={model}"))
    assert cfg.model.name == model
    assert cfg.model.source == "factory"
    assert cfg.model.inputs and cfg.model.outputs


def test_minilm_inputs_follow_seq_len(make_params) -> None:
    cfg = load_config(make_params("model.seq_len=64"))
    assert [i.name for i in cfg.model.inputs] == ["input_ids", "attention_mask"]
    assert all(i.dtype == "int64" for i in cfg.model.inputs)
    assert cfg.model.data["seq_len"] == 64
    assert cfg.target_specs["a100"].profile.dims["sequence"] == [1, 64, 256]


def test_onnx_model_needs_path(make_params, tiny_onnx: Path) -> None:
    with pytest.raises(ConfigError, match="model.path"):
        load_config(make_params("model=onnx"))
    cfg = load_config(make_params("model=onnx", f"model.path={tiny_onnx}"))
    assert cfg.model.source == "onnx" and cfg.model.path == str(tiny_onnx)
    # The file must exist when params.yaml is composed, not only when the export stage opens it.
    with pytest.raises(ConfigError, match="some.onnx") as e:
        make_params("model=onnx", "model.path=some.onnx")
    assert "no such file" in str(e.value) and "set model.path to an existing .onnx file" in str(e.value)


def test_targets_and_variants(make_params) -> None:
    cfg = load_config(make_params("targets=[cpu,a100,h100]", "variants.latency.instance_count=2"))
    assert cfg.targets == ["cpu", "a100", "h100"]
    assert cfg.target_specs["h100"].compute_capability == "9.0"
    assert cfg.variants.latency.instance_count == 2
    assert cfg.variants.latency.dynamic_batching is None
    assert cfg.variants.throughput.dynamic_batching is not None


def test_unknown_key_named_with_suggestion(make_params, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        make_params("+model.seqlen=64")  # `+` forces Hydra to add it; the check at composition refuses it
    assert "model.seqlen" in str(e.value) and "model.seq_len" in str(e.value)
    # A hand-edited params.yaml with the same typo fails when a stage loads it.
    edited = tmp_path / "edited.yaml"
    edited.write_text(make_params().read_text().replace("  seq_len: 128\n", "  seq_len: 128\n  seqlen: 64\n", 1))
    with pytest.raises(ConfigError) as e:
        load_config(edited)
    assert "model.seqlen" in str(e.value) and "model.seq_len" in str(e.value)


def test_wrong_type_named(make_params) -> None:
    with pytest.raises(ConfigError, match="variants.latency.instance_count"):
        load_config(make_params("variants.latency.instance_count=many"))


def test_unknown_target(make_params) -> None:
    with pytest.raises(ConfigError, match="a200"):
        load_config(make_params("targets=[cpu,a200]"))


def test_graph_level_must_be_triton_level(make_params) -> None:
    with pytest.raises(ConfigError, match="graph_optimization_level"):
        load_config(make_params("variants.throughput.graph_optimization_level=3"))


def test_hydra_override_typo_fails_before_params_change(tmp_path: Path) -> None:
    out = tmp_path / "params.yaml"
    out.write_text("sentinel: true\n")
    with pytest.raises(ConfigError, match="model.seqlen"):
        write_params(["model.seqlen=3"], out=out)
    assert out.read_text() == "sentinel: true\n"
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left behind


def test_committed_params_match_conf() -> None:
    """`dvc repro` reads the committed params.yaml; `dvc exp run` composes conf/. They must agree."""
    assert (ROOT / "params.yaml").read_text() == compose([]), "params.yaml is stale: run `python -m pipeline.params`"
    assert "\nconfig_check: passed (pipeline/core/config)\n" in (ROOT / "params.yaml").read_text()


def test_dvc_hydra_integration_enabled() -> None:
    text = (ROOT / ".dvc" / "config").read_text()
    assert "[hydra]" in text and "enabled = true" in text


def test_a_model_file_gets_every_key_it_leaves_out_from_the_schema(tmp_path: Path, tiny_onnx: Path) -> None:
    """The schema's defaults are composed under every conf/ file (store.py): what a model file leaves out is ModelConfig's
    default, exactly, in params.yaml (replaces the check that conf/model_base/defaults.yaml repeated them)."""
    import dataclasses

    import yaml

    from pipeline.core.config.schema import ModelConfig

    conf = _project_with_model(tmp_path, f"name: mine\nsource: onnx\npath: {tiny_onnx}\n")
    model = yaml.safe_load(compose(["model=mine"], conf))["model"]
    schema = {f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default) for f in dataclasses.fields(ModelConfig)}
    assert set(model) == set(schema)
    assert {k: v for k, v in model.items() if k not in ("name", "source", "path")} == {k: v for k, v in schema.items() if k not in ("name", "source", "path")}


def _project_with_model(tmp_path: Path, model_yaml: str) -> Path:
    conf = copy_checkout(tmp_path, "conf", "dvc.yaml") / "conf"
    (conf / "model" / "mine.yaml").write_text(model_yaml, encoding="utf-8")
    return conf


def test_a_model_file_leaving_out_optional_keys_still_gives_every_key_dvc_needs(tmp_path: Path, tiny_onnx: Path) -> None:
    conf = _project_with_model(tmp_path, f"name: mine\nsource: onnx\npath: {tiny_onnx}\n")
    text = compose(["model=mine"], conf)
    assert "output_kinds: {}" in text and "seed: 0" in text


def test_a_dvc_param_missing_from_the_composed_config_fails_at_composition(tmp_path: Path, tiny_onnx: Path) -> None:
    conf = _project_with_model(tmp_path, f"name: mine\nsource: onnx\npath: {tiny_onnx}\n")
    dvc_yaml = tmp_path / "dvc.yaml"
    dvc_yaml.write_text(dvc_yaml.read_text(encoding="utf-8").replace("      - model.seed\n", "      - model.sead\n", 1))
    with pytest.raises(ConfigError, match=r"model.sead.*dvc.yaml's stage 'export'"):
        compose(["model=mine"], conf)


def test_a_stage_may_depend_on_a_whole_section(tmp_path: Path, tiny_onnx: Path) -> None:
    """The bench stage lists `bench` (the section, every knob in it): present when the section is; a misspelt one fails."""
    conf = _project_with_model(tmp_path, f"name: mine\nsource: onnx\npath: {tiny_onnx}\n")
    dvc_yaml = tmp_path / "dvc.yaml"
    assert "\n      - bench  " in dvc_yaml.read_text(encoding="utf-8")
    compose(["model=mine"], conf)
    dvc_yaml.write_text(dvc_yaml.read_text(encoding="utf-8").replace("\n      - bench  ", "\n      - bnch  ", 1))
    with pytest.raises(ConfigError, match=r"bnch.*dvc.yaml's stage 'bench'"):
        compose(["model=mine"], conf)


def test_the_typed_config_is_what_a_merge_onto_the_structured_schema_gives(make_params, tmp_path: Path) -> None:
    """load._build replaced OmegaConf.merge(structured schema, raw) for speed: both give the same config, on every
    model group, a text model, a fleet with GPU targets, ints where floats are declared, and keys left out."""
    import dataclasses

    import yaml
    from omegaconf import OmegaConf

    from pipeline.core.config import load
    from pipeline.core.config.problems import Problems
    from pipeline.core.config.schema import PipelineConfig
    from tests.helpers.tiny_text import text_model_overrides

    derived = ("serving", "engine_precision", "int8_in_fleet", "fp16_in_fleet")
    cases = [
        [],
        ["model=cnn", "targets=[cpu,a100,t4]", "parity.fp32.atol=1", "+parity.fp16.per_output.logits.rtol=1", "bench.rounds.budget_s=30"],
        text_model_overrides(tmp_path),
    ]
    schema = OmegaConf.structured(PipelineConfig)
    for i, overrides in enumerate(cases):
        raw = yaml.safe_load(make_params(*overrides, name=f"p{i}.yaml").read_text())
        for key in derived:
            raw.pop(key)
        if i == 2:
            del raw["bench"]["rounds"], raw["release"]  # left out: both fill them from the schema's defaults
        load._walk(PipelineConfig, raw, "", Problems())
        built = load._build(PipelineConfig, raw)
        merged = OmegaConf.to_object(OmegaConf.merge(schema, raw))
        # repr, not ==: 1 == 1.0, and an int where a float is declared must become a float as at the merge
        assert repr(dataclasses.asdict(built)) == repr(dataclasses.asdict(merged)), overrides  # type: ignore[call-overload]
