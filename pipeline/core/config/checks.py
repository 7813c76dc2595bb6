"""Every rule a type system cannot express: ranges, cross-field rules, the fleet.

Each section has one function that adds to a :class:`Problems`; none raises, so one error lists them all.
The stages rely on these: a value that passed here needs no check of its own downstream.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.core.config.data_checks import check_data
from pipeline.core.config.enums import GRAPH_LEVELS, BenchProfile, BenchServer, HardwareCompatibility, TargetKind
from pipeline.core.config.peer_checks import check_bench_peers
from pipeline.core.config.precision_checks import check_choose, check_fleet_precision, check_int8
from pipeline.core.config.problems import LIMITS, Problems, did_you_mean, show
from pipeline.core.config.release_checks import check_canary
from pipeline.core.config.schema import (
    BenchConfig,
    ModelConfig,
    PipelineConfig,
    PrecisionConfig,
    TargetConfig,
    ToleranceConfig,
    VariantConfig,
)

OPSETS = (7, 23)  # what onnx 1.23 / ONNX Runtime 1.31 accept for the default domain
_CC = re.compile(r"^\d+\.\d+$")  # compute capability, "8.0"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")  # a Triton model / environment directory name
_ENDPOINT = re.compile(r"^(http://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+):[0-9]{1,5}$")  # host:port (IPv6 in brackets)
FP16_MAX = 65504.0


def check_config(
    cfg: PipelineConfig,
    p: Problems,
    *,
    fixed_batch: str | None = None,
    serving: dict[str, Any] | None = None,
    outputs: list[str] | None = None,
    engine_precision: dict[str, Any] | None = None,
    in_fleet: dict[str, Any] | None = None,
) -> None:
    """Run every section's rules on ``cfg``.

    ``fixed_batch`` (see files.fixed_batch) relaxes the batching rules the repository stage overrides for a
    model without a batch axis; ``serving`` is the raw ``serving`` section, derived in conf/config.yaml and
    compared with what it derives from (None: absent or unresolvable, nothing to compare); ``outputs`` are the
    model's output names when known (parity per-output keys must name one); ``engine_precision`` and ``in_fleet``
    ({"int8_in_fleet": ..., "fp16_in_fleet": ...}) are the raw derived values of those names (None: absent).
    """
    check_model(cfg.model, p)
    check_export(cfg, p)
    p.number("simplify.check_n", cfg.simplify.check_n, 0)
    check_precision(cfg.precision, p)
    check_int8(cfg.int8, p)
    check_fleet(cfg, p, serving)
    check_fleet_precision(cfg, p, engine_precision, in_fleet)
    for name, target in cfg.target_specs.items():
        check_target(target, f"target_specs.{name}", p)
    for key in ("latency", "throughput"):
        check_variant(getattr(cfg.variants, key), f"variants.{key}", key, p, fixed_batch)
    p.number("repository.version", cfg.repository.version, 1)
    suffix = cfg.repository.trt_model_suffix
    if not suffix or "/" in suffix:
        p.add("repository.trt_model_suffix", suffix, "must be a non-empty name part without '/' (default: '_trt')")
    check_parity(cfg, p, outputs)
    check_choose(cfg.choose, p)
    check_bench(cfg.bench, p)
    check_bench_peers(cfg, p)
    check_release(cfg, p)


def check_release(cfg: PipelineConfig, p: Problems) -> None:
    """Store URL (an s3:// one in a form Triton reads too), environments, lock lease."""
    r = cfg.release
    if not r.store:
        p.add("release.store", r.store, "must name a path or fsspec URL (default: 'release-store')")
    elif r.store.startswith("s3://"):
        try:
            s3_store_parts(r.store)
        except ValueError as e:
            p.add("release.store", r.store, str(e))
    envs = r.environments
    if not envs:
        p.add("release.environments", envs, "must list at least one environment (default: [dev, staging, production])")
    elif p.unique("release.environments", envs):
        bad = [e for e in envs if not _NAME.match(e)]
        if bad:
            p.add("release.environments", envs, f"{show(bad)} not usable as directory names (letters, digits, _ . -)")
    p.number("release.lock_lease_s", r.lock_lease_s, 1, 3600)
    if r.require_signature and not r.public_key:
        p.add("release.require_signature", r.require_signature, "needs release.public_key: the PEM EC public key releases are checked with")
    check_canary(r.canary, p)


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


def check_model(m: ModelConfig, p: Problems) -> None:
    """Name and input specs (what the source needs is checked at composition: files.check_source)."""
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
    for out, axis in m.output_axes.items():
        if out not in m.output_kinds:
            p.add(
                f"model.output_axes.{out}",
                axis,
                f"names an output model.output_kinds does not judge ({sorted(m.output_kinds)}); add it there (e.g. '+model.output_kinds.{out}=classifier') or remove the axis",
            )
        elif axis == 0:
            p.add(f"model.output_axes.{out}", axis, "axis 0 is the batch axis; name the class or embedding axis (e.g. 1, or -1 for the last)")
    p.number("model.seq_len", m.seq_len, 1)
    p.number("model.seed", m.seed, 0)
    for axis, size in m.sample_dims.items():
        p.number(f"model.sample_dims.{axis}", size, 1, 65536)


def check_export(cfg: PipelineConfig, p: Problems) -> None:
    e = cfg.export
    p.number("export.opset", e.opset, *OPSETS)
    p.number("export.sample_batch", e.sample_batch, 1)
    p.number("export.check_atol", e.check_atol, 0)
    p.number("export.check_rtol", e.check_rtol, 0)
    if not e.batch_axis:
        p.add("export.batch_axis", e.batch_axis, "must name the dynamic batch axis (default: 'batch')")


def check_precision(c: PrecisionConfig, p: Problems) -> None:
    """FP16 conversion: clip bounds inside FP16's range, fallback thresholds positive."""
    p.number("precision.min_positive_val", c.min_positive_val, 0, low_open=True)
    if p.number("precision.max_finite_val", c.max_finite_val, 0, FP16_MAX, low_open=True) and c.min_positive_val >= c.max_finite_val:
        p.add("precision.min_positive_val", c.min_positive_val, f"must be < precision.max_finite_val={c.max_finite_val}")
    f, k = c.fallback, "precision.fallback"
    p.number(f"{k}.max_attempts", f.max_attempts, 1)
    p.number(f"{k}.max_abs", f.max_abs, 0, low_open=True)
    p.number(f"{k}.min_normal", f.min_normal, 0, low_open=True)
    p.number(f"{k}.tiny_ignore", f.tiny_ignore, 0)
    p.number(f"{k}.subnormal_share", f.subnormal_share, 0, 1)
    p.number(f"{k}.subnormal_relative", f.subnormal_relative, 0, 1)
    p.number(f"{k}.sentinel_abs", f.sentinel_abs, 0, low_open=True)
    p.number(f"{k}.reference_check_samples", f.reference_check_samples, 1)


def check_fleet(cfg: PipelineConfig, p: Problems, serving: dict[str, Any] | None) -> None:  # noqa: C901
    """A non-empty fleet of defined, distinct targets; GPU compute capabilities distinct; serving derived from it."""
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
    first = cfg.target_specs.get(cfg.targets[0])
    if serving is None or first is None:
        return
    target = serving.get("target")
    if str(target) != cfg.targets[0]:
        p.add("serving.target", target, f"is derived from targets[0]='{cfg.targets[0]}': never set it; to serve another target, put it first in `targets`")
    for field in ("kind", "precision"):
        want, got = getattr(first, field), serving.get(field)
        if not p.has(f"target_specs.{cfg.targets[0]}.{field}") and got is not None and str(got) != str(want):
            p.add(f"serving.{field}", got, f"is derived from target_specs.{cfg.targets[0]}.{field}='{want}': never set it; change target_specs.{cfg.targets[0]}.{field} instead")


def check_target(t: TargetConfig, key: str, p: Problems) -> None:
    """A GPU target: its compute capability, builder settings and profile ranges."""
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
    p.number(f"{key}.builder.optimization_level", b.optimization_level, 0, 5)
    p.number(f"{key}.builder.workspace_mb", b.workspace_mb, 0, low_open=True)
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


def check_variant(v: VariantConfig, key: str, name: str, p: Problems, fixed_batch: str | None) -> None:
    """Scheduling values Triton accepts, and dynamic batching consistent with max_batch_size."""
    if v.name != name:
        p.add(f"{key}.name", v.name, f"must be '{name}', the variant it configures")
    p.number(f"{key}.max_batch_size", v.max_batch_size, 0, LIMITS["max_batch_size"])
    p.number(f"{key}.instance_count", v.instance_count, 1, LIMITS["instance_count"])
    p.number(f"{key}.intra_op_threads", v.intra_op_threads, 0, LIMITS["threads"])
    p.number(f"{key}.inter_op_threads", v.inter_op_threads, 0, LIMITS["threads"])
    if not p.has(key) and v.instance_count * max(v.intra_op_threads, 1) > LIMITS["instance_threads"]:
        p.add(
            f"{key}.instance_count",
            v.instance_count,
            f"x intra_op_threads {v.intra_op_threads} = {v.instance_count * max(v.intra_op_threads, 1)} threads, over {LIMITS['instance_threads']}:"
            f" lower one of them (a machine runs about one thread per core well)",
        )
    if v.graph_optimization_level not in GRAPH_LEVELS:
        p.add(f"{key}.graph_optimization_level", v.graph_optimization_level, "not a Triton ORT level: use 1 (extended), 0 (all, incl. layout), -1 (basic) or 2 (off)")
    check_warmup(v, key, p, fixed_batch)
    db = v.dynamic_batching
    if db is None:
        return
    dk = f"{key}.dynamic_batching"
    p.number(f"{dk}.max_queue_delay_us", db.max_queue_delay_us, 0, LIMITS["max_queue_delay_us"])
    p.number(f"{dk}.max_queue_size", db.max_queue_size, 0, LIMITS["max_queue_size"])
    if not p.each(f"{dk}.preferred_batch_sizes", db.preferred_batch_sizes, 1, non_empty=False):
        return
    if fixed_batch is not None:
        return  # the repository stage renders max_batch_size 0 and no dynamic batching for this model
    if v.max_batch_size == 0:
        p.add(f"{key}.max_batch_size", 0, f"{dk} needs max_batch_size > 0: set {key}.max_batch_size={max(db.preferred_batch_sizes, default=8)} or {dk}=null")
    elif v.max_batch_size > 0:
        p.each(f"{dk}.preferred_batch_sizes", db.preferred_batch_sizes, 1, v.max_batch_size, non_empty=False)


def check_warmup(v: VariantConfig, key: str, p: Problems, fixed_batch: str | None) -> None:
    """Warmup batch sizes the variant can run (Triton refuses a warmup batch above max_batch_size), a count >= 1."""
    w = v.warmup
    if w is None:
        return
    wk = f"{key}.warmup"
    p.number(f"{wk}.count", w.count, 1, LIMITS["warmup_count"])
    # Without a batch axis (max_batch_size 0, or a fixed-batch graph) the repository stage renders one sample at the
    # model's own shape, so only batching variants bound the sizes.
    top = v.max_batch_size if v.max_batch_size > 0 and fixed_batch is None else None
    if p.each(f"{wk}.batch_sizes", w.batch_sizes, 1, top):
        p.unique(f"{wk}.batch_sizes", w.batch_sizes)


def check_tolerance(t: ToleranceConfig, key: str, outputs: list[str] | None, p: Problems) -> None:
    p.number(f"{key}.atol", t.atol, 0)
    p.number(f"{key}.rtol", t.rtol, 0)
    p.number(f"{key}.error_quantile", t.error_quantile, 0, 1, low_open=True)
    for out, o in t.per_output.items():
        ok = f"{key}.per_output.{out}"
        if outputs and out not in outputs:
            p.add(f"{key}.per_output", out, f"'{out}' is not an output of the model{did_you_mean(out, outputs)} (outputs: {outputs})")
        if o.atol is not None:
            p.number(f"{ok}.atol", o.atol, 0)
        if o.rtol is not None:
            p.number(f"{ok}.rtol", o.rtol, 0)
        if o.error_quantile is not None:
            p.number(f"{ok}.error_quantile", o.error_quantile, 0, 1, low_open=True)
    for name, value in vars(t.quality).items():
        if value is not None:
            p.number(f"{key}.quality.{name}", value, -1 if name == "rank_agreement" else 0, 1)


def check_parity(cfg: PipelineConfig, p: Problems, outputs: list[str] | None = None) -> None:
    """Tolerances, and how many samples parity compares."""
    for kind in ("fp32", "fp16", "trt", "int8"):
        check_tolerance(getattr(cfg.parity, kind), f"parity.{kind}", outputs, p)
    p.number("parity.max_samples", cfg.parity.max_samples, 1)
    p.each("parity.synthetic_batch_sizes", cfg.parity.synthetic_batch_sizes, 1)


def check_bench(b: BenchConfig, p: Problems) -> None:
    """Server mode, perf_analyzer settings, pairing and tuning."""
    if b.server == "external" and not b.url:
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
    if b.tune and b.server != "embedded":
        p.add("bench.tune", True, f"tuning serves each candidate itself: needs bench.server=embedded (not '{b.server}'), or set bench.tune=false")
    p.each("bench.concurrency", b.concurrency, 1)
    p.number("bench.measurement_interval_ms", b.measurement_interval_ms, 0, low_open=True)
    p.number("bench.stability_percentage", b.stability_percentage, 1, 100)
    p.number("bench.max_trials", b.max_trials, 1)
    p.number("bench.warmup_runs", b.warmup_runs, 0)
    p.number("bench.baseline_runs", b.baseline_runs, 1)
    p.each("bench.baseline_batch_sizes", b.baseline_batch_sizes, 1)
    p.number("bench.queue_share_threshold", b.queue_share_threshold, 0, 1)
    p.number("bench.queue_min_ms", b.queue_min_ms, 0)
    check_bench_rounds(b, p)
    p.number("bench.latency_budget_ms", b.latency_budget_ms, 0, low_open=True)
    p.number("bench.baseline_seconds", b.baseline_seconds, 0, low_open=True)
    p.number("bench.server_timeout_s", b.server_timeout_s, 0, low_open=True)
    p.number("bench.perf_timeout_s", b.perf_timeout_s, 0, low_open=True)
    p.number("bench.tune_concurrency", b.tune_concurrency, 1)
    p.number("bench.tune_max_rounds", b.tune_max_rounds, 1)
    p.each("bench.tune_queue_delays_us", b.tune_queue_delays_us, 0)
    p.each("bench.tune_instance_counts", b.tune_instance_counts, 1)
    if not b.tune_preferred_batch_sizes:
        p.add("bench.tune_preferred_batch_sizes", [], "must list at least one set of sizes, e.g. [[4, 8], [8, 16]]")
    for i, sizes in enumerate(b.tune_preferred_batch_sizes):
        p.each(f"bench.tune_preferred_batch_sizes[{i}]", sizes, 1)
    check_bench_production(b, p)


def check_bench_production(b: BenchConfig, p: Problems) -> None:
    """Cold start, memory, Triton's metrics, overload and soak settings."""
    p.number("bench.cold_start_requests", b.cold_start_requests, 2)
    p.number("bench.first_request_max_ratio", b.first_request_max_ratio, 1)
    p.number("bench.memory_sample_ms", b.memory_sample_ms, 10, 10000)
    p.number("bench.metrics_tolerance", b.metrics_tolerance, 0, 10, low_open=True)
    if b.metrics_url and not _ENDPOINT.match(b.metrics_url):
        p.add("bench.metrics_url", b.metrics_url, "must be <host>:<port> of Triton's metrics endpoint, e.g. 127.0.0.1:8002")
    p.each("bench.overload_levels", b.overload_levels, 0.05, 10, non_empty=b.overload)
    p.number("bench.overload_interval_ms", b.overload_interval_ms, 100)
    p.number("bench.burst_factor", b.burst_factor, 1)
    p.number("bench.burst_s", b.burst_s, 0.1, 60)
    p.number("bench.overload_queue_size", b.overload_queue_size, 1)
    p.number("bench.soak_s", b.soak_s, 0)
    if p.number("bench.soak_ramp_s", b.soak_ramp_s, 0) and 0 < b.soak_s < 3 * b.soak_ramp_s:
        # The fit needs the ramp to leave most of the soak: at least two thirds of it.
        p.add("bench.soak_ramp_s", b.soak_ramp_s, f"must leave two thirds of bench.soak_s={b.soak_s:g} to fit (closest valid: {b.soak_s / 3:g})")
    p.number("bench.memory_growth_mb_per_h", b.memory_growth_mb_per_h, 0, low_open=True)


def check_bench_rounds(b: BenchConfig, p: Problems) -> None:
    """The headline rounds: counts, windows, interval targets, alternations."""
    for least, most in (("paired_rounds", "paired_max_rounds"), ("paired_throughput_rounds", "paired_throughput_max_rounds")):
        n, cap = getattr(b, least), getattr(b, most)
        if not p.number(f"bench.{least}", n, 0):
            continue
        if n == 1:
            p.add(f"bench.{least}", n, "must be 0 (no rounds) or >= 2: an interval needs two rounds (closest valid: 2)")
        elif cap < n:
            p.add(f"bench.{most}", cap, f"must be >= bench.{least}={n} (closest valid: {n})")
    if b.profile == BenchProfile.default and b.server == BenchServer.embedded and b.paired_rounds == 0:
        p.add(
            "bench.paired_rounds",
            0,
            "bench.profile=default measures the latency variant only in rounds: set bench.paired_rounds >= 2, or bench.profile=full (the sweep's unpaired ratio)",
        )
    p.each("bench.paired_throughput_concurrency", b.paired_throughput_concurrency, 1, non_empty=False)
    p.number("bench.paired_measurement_interval_ms", b.paired_measurement_interval_ms, 0, low_open=True)
    p.number("bench.paired_stability_percentage", b.paired_stability_percentage, 1, 100)
    if p.number("bench.target_half_width", b.target_half_width, 0, 1, low_open=True):
        p.number("bench.max_half_width", b.max_half_width, b.target_half_width, 10)
    p.number("bench.rounds_budget_s", b.rounds_budget_s, 0, low_open=True)
    p.number("bench.alternations", b.alternations, 1)
    p.number("bench.alternation_ms", b.alternation_ms, 0, low_open=True)
    p.number("bench.paired_max_drift", b.paired_max_drift, 0, low_open=True)
