"""The config package: schemas, Enums for closed sets, and every check of a config value, in one place.

The YAML under conf/ is composed by Hydra (by `dvc exp run`, or by ``python -m pipeline.params``) into
params.yaml; resolving its ``config_check`` key runs every check at composition (resolver.py). Every stage
loads params.yaml through :func:`load_config`, which runs the same checks (all but the model-source ones), so an
unknown key, a wrong type or a value out of range fails with all problems listed, naming each key.

    schema.py    dataclasses: types and defaults
    enums.py     the closed sets (str Enums that print as their value)
    checks.py    ranges and cross-field rules
    files.py     the model source: its fields, the files it names; the fixed-batch decision (:func:`fixed_batch`)
    load.py      validate / load_config: collect every problem, raise one ConfigError
    resolver.py  the ``pipeline_checked`` OmegaConf resolver used at composition
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
    VariantName,
)
from pipeline.core.config.files import fixed_batch
from pipeline.core.config.load import load_config, validate
from pipeline.core.config.problems import ConfigProblems, Problem
from pipeline.core.config.schema_int8 import CalibrationConfig, ChooseConfig, Int8Config, Int8FallbackConfig, QualityConfig
from pipeline.core.config.schema import (
    BenchConfig,
    DynamicBatchingConfig,
    ExportConfig,
    Fp16FallbackConfig,
    ModelConfig,
    OutputToleranceConfig,
    ParityConfig,
    PipelineConfig,
    PrecisionConfig,
    ProfileConfig,
    ReleaseConfig,
    RepositoryConfig,
    ServingConfig,
    SimplifyConfig,
    TargetConfig,
    TensorSpec,
    ToleranceConfig,
    TrtBuilderConfig,
    VariantConfig,
    VariantsConfig,
    WarmupConfig,
)

__all__ = [
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
    "load_config",
    "validate",
]
