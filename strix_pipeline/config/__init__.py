"""The project's configuration: `strix.toml` (or the file `STRIX_CONFIG` names), validated at load.

A bad file fails here, before anything starts, with the file, the key path and the problem; it never
half-runs a benchmark. Secrets are not in this file: the config names the environment variables that
hold them (``*_env`` keys) and the Dagster resources read those through ``EnvVar``.

Units are in the key's name: ``*_s`` seconds, ``*_ms`` milliseconds, ``*_hours``, ``*_days``, ``*_pct``
percent, ``*_gb`` decimal gigabytes (GB, 10^9 bytes: ``memory_budget_gb``, ``baseline_tolerance_gb``,
``idle_baseline_gb``, ``reserve_gb``; the memory guards count in GB, and add an engine flag's size,
e.g. ``--cpu-offload-gb``, as that many GB). What the warehouse views, the charts and the decision
report is GiB (2^30 bytes, ``*_gib`` columns): 120 GB here is 111.8 GiB there. The keys keep their
names so existing ``strix.toml`` files still load.

The schema is the ground floor every room reads (it imports nothing of the project), one module per
concern: ``rules`` (the checks every key uses), ``project``, ``hosts``, ``engines``, ``suite``,
``decision``, the whole ``strix`` config and ``load``. The rules that need the engines (the memory
budget) are ``config_load``'s.
"""

from strix_pipeline.config.decision import (
    CANARY_PATTERN,
    AnalysisConfig,
    ChangeDetectionConfig,
    DecisionConfig,
    DecisionSLO,
    SloLoad,
)
from strix_pipeline.config.engines import GFX_OVERRIDE, EngineConfig, ImageSource, ModelProfile
from strix_pipeline.config.hosts import DockerHostConfig, HostConfig, LocalHostConfig, ProductionEngine
from strix_pipeline.config.load import DEFAULT_CONFIG, LOCAL_CONFIG, config_path, read_config
from strix_pipeline.config.project import (
    DuckLakeTarget,
    ProjectConfig,
    QueryConfig,
    WarehouseConfig,
    resolve_path,
)
from strix_pipeline.config.rules import (
    MAX_ROWS,
    MAX_SIZE_BYTES,
    MAX_TIMEOUT_S,
    NAME_RULE,
    Address,
    ConfigError,
    ConfigPath,
    ContainerName,
    Device,
    DockerHost,
    EnvName,
    HttpUrl,
    ImageRef,
    ModelSource,
    Name,
    NonNegFloat,
    PosInt,
    Registry,
    Repository,
    ShmSize,
    Version,
    check_timeout,
    memory_bytes,
    validate_cron,
)
from strix_pipeline.config.strix import StrixConfig
from strix_pipeline.config.suite import (
    DECISION_LEVEL_REQUESTS,
    SLO,
    DecodeSpec,
    HostRun,
    LadderSpec,
    PrefixCacheSpec,
    ScenarioProfile,
    SmokeSpec,
    SweepSpec,
    TraceSpec,
    rate_level,
)

__all__ = [
    "MAX_ROWS",
    "MAX_SIZE_BYTES",
    "Address",
    "AnalysisConfig",
    "CANARY_PATTERN",
    "ChangeDetectionConfig",
    "ConfigError",
    "ConfigPath",
    "ContainerName",
    "DECISION_LEVEL_REQUESTS",
    "DEFAULT_CONFIG",
    "DecisionConfig",
    "DecisionSLO",
    "DecodeSpec",
    "Device",
    "DockerHost",
    "DockerHostConfig",
    "DuckLakeTarget",
    "EngineConfig",
    "EnvName",
    "GFX_OVERRIDE",
    "HostConfig",
    "HostRun",
    "HttpUrl",
    "ImageRef",
    "ImageSource",
    "LOCAL_CONFIG",
    "LocalHostConfig",
    "LadderSpec",
    "MAX_TIMEOUT_S",
    "ModelProfile",
    "ModelSource",
    "NAME_RULE",
    "Name",
    "NonNegFloat",
    "PosInt",
    "PrefixCacheSpec",
    "ProductionEngine",
    "ProjectConfig",
    "QueryConfig",
    "Registry",
    "Repository",
    "SLO",
    "ScenarioProfile",
    "ShmSize",
    "SmokeSpec",
    "StrixConfig",
    "SloLoad",
    "SweepSpec",
    "TraceSpec",
    "Version",
    "WarehouseConfig",
    "check_timeout",
    "config_path",
    "memory_bytes",
    "read_config",
    "resolve_path",
    "rate_level",
    "validate_cron",
]
