"""Every rule one field cannot state alone: bounds set by another field, rules across sections, the fleet, formats.

Ranges and closed sets of single fields are schema metadata, checked by :func:`~pipeline.core.config.knobs.check_knobs`
before these run, so a rule may skip a key that already has a problem (``p.has``). Each function adds to a
:class:`Problems`; none raises, so one error lists them all. The stages rely on these: a value that passed here needs no
check of its own downstream.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

from pipeline.core.config.derived import IN_FLEET, derived_engine_precision, derived_in_fleet
from pipeline.core.config.enums import BenchProfile, BenchServer, CanaryTraffic, HardwareCompatibility, Precision, QuantMode, QuantType, TargetKind
from pipeline.core.config.knobs import check_knobs
from pipeline.core.config.problems import Problems, did_you_mean, show
from pipeline.core.config.schema import LIMITS, ModelConfig, PipelineConfig, TargetConfig, VariantConfig
from pipeline.core.config.schema_bench import BenchConfig
from pipeline.core.config.schema_data import FILE_SUFFIXES, DataPathConfig
from pipeline.core.config.schema_precision import ChooseConfig, Int8Config, PrecisionConfig
from pipeline.core.config.schema_release import CanaryConfig, ReleaseConfig
from pipeline.core.config.schema_tune import TuneConfig

_CC = re.compile(r"^\d+\.\d+$")  # compute capability, "8.0"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")  # a Triton model / environment directory name
_ENDPOINT = re.compile(r"^(http://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+):[0-9]{1,5}$")  # host:port (IPv6 in brackets)
_TORCHSERVE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-.]*$")  # torch-model-archiver's rule for a model name
MIN_SPLIT_ROWS = 3  # rows on each side of the INT8 fallback's search/validation split
DATA_FORMS = "must be {_target_: pkg.fn, ...} (a sample-data hook) or {path: file.json|.npz|.npy|folder of images}, or null"


def check_rules(
    cfg: PipelineConfig,
    p: Problems,
    *,
    fixed_batch: str | None = None,
    serving: dict[str, Any] | None = None,
    outputs: list[str] | None = None,
    engine_precision: dict[str, Any] | None = None,
    in_fleet: dict[str, Any] | None = None,
) -> None:
    """Run every section's rules on ``cfg`` (whose single-field ranges were checked already).

    ``fixed_batch`` (see files.fixed_batch) relaxes the batching rules the repository stage overrides for a
    model without a batch axis; ``serving`` is the raw ``serving`` section, derived in conf/config.yaml and
    compared with what it derives from (None: absent or unresolvable, nothing to compare); ``outputs`` are the
    model's output names when known (parity per-output keys must name one); ``engine_precision`` and ``in_fleet``
    ({"int8_in_fleet": ..., "fp16_in_fleet": ...}) are the raw derived values of those names (None: absent).
    """
    check_model(cfg.model, p)
    check_precision(cfg.precision, p)
    check_int8(cfg.int8, p)
    check_fleet(cfg, p)
    check_serving(cfg, p, serving)
    check_fleet_precision(cfg, p, engine_precision, in_fleet)
    for name, target in cfg.target_specs.items():
        check_target(target, f"target_specs.{name}", p)
    for key in ("latency", "throughput"):
        check_variant(getattr(cfg.variants, key), f"variants.{key}", key, p, fixed_batch)
    suffix = cfg.repository.trt_model_suffix
    if not suffix or "/" in suffix:
        p.add("repository.trt_model_suffix", suffix, "must be a non-empty name part without '/' (default: '_trt')")
    check_parity_outputs(cfg, p, outputs)
    check_choose(cfg.choose, p)
    check_bench(cfg.bench, p)
    check_bench_peers(cfg, p)
    check_tune(cfg.tune, p)
    check_release(cfg.release, p)


# ---------------------------------------------------------------- model
def check_tokenizer(m: ModelConfig, p: Problems) -> None:
    """The text endpoint feeds graph inputs from the tokenizer: at least the ids, each named input once, known inputs only."""
    tok = m.tokenizer
    assert tok is not None
    fed = list(tok.inputs.values())
    if "ids" not in fed:
        p.add(
            "model.tokenizer.inputs",
            {k: str(v) for k, v in tok.inputs.items()},
            "must say which graph input takes the token ids, e.g. {input_ids: ids, attention_mask: attention_mask}",
        )
    names = [i.name for i in m.inputs]
    for name in tok.inputs:
        if names and name not in names and len(set(names)) == len(names):
            p.add(f"model.tokenizer.inputs.{name}", str(tok.inputs[name]), f"is not an input of the model ({names})" + did_you_mean(name, names))
    if len(set(fed)) != len(fed):
        p.add("model.tokenizer.inputs", {k: str(v) for k, v in tok.inputs.items()}, "feeds one tokenizer field to two inputs")


def check_model(m: ModelConfig, p: Problems) -> None:
    """Name, input specs, sample data, judged output axes (what the source needs is checked at composition: files.py)."""
    if not _NAME.match(m.name or ""):
        p.add("model.name", m.name, "must be a plain Triton model directory name (letters, digits, _ . -, not starting with '.')")
    elif len(m.name.encode()) > LIMITS["name_bytes"]:
        p.add("model.name", f"{m.name[:24]}... ({len(m.name.encode())} bytes)", f"must be at most {LIMITS['name_bytes']} bytes: a directory name (and Triton's model name)")
    p.unique("model.inputs[*].name", [i.name for i in m.inputs])
    p.unique("model.outputs", list(m.outputs))
    for i, spec in enumerate(m.inputs):
        key = f"model.inputs[{i}]"
        if not spec.name:
            p.add(f"{key}.name", spec.name, "must not be empty")
        bad = [d for d in spec.shape if isinstance(d, bool) or not ((isinstance(d, int) and d >= 1) or (isinstance(d, str) and d))]
        if bad:
            p.add(f"{key}.shape", list(spec.shape), f"every dim must be an int >= 1 or an axis name; {show(bad)} not")
        if spec.low > spec.high:
            p.add(f"{key}.low", spec.low, f"must be <= {key}.high={spec.high} (the synthetic sample range)")
    check_data(m.data, p)
    if m.tokenizer is not None:
        check_tokenizer(m, p)
    for out, axis in m.output_axes.items():
        if out not in m.output_kinds:
            p.add(
                f"model.output_axes.{out}",
                axis,
                f"names an output model.output_kinds does not judge ({sorted(m.output_kinds)}); add it there (e.g. '+model.output_kinds.{out}=classifier') or remove the axis",
            )
        elif axis == 0:
            p.add(f"model.output_axes.{out}", axis, "axis 0 is the batch axis; name the class or embedding axis (e.g. 1, or -1 for the last)")


def check_data(data: dict[str, Any] | None, p: Problems, key: str = "model.data") -> None:
    """``data`` is null, a hook (its arguments are its own), or the file form with known keys and usable mean/std.

    Whether the path exists, and whether a folder holds images, is checked at composition (files.check_source).
    """
    if data is None or "_target_" in data:
        return
    if "path" not in data:
        p.add(key, data, DATA_FORMS)
        return
    known = [f.name for f in dataclasses.fields(DataPathConfig)]
    for k in data:
        if k not in known:
            p.add(f"{key}.{k}", data[k], f"unknown key{did_you_mean(k, known)} (the file form takes {', '.join(known)}; a hook, {key}._target_=pkg.fn, takes any arguments)")
    path = data["path"]
    if not isinstance(path, str) or not path:
        p.add(f"{key}.path", path, "must be the path of a .json, .npz or .npy file, or of a folder of images")
        return
    is_file_form = Path(path).suffix.lower() in FILE_SUFFIXES
    for name in ("mean", "std"):
        if data.get(name) is not None:
            _check_normalization(data[name], f"{key}.{name}", name, p, f"{key}.path={path}" if is_file_form else None)


def _check_normalization(values: Any, k: str, name: str, p: Problems, file_form: str | None) -> None:
    """``model.data.mean`` / ``.std``: per-channel values for a folder of images (``file_form`` names the file if not)."""
    if file_form is not None:
        p.add(k, values, f"applies to a folder of images only, and {file_form} is a file: normalize the arrays in it, or set {k}=null")
    elif not isinstance(values, list) or len(values) not in (1, 3):
        p.add(k, values, "must be a list of per-channel values, 3 (RGB order) or 1 (for every channel), e.g. [0.485, 0.456, 0.406], or null")
    elif not p.each(k, values):
        return  # not numbers: reported, nothing more to judge
    elif not all(math.isfinite(v) for v in values):
        p.add(k, values, "every value must be finite")
    elif name == "std" and any(v <= 0 for v in values):
        p.add(k, values, "every value must be > 0: each pixel is divided by its channel's std")


# ---------------------------------------------------------------- precision
def check_precision(c: PrecisionConfig, p: Problems) -> None:
    """FP16 conversion: the clip bounds in order."""
    if not p.has("precision.max_finite_val") and c.min_positive_val >= c.max_finite_val:
        p.add("precision.min_positive_val", c.min_positive_val, f"must be < precision.max_finite_val={c.max_finite_val}")


def check_int8(q: Int8Config, p: Problems) -> None:
    """Calibration sample counts against each other, and the fallback's split of the fewest rows allowed."""
    c = q.calibration
    if not p.has("int8.calibration.min_samples"):
        p.number("int8.calibration.max_samples", c.max_samples, c.min_samples)
    if p.has("int8.fallback.validation") or not q.fallback.enabled or p.has("int8.calibration.min_samples"):
        return
    # The rule holds out floor(n * share) of n rows, so the fewest calibration rows allowed bound both parts.
    held = math.floor(c.min_samples * q.fallback.validation)
    if min(held, c.min_samples - held) < MIN_SPLIT_ROWS:
        p.add(
            "int8.fallback.validation",
            q.fallback.validation,
            f"int8.calibration.min_samples={c.min_samples}: the fallback's split leaves, with the fewest rows allowed, "
            f"{c.min_samples - held} search and {held} validation rows; each part needs at least {MIN_SPLIT_ROWS} (rank "
            f"agreement compares the pairs of at least three rows): raise int8.calibration.min_samples or move "
            "int8.fallback.validation toward 0.5",
        )


def check_choose(c: ChooseConfig, p: Problems) -> None:
    """The auto rounds: candidates to choose from, the round counts in order."""
    if Precision.auto in c.candidates:
        p.add("choose.candidates", list(c.candidates), "lists auto: the candidates are the precisions auto chooses from (fp32, fp16, int8)")
    if not p.has("choose.min_rounds"):
        p.number("choose.max_rounds", c.max_rounds, c.min_rounds)


# ---------------------------------------------------------------- the fleet
def check_fleet(cfg: PipelineConfig, p: Problems) -> None:
    """A non-empty fleet of defined, distinct targets, each defined under its own name; GPU compute capabilities distinct."""
    known = sorted(cfg.target_specs)
    if not cfg.targets:
        p.add("targets", [], f"the fleet is empty: list at least one target, e.g. targets=[cpu] (defined: {known})")
        return
    p.unique("targets", cfg.targets)
    for t in cfg.targets:
        if t not in cfg.target_specs:
            p.add(
                "targets",
                cfg.targets,
                f"'{t}' has no definition in target_specs{did_you_mean(t, known)} (defined: {known}; or add conf/target/{t}.yaml and list it in conf/config.yaml)",
            )
    for name, spec in cfg.target_specs.items():
        if spec.name != name:
            p.add(f"target_specs.{name}.name", spec.name, f"must be '{name}', the key it is defined under (conf/target/{name}.yaml)")
    _check_distinct_capabilities(cfg, p)


def _check_distinct_capabilities(cfg: PipelineConfig, p: Problems) -> None:
    by_cc: dict[str, str] = {}
    for t in dict.fromkeys(cfg.targets):  # a duplicate is reported above, not as a capability clash
        spec = cfg.target_specs.get(t)
        if spec is None or spec.kind != TargetKind.gpu or not spec.compute_capability:
            continue
        if spec.compute_capability in by_cc:
            p.add(
                "targets",
                cfg.targets,
                f"GPU targets '{by_cc[spec.compute_capability]}' and '{t}' share compute capability "
                f"{spec.compute_capability}: Triton picks an engine per capability (cc_model_filenames); keep one of them",
            )
        by_cc.setdefault(spec.compute_capability, t)


def check_serving(cfg: PipelineConfig, p: Problems, serving: dict[str, Any] | None) -> None:
    """``serving`` as composed equals what it derives from: targets[0] and its kind and precision."""
    first = cfg.target_specs.get(cfg.targets[0]) if cfg.targets else None
    if serving is None or first is None:
        return
    target = serving.get("target")
    if str(target) != cfg.targets[0]:
        p.add("serving.target", target, f"is derived from targets[0]='{cfg.targets[0]}': never set it; to serve another target, put it first in `targets`")
    for field in ("kind", "precision"):
        want, got = getattr(first, field), serving.get(field)
        if not p.has(f"target_specs.{cfg.targets[0]}.{field}") and got is not None and str(got) != str(want):
            p.add(f"serving.{field}", got, f"is derived from target_specs.{cfg.targets[0]}.{field}='{want}': never set it; change target_specs.{cfg.targets[0]}.{field} instead")


def check_fleet_precision(cfg: PipelineConfig, p: Problems, engine_precision: dict[str, Any] | None, fleet: dict[str, Any] | None = None) -> None:
    """What each target's precision needs: auto only where it can be timed, INT8 from real samples in a form TensorRT
    reads, and the derived engine_precision and <precision>_in_fleet as derived (``fleet``: their raw values by key)."""
    for t in dict.fromkeys(cfg.targets):
        spec = cfg.target_specs.get(t)
        if spec is not None:
            _check_target_precision(cfg, t, spec, p)
    precision_problem = any(p.has(f"target_specs.{t}.precision") for t in cfg.targets)
    for prec in IN_FLEET:
        got_flag, want_flag = (fleet or {}).get(f"{prec}_in_fleet"), derived_in_fleet(cfg, prec)
        if got_flag is not None and got_flag != want_flag and not precision_problem:
            p.add(f"{prec}_in_fleet", got_flag, f"is derived from targets and target_specs.<target>.precision ({want_flag}): never set it")
    if engine_precision is None:
        return
    want = derived_engine_precision(cfg)
    got = {str(k): str(v) for k, v in engine_precision.items()} if isinstance(engine_precision, dict) else engine_precision
    if got != want and not precision_problem:
        p.add("engine_precision", engine_precision, f"is derived from targets and target_specs.<target>.precision ({want}): never set it")


def _check_target_precision(cfg: PipelineConfig, t: str, spec: TargetConfig, p: Problems) -> None:
    key, q = f"target_specs.{t}.precision", cfg.int8
    if spec.precision == Precision.auto and spec.kind == TargetKind.gpu:
        p.add(
            key,
            "auto",
            "auto times each precision in process with ONNX Runtime on the machine that runs the pipeline, which "
            "says nothing about a TensorRT engine on a GPU: set fp16 or int8 (or fp32)",
        )
    if spec.precision == Precision.int8 and cfg.model.data is None:
        p.add(key, "int8", "INT8 is calibrated on real samples and model.data is null: set model.data ({_target_: pkg.fn} or {path: samples.json}), or choose another precision")
    if spec.precision != Precision.int8 or spec.kind != TargetKind.gpu:
        return
    if q.mode != QuantMode.static:
        p.add("int8.mode", q.mode, f"target '{t}' builds a TensorRT engine from the INT8 ONNX, which needs Q/DQ nodes: set int8.mode=static")
    if q.activation_type != QuantType.int8 or not q.activation_symmetric:
        p.add(
            "int8.activation_type",
            q.activation_type,
            f"target '{t}' builds a TensorRT engine from the INT8 ONNX: TensorRT reads symmetric int8 only, set int8.activation_type=int8 and int8.activation_symmetric=true",
        )


def check_target(t: TargetConfig, key: str, p: Problems) -> None:
    """A GPU target: its compute capability, what its builder settings need of it, its profile ranges."""
    if t.kind != TargetKind.gpu:
        return
    cc = t.compute_capability or ""
    if not _CC.match(cc):
        hint = f"'{cc[0]}.{cc[1:]}'" if cc.isdigit() and len(cc) >= 2 else "'8.0'"
        p.add(f"{key}.compute_capability", t.compute_capability, f"must look like {hint} (quoted in YAML) for a gpu target")
    b = t.builder
    if b.hardware_compatibility == HardwareCompatibility.ampere_plus and _CC.match(cc) and float(cc) < 8.0:
        p.add(
            f"{key}.builder.hardware_compatibility", b.hardware_compatibility, f"ampere_plus needs an Ampere or newer GPU (compute capability >= 8.0), target has {cc}; use 'none'"
        )
    check_profile_range(t.profile.batch, f"{key}.profile.batch", p)
    for axis, rng in t.profile.dims.items():
        check_profile_range(rng, f"{key}.profile.dims.{axis}", p)


def check_profile_range(rng: list[int], key: str, p: Problems) -> bool:
    """``[min, opt, max]`` with ``1 <= min <= opt <= max``."""
    if len(rng) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in rng) and 1 <= rng[0] <= rng[1] <= rng[2]:
        return True
    ints = [v for v in rng if isinstance(v, int) and not isinstance(v, bool)]
    hint = f" (closest valid: {show(sorted(max(1, v) for v in ints))})" if len(ints) == 3 else " (e.g. [1, 8, 32])"
    return p.add(key, list(rng), "must be [min, opt, max] with 1 <= min <= opt <= max" + hint)


# ---------------------------------------------------------------- variants, parity
def check_variant(v: VariantConfig, key: str, name: str, p: Problems, fixed_batch: str | None) -> None:
    """The variant it names, a thread budget, and batching and warmup sizes within max_batch_size."""
    if v.name != name:
        p.add(f"{key}.name", v.name, f"must be '{name}', the variant it configures")
    if not p.has(key) and v.instance_count * max(v.intra_op_threads, 1) > LIMITS["instance_threads"]:
        p.add(
            f"{key}.instance_count",
            v.instance_count,
            f"x intra_op_threads {v.intra_op_threads} = {v.instance_count * max(v.intra_op_threads, 1)} threads, over {LIMITS['instance_threads']}:"
            f" lower one of them (a machine runs about one thread per core well)",
        )
    # Without a batch axis (max_batch_size 0, or a fixed-batch graph) the repository stage renders one sample at the
    # model's own shape and no dynamic batching, so only batching variants bound the sizes.
    if v.warmup is not None and v.max_batch_size > 0 and fixed_batch is None and not p.has(f"{key}.warmup.batch_sizes"):
        p.each(f"{key}.warmup.batch_sizes", v.warmup.batch_sizes, 1, v.max_batch_size)
    db, dk = v.dynamic_batching, f"{key}.dynamic_batching"
    if db is None or fixed_batch is not None or p.has(f"{dk}.preferred_batch_sizes"):
        return
    if v.max_batch_size == 0:
        p.add(f"{key}.max_batch_size", 0, f"{dk} needs max_batch_size > 0: set {key}.max_batch_size={max(db.preferred_batch_sizes, default=8)} or {dk}=null")
    elif v.max_batch_size > 0:
        p.each(f"{dk}.preferred_batch_sizes", db.preferred_batch_sizes, 1, v.max_batch_size, non_empty=False)


def check_parity_outputs(cfg: PipelineConfig, p: Problems, outputs: list[str] | None) -> None:
    """Per-output tolerances name outputs of the model (when its outputs are known)."""
    if not outputs:
        return
    for kind in ("fp32", "fp16", "trt", "int8"):
        for out in getattr(cfg.parity, kind).per_output:
            if out not in outputs:
                p.add(f"parity.{kind}.per_output", out, f"'{out}' is not an output of the model{did_you_mean(out, outputs)} (outputs: {outputs})")


# ---------------------------------------------------------------- bench
def check_bench(b: BenchConfig, p: Problems) -> None:
    """The server's address, what tuning needs, the rounds' counts and interval widths, overload levels, the soak's ramp."""
    _check_bench_urls(b, p)
    _check_bench_rounds(b, p)
    if b.overload.enabled and not b.overload.levels:
        p.add("bench.overload.levels", [], "must not be empty while bench.overload.enabled (e.g. [0.5, 1.0, 1.5]), or set bench.overload.enabled=false")
    s = b.soak
    if not p.has("bench.soak.duration_s") and not p.has("bench.soak.ramp_s") and 0 < s.duration_s < 3 * s.ramp_s:
        # The fit needs the ramp to leave most of the soak: at least two thirds of it.
        p.add("bench.soak.ramp_s", s.ramp_s, f"must leave two thirds of bench.soak.duration_s={s.duration_s:g} to fit (closest valid: {s.duration_s / 3:g})")


def _check_bench_urls(b: BenchConfig, p: Problems) -> None:
    if b.server == BenchServer.external and not b.url:
        p.add(
            "bench.url",
            b.url,
            "bench.server=external needs the running Triton's <host>:<port> for bench.protocol (HTTP 8000 or gRPC 8001 by default), e.g. bench.url=127.0.0.1:8000",
        )
    elif b.url and not _ENDPOINT.match(b.url):
        # perf_analyzer's -u and tritonclient both take host:port (an http:// prefix is tolerated for HTTP only).
        p.add("bench.url", b.url, "must be <host>:<port> of bench.protocol's endpoint, e.g. 127.0.0.1:8000 (HTTP) or 127.0.0.1:8001 (gRPC)")
    elif b.url and b.url.startswith("http://") and b.protocol == "grpc":
        p.add("bench.url", b.url, "is an http:// URL but bench.protocol=grpc: give the gRPC endpoint as <host>:<port>")
    if b.metrics_url and not _ENDPOINT.match(b.metrics_url):
        p.add("bench.metrics_url", b.metrics_url, "must be <host>:<port> of Triton's metrics endpoint, e.g. 127.0.0.1:8002")


def _check_bench_rounds(b: BenchConfig, p: Problems) -> None:
    """Each kind of rounds: 0 or at least two (an interval needs two), a maximum not below the minimum."""
    r = b.rounds
    for name, counts in (("c1", r.c1), ("throughput", r.throughput)):
        key = f"bench.rounds.{name}"
        if p.has(f"{key}.min"):
            continue
        if counts.min == 1:
            p.add(f"{key}.min", 1, "must be 0 (no rounds) or >= 2: an interval needs two rounds (closest valid: 2)")
        elif counts.max < counts.min:
            p.add(f"{key}.max", counts.max, f"must be >= {key}.min={counts.min} (closest valid: {counts.min})")
    if b.profile == BenchProfile.default and b.server == BenchServer.embedded and r.c1.min == 0:
        p.add(
            "bench.rounds.c1.min",
            0,
            "bench.profile=default measures the latency variant only in rounds: set bench.rounds.c1.min >= 2, or bench.profile=full (the sweep's unpaired ratio)",
        )
    if not p.has("bench.rounds.target_half_width") and not p.has("bench.rounds.max_half_width"):
        p.number("bench.rounds.max_half_width", r.max_half_width, r.target_half_width, 10)
    if not p.has("bench.rounds.peers.min"):
        p.number("bench.rounds.peers.max", r.peers.max, r.peers.min)


def check_bench_peers(cfg: PipelineConfig, p: Problems) -> None:
    """bench.peers: servers measured beside Triton (the embedded one: the bench starts them all), and the model names
    they accept."""
    b = cfg.bench
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


# ---------------------------------------------------------------- release
def min_tune_budget_s(t: TuneConfig) -> float:
    """The shortest search that compares anything: the shipped variant and one challenger, twice each, at every
    concurrency, each run at least perf_analyzer's three windows plus a second to start (pipeline/tune/search.py)."""
    return 2 * 2 * len(t.concurrency) * (3 * t.measurement_interval_ms / 1000 + 1.0)


def check_tune(t: TuneConfig, p: Problems) -> None:
    """Constraints a search cannot meet, refused with the closest value it can: a time budget shorter than one paired
    comparison, and a p99 bound under every queue delay the space allows (Triton holds a request up to that delay for
    company, so at light load every candidate would spend the whole bound waiting)."""
    if not p.has("tune.budget_s") and not p.has("tune.measurement_interval_ms") and t.budget_s < min_tune_budget_s(t):
        least = min_tune_budget_s(t)
        what = f"2 rounds x 2 candidates x {len(t.concurrency)} concurrencies x 3 windows of {t.measurement_interval_ms} ms"
        p.add("tune.budget_s", t.budget_s, f"cannot hold one paired comparison ({what}): closest feasible value {least:g}")
    delays = t.space.max_queue_delay_us
    bound = t.constraints.perf_latency_p99
    if delays and not p.has("tune.space.max_queue_delay_us") and not p.has("tune.constraints.perf_latency_p99") and min(delays) / 1000 >= bound:
        p.add(
            "tune.constraints.perf_latency_p99",
            bound,
            f"ms is at or under every queue delay of tune.space.max_queue_delay_us {show(delays)} us: no candidate can meet it;"
            f" closest feasible value: above {min(delays) / 1000:g} ms (or add a shorter delay, e.g. 0, to the space)",
        )


def check_release(r: ReleaseConfig, p: Problems) -> None:
    """Store URL (an s3:// one in a form Triton reads too), environment names, the signature policy, canary traffic."""
    if r.store.startswith("s3://"):
        try:
            s3_store_parts(r.store)
        except ValueError as e:
            p.add("release.store", r.store, str(e))
    if not p.has("release.environments"):
        bad = [e for e in r.environments if not _NAME.match(e)]
        if bad:
            p.add("release.environments", r.environments, f"{show(bad)} not usable as directory names (letters, digits, _ . -)")
    if r.require_signature and not r.public_key:
        p.add("release.require_signature", r.require_signature, "needs release.public_key: the PEM EC public key releases are checked with")
    check_canary_traffic(r.canary, p)


def check_canary(c: CanaryConfig, p: Problems, key: str = "release.canary") -> None:
    """``release.canary`` on its own (``release canary`` runs this on its command-line overrides): ranges and traffic."""
    check_knobs(c, p, key + ".")
    check_canary_traffic(c, p, key)


def check_canary_traffic(c: CanaryConfig, p: Problems, key: str = "release.canary") -> None:
    """Real traffic that gives every round enough requests to judge."""
    if c.traffic != CanaryTraffic.real or p.has(key):
        return
    per_round = c.share * c.request_rate * c.duration_s / c.rounds
    if per_round < c.min_round_requests:
        p.add(
            f"{key}.share",
            c.share,
            f"sends the candidate {per_round:.1f} requests per round ({c.share:g} x {c.request_rate:g} req/s x "
            f"{c.duration_s:g} s / {c.rounds} rounds), fewer than min_round_requests={c.min_round_requests}, so no round could be judged: "
            f"raise {key}.duration_s to {c.min_round_requests * c.rounds / (c.share * c.request_rate):g} or more, or raise share or request_rate",
        )


# Triton's own grammar for an S3 repository (core/src/filesystem/implementations/s3.h): an optional
# http(s)://host:port endpoint, a bucket of [0-9a-z.-], key segments of [0-9a-zA-Z._-].
_S3_ENDPOINT = re.compile(r"^(https?://)[0-9a-zA-Z.\-]+:[0-9]+$")
_S3_BUCKET = re.compile(r"^[0-9a-z][0-9a-z.\-]{1,61}[0-9a-z]$")
_S3_SEGMENT = re.compile(r"^[0-9a-zA-Z._\-]+$")


def s3_store_parts(url: str) -> tuple[str | None, str, str]:
    """``(endpoint or None, bucket, prefix)`` of ``s3://bucket/prefix`` or ``s3://http://host:port/bucket/prefix``.

    The second form is the one ``tritonserver --model-repository`` takes for a non-AWS endpoint, so one
    string serves the release commands and Triton. Used at composition and by the release store.

    Raises:
        ValueError: the URL does not fit, saying which part and what would.
    """
    rest = url.removeprefix("s3://")
    endpoint = None
    if rest.startswith(("http://", "https://")):
        scheme, _, tail = rest.partition("://")
        host, _, rest = tail.partition("/")
        endpoint = f"{scheme}://{host}"
        if not _S3_ENDPOINT.match(endpoint):
            raise ValueError(f"endpoint '{endpoint}' must be http(s)://host:port (Triton needs the port), e.g. s3://http://127.0.0.1:9000/bucket/prefix")
    bucket, _, prefix = rest.strip("/").partition("/")
    if not _S3_BUCKET.match(bucket):
        raise ValueError(f"bucket '{bucket}' must be 3-63 characters of a-z 0-9 . - (S3's and Triton's rule), e.g. s3://my-releases/prefix")
    bad = [seg for seg in prefix.split("/") if not _S3_SEGMENT.match(seg)] if prefix else []
    if bad:
        raise ValueError(f"prefix segments {show(bad)} must be letters, digits, . _ - and not empty (Triton reads no other S3 keys)")
    return endpoint, bucket, prefix
