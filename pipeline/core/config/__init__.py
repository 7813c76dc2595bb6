"""The config package: the schema (every default and range), Enums for closed sets, every check of a config value.

The schema's defaults are registered with Hydra (store.py), and the YAML under conf/ (choices, and values that
differ from the defaults) is composed over them by `dvc exp run` or ``python -m pipeline.params`` into params.yaml;
resolving its ``config_check`` key runs every check at composition (resolver.py). Every stage loads params.yaml
through :func:`load_config`, which runs the same checks (all but the model-source ones), so an unknown key, a wrong
type or a value out of range fails with all problems listed, naming each key.

    schema.py            dataclasses: types, defaults, ranges (the root, model, export, targets, variants, parity)
    schema_precision.py  fp16, int8, quality thresholds, the `auto` choice
    schema_bench.py      the bench, one section per concern
    schema_release.py    the release store and the canary
    schema_data.py       model.data's file form
    enums.py             the closed sets (str Enums that print as their value)
    knobs.py             knob(): a field's default with its range; the one walker that checks every range
    rules.py             the rules one field cannot state alone (bounds from other fields, the fleet, formats)
    derived.py           the keys derived from the fleet (serving, engine_precision, <precision>_in_fleet)
    files.py             the model source: its fields, the files it names; the fixed-batch decision (:func:`fixed_batch`)
    load.py              validate / load_config: collect every problem, raise one ConfigError
    store.py             the schema's defaults as Hydra configs (what composition fills params.yaml from)
    resolver.py          the OmegaConf resolvers used at composition (``pipeline_checked`` and the derived keys)
"""

from pipeline.core.config.enums import (
    GRAPH_LEVELS,
    BenchPeer,
    BenchProfile,
    BenchServer,
    CalibrationMethod,
    ConfigEnum,
    DType,
    EmbeddedBackend,
    ErrorStat,
    HardwareCompatibility,
    InputShapes,
    OutputKind,
    Precision,
    Protocol,
    QuantMode,
    QuantType,
    Source,
    TargetKind,
    TokenField,
    TuneObjective,
    VariantName,
)
from pipeline.core.config.files import fixed_batch
from pipeline.core.config.load import from_plain, load_config, validate
from pipeline.core.config.problems import ConfigProblems, Problem
from pipeline.core.config.schema_bench import (
    BaselineConfig,
    BenchConfig,
    OverloadConfig,
    PeerRoundsConfig,
    QueueConfig,
    ReadinessConfig,
    RoundCounts,
    RoundsConfig,
    SoakConfig,
    SweepConfig,
    ThroughputRoundsConfig,
)
from pipeline.core.config.schema_tune import ModelAnalyzerConfig, TuneConfig, TuneConstraints, TuneSpace
from pipeline.core.config.schema_precision import (
    CalibrationConfig,
    ChooseConfig,
    Fp16FallbackConfig,
    Int8Config,
    Int8FallbackConfig,
    PrecisionConfig,
    QualityConfig,
)
from pipeline.core.config.schema_release import CanaryConfig
from pipeline.core.config.schema import (
    DynamicBatchingConfig,
    ExportConfig,
    ModelConfig,
    OutputToleranceConfig,
    ParityConfig,
    PipelineConfig,
    ProfileConfig,
    ReleaseConfig,
    RepositoryConfig,
    ServingConfig,
    SimplifyConfig,
    TargetConfig,
    TensorSpec,
    TokenizerConfig,
    ToleranceConfig,
    TrtBuilderConfig,
    VariantConfig,
    VariantsConfig,
    WarmupConfig,
)

__all__ = [
    "TokenizerConfig",
    "TokenField",
    "BaselineConfig",
    "CanaryConfig",
    "OverloadConfig",
    "PeerRoundsConfig",
    "QueueConfig",
    "ReadinessConfig",
    "RoundCounts",
    "RoundsConfig",
    "SoakConfig",
    "SweepConfig",
    "ThroughputRoundsConfig",
    "TuneConfig",
    "TuneConstraints",
    "TuneSpace",
    "ModelAnalyzerConfig",
    "TuneObjective",
    "CalibrationConfig",
    "CalibrationMethod",
    "ChooseConfig",
    "Int8Config",
    "Int8FallbackConfig",
    "OutputKind",
    "QualityConfig",
    "QuantMode",
    "QuantType",
    "GRAPH_LEVELS",
    "BenchConfig",
    "BenchPeer",
    "BenchProfile",
    "BenchServer",
    "ConfigEnum",
    "ConfigProblems",
    "DType",
    "DynamicBatchingConfig",
    "EmbeddedBackend",
    "ErrorStat",
    "ExportConfig",
    "Fp16FallbackConfig",
    "HardwareCompatibility",
    "InputShapes",
    "ModelConfig",
    "OutputToleranceConfig",
    "ParityConfig",
    "PipelineConfig",
    "Precision",
    "PrecisionConfig",
    "Problem",
    "ProfileConfig",
    "Protocol",
    "ReleaseConfig",
    "RepositoryConfig",
    "ServingConfig",
    "SimplifyConfig",
    "Source",
    "TargetConfig",
    "TargetKind",
    "TensorSpec",
    "ToleranceConfig",
    "TrtBuilderConfig",
    "VariantConfig",
    "VariantName",
    "VariantsConfig",
    "WarmupConfig",
    "fixed_batch",
    "from_plain",
    "load_config",
    "validate",
]
