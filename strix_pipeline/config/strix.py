"""The whole configuration: every section, and the cross-references between them."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator, model_validator

from strix_pipeline.config.decision import AnalysisConfig, ChangeDetectionConfig, DecisionConfig
from strix_pipeline.config.engines import EngineConfig, ModelProfile
from strix_pipeline.config.hosts import DockerHostConfig, HostConfig, LocalHostConfig
from strix_pipeline.config.project import (
    DuckLakeTarget,
    ProjectConfig,
    QueryConfig,
    WarehouseConfig,
    resolve_path,
)
from strix_pipeline.config.rules import ConfigError, _names, _Strict
from strix_pipeline.config.suite import SLO, HostRun, ScenarioProfile, rate_level


class StrixConfig(_Strict):
    project: ProjectConfig = ProjectConfig()
    warehouse: WarehouseConfig = WarehouseConfig()
    hosts: dict[str, HostConfig]
    engines: dict[str, EngineConfig]
    models: dict[str, ModelProfile]
    profiles: dict[str, ScenarioProfile]
    runs: dict[str, list[HostRun]] = Field(default_factory=dict)  # host -> what to benchmark there
    slo: SLO = SLO()
    decision: DecisionConfig = DecisionConfig()
    change_detection: ChangeDetectionConfig = ChangeDetectionConfig()
    analysis: AnalysisConfig = AnalysisConfig()
    query: QueryConfig = QueryConfig()

    # host, engine and model names make run ids, and so directory names under artifacts/logs
    @field_validator("hosts", "engines", "models", "profiles")
    @classmethod
    def _plain_names(cls, v: dict, info: ValidationInfo) -> dict:
        return _names(info.field_name.removesuffix("s"), v)

    @model_validator(mode="after")
    def _references(self) -> StrixConfig:
        for host, runs in self.runs.items():
            if host not in self.hosts:
                raise ValueError(f"runs.{host}: no host named {host!r} in [hosts]")
            for i, r in enumerate(runs):
                if r.engine not in self.engines:
                    raise ValueError(f"runs.{host}[{i}].engine: no engine named {r.engine!r} in [engines]")
                if r.model not in self.models:
                    raise ValueError(f"runs.{host}[{i}].model: no model named {r.model!r} in [models]")
                if r.profile not in self.profiles:
                    raise ValueError(
                        f"runs.{host}[{i}].profile: no profile named {r.profile!r} in [profiles]"
                    )
        d = self.decision
        for key in ("candidate_engine", "baseline_engine"):
            if getattr(d, key) not in self.engines:
                raise ValueError(f"decision.{key}: no engine named {getattr(d, key)!r} in [engines]")
        if d.host not in self.hosts:
            raise ValueError(f"decision.host: no host named {d.host!r} in [hosts]")
        for key in ("baseline_model", "candidate_model"):
            if getattr(d, key) is not None and getattr(d, key) not in self.models:
                raise ValueError(f"decision.{key}: no model named {getattr(d, key)!r} in [models]")
        if d.baseline_model and d.candidate_model:
            fams = (self.models[d.baseline_model].family, self.models[d.candidate_model].family)
            if fams[0] != fams[1]:
                raise ValueError(
                    f"decision.baseline_model and candidate_model are of different model families "
                    f"({fams[0]!r}, {fams[1]!r}): C3 and C5 compare one model on both engines"
                )
        self._slo_load_measured()
        canary_engine = self.analysis.canary.partition(":")[0]
        if ":" in self.analysis.canary and canary_engine not in self.engines:
            raise ValueError(f"analysis.canary: no engine named {canary_engine!r} in [engines]")
        return self

    def _slo_load_measured(self) -> None:
        """A load the SLO criterion judges at as a rate or "trace" is one the decision host's runs of the
        two engines measure: each of their profiles sweeps that rate, or replays a trace."""
        d = self.decision
        if d.slo is None or d.slo.load is None:
            return
        load = d.slo_load
        engines = (d.candidate_engine, d.baseline_engine)
        profiles = sorted({r.profile for r in self.runs.get(d.host, []) if r.engine in engines})
        if load.kind == "trace":
            lacking = [p for p in profiles if self.profiles[p].trace is None]
            if lacking:
                raise ValueError(
                    f'decision.slo.load: "trace" judges the SLOs at the trace the decision\'s runs replay, '
                    f"but profile(s) {', '.join(lacking)} of host {d.host} replay none: name one "
                    "([profiles.<name>.trace] name = …) or give the load as clients or a rate"
                )
        elif load.kind == "rate" and load.rate is not None:
            lacking = [
                p
                for p in profiles
                if load.level not in {rate_level(r) for r in self.profiles[p].concurrency_sweep.rates}
            ]
            if lacking:
                raise ValueError(
                    f"decision.slo.load: {load.rate:g} requests/s is not sent by profile(s) "
                    f"{', '.join(lacking)} of host {d.host}: add {load.rate:g} to their "
                    "concurrency_sweep.rates (the open-loop levels the decision measures)"
                )

    def docker_config(self, host: str) -> DockerHostConfig:
        """Host ``host``, which the caller drives through Docker (a run, a check, a probe on it)."""
        cfg = self.hosts[host]
        if not isinstance(cfg, DockerHostConfig):
            raise TypeError(f"host {host!r} is of kind {cfg.kind!r}, not 'docker'")
        return cfg

    def local_config(self, host: str) -> LocalHostConfig:
        """Host ``host``, which the caller runs on this machine (its engine cache, its releases)."""
        cfg = self.hosts[host]
        if not isinstance(cfg, LocalHostConfig):
            raise TypeError(f"host {host!r} is of kind {cfg.kind!r}, not 'local'")
        return cfg

    def warehouse_path(self) -> Path:
        return resolve_path(self.project.warehouse)

    def warehouse_target(self) -> Path | DuckLakeTarget:
        """What ``Warehouse.open`` takes: the DuckDB file, or the DuckLake lakehouse with its
        catalog DSN read from the environment now (a missing variable fails here, naming it)."""
        w = self.warehouse
        if w.backend == "duckdb":
            return self.warehouse_path()
        assert w.catalog_env and w.data_path  # the model's validator
        dsn = os.environ.get(w.catalog_env)
        if not dsn:
            raise ConfigError(
                f"warehouse.catalog_env: environment variable {w.catalog_env} is not set; it holds the "
                "libpq DSN of the DuckLake catalog (e.g. 'host=db port=5432 dbname=strix user=strix')"
            )
        return DuckLakeTarget(catalog_dsn=dsn, data_path=resolve_path(w.data_path), catalog_env=w.catalog_env)

    def artifacts_dir(self) -> Path:
        return resolve_path(self.project.artifacts)

    def traces_dir(self) -> Path:
        """Imported traces, normalised, one file per name (traces/store.py): what a profile's trace names."""
        return self.artifacts_dir() / "traces"

    def state_dir(self) -> Path:
        """The controller's own state: production's marker, the night it holds, the probe images used."""
        return self.artifacts_dir() / "state"
