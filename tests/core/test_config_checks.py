"""Every config value is checked when params.yaml is composed, and one message lists every problem.

Each test composes conf/ as `python -m pipeline.params` and `dvc exp run -S` do (the same DVC function,
with the same resolver), so a bad value fails before params.yaml changes, not minutes later in a stage.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from pipeline.core.config import ConfigProblems, fixed_batch, load_config
from pipeline.core.config.problems import Problems
from pipeline.core.errors import ConfigError
from pipeline.params import compose, write_params
from tests.conftest import TINY_MLP
from tests.helpers.project import copy_checkout
from tests.helpers.project import ROOT


Case = tuple[str, ...]  # (override, the key its problem line names, what else the test checks)


def problems(*overrides: str) -> list[str]:
    """The problem lines composition reports for ``overrides`` (it must fail)."""
    with pytest.raises(ConfigError) as e:
        compose(list(overrides))
    assert isinstance(e.value, ConfigProblems), e.value.render()
    return [p.line() for p in e.value.problems]


def deal(cases: list[Case], depth: int) -> list[list[Case]]:
    """``cases`` (override, key, ...) dealt into compositions whose keys share no section (``depth`` levels of key):
    one composition checks many overrides, and none can meet another's cross-field rule."""
    groups: list[list[Case]] = []
    for case in cases:
        section = ".".join(case[1].split(".")[:depth])
        for g in groups:
            if all(".".join(c[1].split(".")[:depth]) != section for c in g):
                g.append(case)
                break
        else:
            groups.append([case])
    return groups


def group_id(group: list[Case]) -> str:
    """A group's test id: its size and its first key."""
    return f"{len(group)}-{group[0][1]}"


def each_own_line(group: list[Case]) -> dict[str, str]:
    """Compose every override of ``group`` at once; each gives exactly one problem line, its own: key -> line."""
    lines = problems(*(c[0] for c in group))
    assert len(lines) == len(group), lines
    own = {}
    for case in group:
        mine = [line for line in lines if line.startswith(case[1])]
        assert len(mine) == 1, (case, lines)
        own[case[1]] = mine[0]
    return own


def one_problem(override: str, key: str) -> str:
    lines = problems(override)
    assert len(lines) == 1 and lines[0].startswith(key), lines
    return lines[0]


def relu_onnx(path: Path, dims: list[int | str], name: str = "a") -> Path:
    """A one-node ONNX file whose input ``name`` has ``dims`` (an int first dim = no dynamic batch axis)."""
    x = helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("out", TensorProto.FLOAT, dims)
    graph = helper.make_graph([helper.make_node("Relu", [name], ["out"])], "relu", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


# ---------------------------------------------------------------- the findings (each passed composition before)
def test_negative_queue_delay_fails_at_composition() -> None:
    line = one_problem("variants.throughput.dynamic_batching.max_queue_delay_us=-1", "variants.throughput.dynamic_batching.max_queue_delay_us=-1")
    assert "must be in [0, 10000000] (closest valid: 0)" in line


def test_empty_fleet_fails_at_composition() -> None:
    line = one_problem("targets=[]", "targets=[]")
    assert "fleet is empty" in line and "targets=[cpu]" in line


def test_parity_max_samples_zero_fails_at_composition() -> None:
    assert "closest valid: 1" in one_problem("parity.max_samples=0", "parity.max_samples=0")


def test_protocol_typo_fails_with_did_you_mean() -> None:
    assert one_problem("bench.protocol=grcp", "bench.protocol") == "bench.protocol='grcp': not one of [http, grpc]; did you mean 'grpc'?"


@pytest.mark.parametrize("version", [0, -1])
def test_non_positive_repository_version_fails(version: int) -> None:
    assert "must be >= 1 (closest valid: 1)" in one_problem(f"repository.version={version}", "repository.version")


def test_zero_instances_fail() -> None:
    assert "must be in [1, 64] (closest valid: 1)" in one_problem("variants.latency.instance_count=0", "variants.latency.instance_count=0")


@pytest.mark.parametrize("text", ["- model: {}\n- bench: {}\n", "just a string\n", "42\n"])
def test_non_mapping_params_file_is_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="not a mapping"):
        load_config(path)


# ---------------------------------------------------------------- one message, every problem
def test_every_problem_is_listed_in_one_message() -> None:
    with pytest.raises(ConfigProblems) as e:
        compose(
            [
                "bench.protocol=grcp",
                "repository.version=0",
                "parity.max_samples=0",
                "variants.latency.instance_count=0",
                "targets=[]",
                "variants.throughput.dynamic_batching.max_queue_delay_us=-1",
                "bench.server=embeded",
            ]
        )
    keys = [p.key for p in e.value.problems]
    assert set(keys) == {
        "bench.protocol",
        "repository.version",
        "parity.max_samples",
        "variants.latency.instance_count",
        "targets",
        "variants.throughput.dynamic_batching.max_queue_delay_us",
        "bench.server",
    }
    text = e.value.render()
    assert text.startswith("7 problems in ") and text.count("\n  - ") == 7 and "fix:" in text
    assert "bench.server='embeded': not one of [embedded, external]; did you mean 'embedded'?" in text


def test_unknown_keys_and_wrong_types_are_listed_with_the_rest() -> None:
    lines = problems("+export.opsett=18", "variants.latency.instance_count=many", "repository.version=0")
    assert lines[0] == "export.opsett=18: unknown key; did you mean 'export.opset'?"
    assert lines[1].startswith("variants.latency.instance_count='many': must be an int")
    assert lines[2].startswith("repository.version=0")


# ---------------------------------------------------------------- closed sets are Enums
CLOSED_SETS = [
    ("model.source=onx", "model.source", "onnx"),
    ("target_specs.a100.kind=gpus", "target_specs.a100.kind", "gpu"),
    ("target_specs.cpu.precision=fp61", "target_specs.cpu.precision", "fp16"),
    ("target_specs.a100.builder.hardware_compatibility=ampere", "target_specs.a100.builder.hardware_compatibility", "ampere_plus"),
    ("repository.default_variant=throughput_", "repository.default_variant", "throughput"),
    ("bench.server=externl", "bench.server", "external"),
    ("bench.embedded_backend=nativ", "bench.embedded_backend", "native"),
    ("bench.input_shapes=as_sample", "bench.input_shapes", "as_sampled"),
    ("parity.fp16.check_error_stat=maximum", "parity.fp16.check_error_stat", "max"),
    ("model.inputs.0.dtype=int46", "model.inputs[0].dtype", "int64"),
]


@pytest.mark.parametrize("group", deal(CLOSED_SETS, 1), ids=group_id)
def test_closed_sets_suggest_the_closest_value(group: list[Case]) -> None:
    own = each_own_line(group)
    for _, key, suggestion in group:
        assert "not one of [" in own[key] and own[key].endswith(f"did you mean '{suggestion}'?"), own[key]


def test_graph_level_is_checked() -> None:
    assert "not a Triton ORT level" in one_problem("variants.latency.graph_optimization_level=3", "variants.latency.graph_optimization_level")


def test_enum_values_read_as_plain_strings(make_params) -> None:
    cfg = load_config(make_params())
    assert cfg.model.source == "factory" and f"{cfg.model.source}" == "factory" and str(cfg.bench.protocol) == "http"
    assert cfg.target_specs["a100"].precision == "fp16" and f"model.{cfg.serving.precision}.onnx" == "model.fp32.onnx"
    settings = json.loads(json.dumps(asdict(cfg.bench), default=str))
    assert settings["server"] == "embedded" and settings["input_shapes"] == "uniform"
    assert json.dumps({cfg.bench.server: 1}) == '{"embedded": 1}'


# ---------------------------------------------------------------- ranges
RANGES = [
    ("variants.throughput.dynamic_batching.max_queue_size=-5", "variants.throughput.dynamic_batching.max_queue_size"),
    ("variants.throughput.dynamic_batching.preferred_batch_sizes=[0,8]", "variants.throughput.dynamic_batching.preferred_batch_sizes"),
    ("variants.throughput.dynamic_batching.preferred_batch_sizes=[4,32]", "variants.throughput.dynamic_batching.preferred_batch_sizes"),
    ("variants.latency.max_batch_size=-1", "variants.latency.max_batch_size"),
    ("variants.latency.intra_op_threads=-1", "variants.latency.intra_op_threads"),
    ("parity.synthetic_batch_sizes=[1,0]", "parity.synthetic_batch_sizes"),
    ("parity.fp16.atol=-0.1", "parity.fp16.atol"),
    ("parity.fp32.error_quantile=0", "parity.fp32.error_quantile"),
    ("parity.trt.error_quantile=1.5", "parity.trt.error_quantile"),
    ("export.opset=6", "export.opset"),
    ("export.opset=99", "export.opset"),
    ("export.sample_batch=0", "export.sample_batch"),
    ("bench.sweep.concurrency=[0,4]", "bench.sweep.concurrency"),
    ("bench.sweep.concurrency=[]", "bench.sweep.concurrency"),
    ("bench.sweep.measurement_interval_ms=0", "bench.sweep.measurement_interval_ms"),
    ("bench.sweep.stability_percentage=101", "bench.sweep.stability_percentage"),
    ("bench.max_trials=0", "bench.max_trials"),
    ("bench.rounds.c1.min=-1", "bench.rounds.c1.min"),
    ("bench.rounds.c1.max=2", "bench.rounds.c1.max"),
    ("tune.min_gain=2", "tune.min_gain"),
    ("bench.rounds.throughput.max=1", "bench.rounds.throughput.max"),
    ("bench.rounds.throughput.concurrency=[0,8]", "bench.rounds.throughput.concurrency"),
    ("tune.concurrency=[0]", "tune.concurrency"),
    ("tune.rounds=0", "tune.rounds"),
    ("tune.space.instance_count=[0]", "tune.space.instance_count"),
    ("bench.server_timeout_s=0", "bench.server_timeout_s"),
    ("bench.perf_timeout_s=-1", "bench.perf_timeout_s"),
    ("target_specs.a100.builder.optimization_level=7", "target_specs.a100.builder.optimization_level"),
    ("target_specs.a100.builder.workspace_mb=0", "target_specs.a100.builder.workspace_mb"),
    ("target_specs.a100.profile.batch=[8,1,32]", "target_specs.a100.profile.batch"),
    ("target_specs.h100.profile.dims.sequence=[0,128,256]", "target_specs.h100.profile.dims.sequence"),
    ("target_specs.a100.compute_capability=80", "target_specs.a100.compute_capability"),
    ("precision.max_finite_val=1e6", "precision.max_finite_val"),
    ("precision.fallback.max_abs=0", "precision.fallback.max_abs"),
    ("precision.fallback.max_attempts=0", "precision.fallback.max_attempts"),
    ("release.environments=[]", "release.environments"),
    # Upper bounds (issue 27): an extra zero fails here, not in Triton or as a 200000-thread instance group.
    ("variants.throughput.instance_count=100000", "variants.throughput.instance_count"),
    ("variants.throughput.max_batch_size=1000000000", "variants.throughput.max_batch_size"),
    ("variants.throughput.dynamic_batching.max_queue_delay_us=1000000000000", "variants.throughput.dynamic_batching.max_queue_delay_us"),
    ("variants.latency.intra_op_threads=1000000", "variants.latency.intra_op_threads"),
    ("variants.latency.warmup.count=100000000", "variants.latency.warmup.count"),
    ("release.canary.duration_s=inf", "release.canary.duration_s"),
    ("release.environments=[dev,dev]", "release.environments"),
]


@pytest.mark.parametrize("group", deal(RANGES, 2), ids=group_id)
def test_ranges(group: list[Case]) -> None:
    """Each override out of its range gives exactly one problem line, its own (composed together, as a user's many
    overrides are: every problem is listed)."""
    own = each_own_line(group)
    assert all(own[key].startswith(key + "=") for _, key in group), own


def test_range_messages_name_the_closest_valid_value() -> None:
    assert "closest valid: [4, 16]" in one_problem("variants.throughput.dynamic_batching.preferred_batch_sizes=[4,32]", "variants.throughput")
    assert "'8.0'" in one_problem("target_specs.a100.compute_capability=80", "target_specs.a100.compute_capability")
    assert "closest valid: 23" in one_problem("export.opset=99", "export.opset")


def test_bounds_messages_are_filled_in_and_valid() -> None:
    assert "must be finite (closest valid: 86400)" in one_problem("release.canary.duration_s=inf", "release.canary.duration_s")
    [line] = problems("variants.throughput.instance_count=64", "variants.throughput.intra_op_threads=32")
    assert line.startswith("variants.throughput.instance_count=64") and "= 2048 threads, over 1024" in line, line
    msg = one_problem("variants.latency.max_batch_size=abc", "variants.latency.max_batch_size")
    assert "$VALUE" not in msg and "'abc' of type 'str'" in msg
    assert "at most 255 bytes" in one_problem("model.name=" + "a" * 256, "model.name")


EVERY_FORM = [
    (override, re.split(r"[=\[]", line, maxsplit=1)[0], line)
    for override, line in [
        ("tune.space.preferred_batch_sizes=[]", "tune.space.preferred_batch_sizes=[]: must not be empty (default: [[4, 8], [8, 16], [16, 32]])"),
        ("tune.space.preferred_batch_sizes=[[4,8],[0,8]]", "tune.space.preferred_batch_sizes[1]=[0, 8]: every value must be >= 1; [0] is not (closest valid: [1, 8])"),
        ("+model.sample_dims.height=0", "model.sample_dims.height=0: must be in [1, 65536] (closest valid: 1)"),
        ("export.batch_axis=''", "export.batch_axis='': must name the dynamic batch axis (default: 'batch')"),
        ("bench.peers=[torchserve,torchserve]", "bench.peers=['torchserve', 'torchserve']: lists ['torchserve'] more than once"),
        ("int8.op_types=[MatMul,MatMul]", "int8.op_types=['MatMul', 'MatMul']: lists ['MatMul'] more than once"),
    ]
]


@pytest.mark.parametrize("group", deal(EVERY_FORM, 2), ids=group_id)
def test_every_form_of_knob_is_checked_by_the_one_walker(group: list[Case]) -> None:
    """A list of lists (each inner list), a mapping of numbers (each value), a string that must not be empty, a list
    without repeats: the schema declares them (knob()), the walker in knobs.py reports them like any range."""
    own = each_own_line(group)
    assert all(own[key] == line for _, key, line in group), own


def test_problems_collector_numbers() -> None:
    p = Problems()
    assert p.number("a", 0.5, 0, 1, low_open=True) and not p.number("b", 0, 0, 1, low_open=True)
    assert not p.number("c", float("nan"), 0) and not p.number("d", True, 0)
    assert [x.key for x in p.items] == ["b", "c", "d"] and "must be in (0, 1]" in p.items[0].message


# ---------------------------------------------------------------- cross-field rules
def test_serving_is_derived_and_an_override_fails() -> None:
    lines = problems("serving.precision=fp16")
    assert len(lines) == 1 and "target_specs.cpu.precision" in lines[0] and "never set it" in lines[0]
    assert "targets" in one_problem("serving.target=a100", "serving.target")
    assert "serving:\n  target: a100\n  kind: gpu\n  precision: fp16\n" in compose(["targets=[a100,cpu]"])
    assert "target_specs.cpu.kind" in one_problem("serving.kind=gpu", "serving.kind")


@pytest.mark.parametrize(
    ("overrides", "key", "needle"),
    [
        (["bench.server=external"], "bench.url", "bench.url="),
        (["tune.constraints.perf_latency_p99=0.5", "tune.space.max_queue_delay_us=[1000,2000]"], "tune.constraints.perf_latency_p99", "closest feasible value: above 1 ms"),
        (["targets=[cpu,a100,a100]"], "targets", "more than once"),
        (["targets=[cpu,v100]"], "targets", "no definition"),
        (["targets=[a100,a10]", "target_specs.a10.compute_capability='8.0'"], "targets", "share compute capability 8.0"),
        (["target_specs.a100.name=a200"], "target_specs.a100.name", "must be 'a100'"),
        (["target_specs.t4.builder.hardware_compatibility=ampere_plus"], "target_specs.t4.builder.hardware_compatibility", "Ampere"),
        (["variants.throughput.max_batch_size=0"], "variants.throughput.max_batch_size", "dynamic_batching=null"),
        (["variants.latency.name=fast"], "variants.latency.name", "must be 'latency'"),
        (["model.inputs=[{name: a, shape: [batch]}, {name: a, shape: [batch]}]"], "model.inputs[*].name", "more than once"),
        (["model=cnn", "model.factory._target_=null"], "model.factory._target_", "model.source=factory needs"),
        (["model=cnn", "model.outputs=[]"], "model.outputs", "output names"),
        (["model.name=../x"], "model.name", "directory name"),
        (["+parity.fp16.per_output.embeding.atol=0.1"], "parity.fp16.per_output", "did you mean 'embedding'"),
    ],
)
def test_cross_field_rules(overrides: list[str], key: str, needle: str) -> None:
    lines = problems(*overrides)
    assert len(lines) == 1 and lines[0].startswith(key + "=") and needle in lines[0], lines


def test_latency_variant_without_dynamic_batching_is_valid(make_params) -> None:
    cfg = load_config(make_params("variants.latency.dynamic_batching=null", "variants.throughput.dynamic_batching=null"))
    assert cfg.variants.latency.dynamic_batching is None and cfg.variants.throughput.dynamic_batching is None


def test_variant_group_override_points_to_default_variant() -> None:
    line = one_problem("variant=throughput", "variant=")
    assert "not a choice" in line and "repository.default_variant=throughput" in line
    with pytest.raises(ConfigError) as e:
        compose(["variant=fastest"])  # no such file in conf/variant: Hydra's error, with the same pointer
    assert "repository.default_variant" in e.value.render()


# ---------------------------------------------------------------- the model source, at composition
def test_missing_checkpoint_fails_with_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigProblems) as e:
        compose([*TINY_MLP, f"model.checkpoint={tmp_path / 'weights.safetensors'}"])
    [problem] = e.value.problems
    assert problem.key == "model.checkpoint" and "no such file" in problem.message and "weights.safetensors" in problem.message


def test_pinned_input_names_must_match_the_graph(tmp_path: Path) -> None:
    path = relu_onnx(tmp_path / "m.onnx", ["batch", 4], name="pixels")
    with pytest.raises(ConfigProblems) as e:
        compose(["model=onnx", f"model.path={path}", "model.inputs=[{name: image, dtype: float32, shape: [batch, 4]}]"])
    line = e.value.problems[0].line()
    assert "model.inputs=['image']" in line and "graph has ['pixels']" in line
    compose(["model=onnx", f"model.path={path}", "model.inputs=[{name: pixels, dtype: float32, shape: [batch, 4]}]"])


def test_relative_model_path_is_read_from_the_project_root(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    copy_checkout(project, "conf")
    (project / "models").mkdir()
    relu_onnx(project / "models" / "m.onnx", ["batch", 4])
    assert "path: models/m.onnx" in compose(["model=onnx", "model.path=models/m.onnx"], project / "conf")
    with pytest.raises(ConfigError, match="no such file"):
        compose(["model=onnx", "model.path=models/m.onnx"])  # this checkout has no models/m.onnx


def test_fixed_batch_onnx_composes_with_one_note(tmp_path: Path, capsys: pytest.CaptureFixture[str], make_params) -> None:
    path = relu_onnx(tmp_path / "fixed.onnx", [1, 4])
    params = make_params("model=onnx", f"model.path={path}")
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note:")]
    assert notes == [f"note: {path} has no dynamic batch axis (input 'a' dims [1, 4]): the repository stage renders max_batch_size 0 and no dynamic batching for both variants"]
    cfg = load_config(params)
    assert fixed_batch(cfg) == f"{path} has no dynamic batch axis (input 'a' dims [1, 4])"
    # Batching values the repository stage replaces for this model are not problems either.
    compose(["model=onnx", f"model.path={path}", "variants.throughput.max_batch_size=0"])
    capsys.readouterr()
    dynamic = relu_onnx(tmp_path / "dynamic.onnx", ["batch", 4])
    assert fixed_batch(load_config(make_params("model=onnx", f"model.path={dynamic}"))) is None
    assert "note:" not in capsys.readouterr().err


def test_fixed_batch_factory_model(make_params, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(make_params(*TINY_MLP, "model.inputs=[{name: x, dtype: float32, shape: [4, 8]}]"))
    assert fixed_batch(cfg) == "model 'tiny' has no dynamic batch axis (model.inputs[0] 'x' shape [4, 8])"
    assert "note: model 'tiny' has no dynamic batch axis" in capsys.readouterr().err
    assert fixed_batch(load_config(make_params(*TINY_MLP))) is None


# ---------------------------------------------------------------- both composition paths
def test_params_cli_prints_one_message_and_leaves_params_unchanged(tmp_path: Path) -> None:
    """`python -m pipeline.params bench.protocol=grcp` on a copy of the project (the real params.yaml is never at risk)."""
    copy_checkout(tmp_path, "pipeline", "conf", "hydra_plugins")
    params = tmp_path / "params.yaml"
    params.write_bytes((ROOT / "params.yaml").read_bytes())
    before = params.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    res = subprocess.run(
        [sys.executable, "-m", "pipeline.params", "bench.protocol=grcp", "parity.max_samples=0"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode != 0 and res.stdout == ""
    assert "Traceback" not in res.stderr and res.stderr.count("ERROR [params]") == 1, res.stderr
    assert "bench.protocol='grcp': not one of [http, grpc]; did you mean 'grpc'?" in res.stderr
    assert "parity.max_samples=0: must be >= 1" in res.stderr
    assert params.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["conf", "hydra_plugins", "params.yaml", "pipeline"]


def test_write_params_leaves_file_unchanged_on_a_bad_value(tmp_path: Path) -> None:
    out = tmp_path / "params.yaml"
    out.write_text("sentinel: true\n")
    with pytest.raises(ConfigError, match="bench.protocol"):
        write_params(["bench.protocol=grcp"], out=out)
    assert out.read_text() == "sentinel: true\n" and list(tmp_path.iterdir()) == [out]


def test_dvc_finds_the_resolver_through_the_hydra_plugin(tmp_path: Path) -> None:
    """What `dvc exp run` does before composing: load the Hydra plugins on the repo root, in a fresh process."""
    code = (
        "import sys; from dvc.utils.hydra import load_hydra_plugins; from omegaconf import OmegaConf; "
        f"load_hydra_plugins({str(ROOT)!r}); print(OmegaConf.has_resolver('pipeline_checked'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() == "True", res.stderr
    assert not (ROOT / "hydra_plugins" / "__init__.py").exists()  # a namespace package, as Hydra's scan needs


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["bench.server=external", "bench.url=http://x"], "must be <host>:<port>"),
        (["bench.server=external", "bench.url=localhost:notaport"], "must be <host>:<port>"),
        (["bench.server=external", "bench.url=http://127.0.0.1:8001", "bench.protocol=grpc"], "bench.protocol=grpc"),
    ],
)
def test_bench_url_is_an_endpoint_of_the_protocol(overrides: list[str], needle: str) -> None:
    lines = problems(*overrides)
    assert len(lines) == 1 and lines[0].startswith("bench.url") and needle in lines[0], lines


def test_bench_url_forms_that_compose() -> None:
    for overrides in (["bench.url=127.0.0.1:8001", "bench.protocol=grpc"], ["bench.url=http://127.0.0.1:8000"], ["bench.url='[::1]:8000'"]):
        compose(["bench.server=external", *overrides])
