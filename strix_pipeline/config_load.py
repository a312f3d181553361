"""Loading a configuration: the schema (config/, which imports nothing of the project) and then the
rules that need the engines, so a file that would fail a run is refused when it is read.

The memory budget rule is the one a run applies before it stops production (``engines.base.check_budget``
over ``engines.build_spec``'s reservations, as the Docker launcher builds them); a budget is a Docker
host's, where the pools are sized from it.
"""

from __future__ import annotations

from pathlib import Path

from strix_pipeline import engines
from strix_pipeline.analysis.decision.criteria.ttft import C3_MIN_REQUESTS
from strix_pipeline.config import ConfigError, DockerHostConfig, StrixConfig, read_config
from strix_pipeline.engines import build_spec
from strix_pipeline.engines.base import DeviceMemory, OverBudget, check_budget


def budget_problems(config: StrixConfig) -> list[str]:
    """``runs.<host>[i]: …`` for every run whose engine reserves more than its host's memory budget."""
    problems = []
    for host, runs in config.runs.items():
        h = config.hosts[host]
        if not isinstance(h, DockerHostConfig) or h.memory_budget_gb is None:
            continue
        for i, r in enumerate(runs):
            engine = config.engines[r.engine]
            # no device total is known until the Box is read: a host without GPU devices is a CPU host
            # (vLLM's KV bytes), any other is counted against its budget
            device = DeviceMemory(cpu=not h.devices, env=dict(engine.env))
            spec = build_spec(engine, config.models[r.model], "", budget_gb=h.memory_budget_gb, device=device)
            try:
                check_budget(
                    spec.reservations,
                    h.memory_budget_gb,
                    what=f"runs.{host}[{i}] (engine {r.engine!r}, model {r.model!r})",
                )
            except OverBudget as e:
                problems.append(f"runs.{host}[{i}]: {e} (hosts.{host}.memory_budget_gb)")
    return problems


def unified_memory_problems(config: StrixConfig) -> list[str]:
    """``runs.<host>[i]: …`` for every run whose engine flags must never run on its unified-memory host
    (SGLang's HiCache: ``engines.unified_memory_problems``, the rule a Box run applies before production
    stops)."""
    problems = []
    for host, runs in config.runs.items():
        h = config.hosts[host]
        for i, r in enumerate(runs):
            spec = build_spec(config.engines[r.engine], config.models[r.model], "")
            for p in engines.unified_memory_problems(h.unified_memory, spec.kind, spec.flags):
                problems.append(
                    f"runs.{host}[{i}] (engine {r.engine!r}, model {r.model!r}): {p} "
                    f"(hosts.{host}.unified_memory)"
                )
    return problems


def decision_level_problems(config: StrixConfig) -> list[str]:
    """``[decision] concurrency = N: …`` for every profile a run of the decision's engines on its host
    takes whose sweep measures that level with fewer requests than C3's interval of the TTFT p95 ratio
    needs: C3 would stay inconclusive on every run of it."""
    d = config.decision
    problems = []
    names = dict.fromkeys(
        r.profile for r in config.runs.get(d.host, []) if r.engine in (d.candidate_engine, d.baseline_engine)
    )
    for name in names:
        profile = config.profiles[name]
        sweep = profile.concurrency_sweep
        if "concurrency_sweep" not in profile.scenarios or d.concurrency not in sweep.levels:
            continue
        have = sweep.requests_for(d.concurrency)
        if have >= C3_MIN_REQUESTS:
            continue
        key = f"profiles.{name}.concurrency_sweep"
        field = f"{key}.requests_at" if d.concurrency in sweep.requests_at else f"{key}.requests_per_level"
        problems.append(
            f"[decision] concurrency = {d.concurrency}: {field} gives {have} measured requests at "
            f"{d.concurrency} clients, and C3's interval of the TTFT p95 ratio needs at least "
            f"{C3_MIN_REQUESTS} per run (set {key}.requests_at = {{ {d.concurrency} = {C3_MIN_REQUESTS} }})"
        )
    return problems


def load_config(path: str | Path | None = None) -> StrixConfig:
    """The configuration at ``path`` (default: ``config.config_path()``), or ConfigError naming the file
    and every problem."""
    config = read_config(path)
    problems = budget_problems(config) + unified_memory_problems(config) + decision_level_problems(config)
    if problems:
        shown = Path(path) if path else None
        head = f"{shown or 'configuration'}: invalid configuration ({len(problems)} problem(s))"
        raise ConfigError("\n".join([head, *(f"  {p}" for p in problems)]))
    return config


def default_warehouse_path(config: str | Path | None = None) -> Path:
    """Where the configuration puts the warehouse (``project.warehouse``, default warehouse/strix.duckdb):
    the location a caller resolves and passes to ``Warehouse.open``, which never reads the configuration."""
    return load_config(config).warehouse_path()
