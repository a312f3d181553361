"""The measuring part of a run, the same on every host: the memory sampler around the suite."""

from __future__ import annotations

import time

from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.docker import engine as docker_engine
from strix_pipeline.hosts.local.llama_server import LocalLlamaServer
from strix_pipeline.hosts.local.vllm_server import LocalVllmServer
from strix_pipeline.loadgen import run_suite_sync
from strix_pipeline.memory import (
    MemorySampler,
)
from strix_pipeline.records import RunResult
from strix_pipeline.runner.record import any_ok, apply_suite, join_reasons
from strix_pipeline.runner.target import BenchmarkTarget, Log


def measure(
    config: StrixConfig,
    target: BenchmarkTarget,
    result: RunResult,
    engine: LocalLlamaServer | LocalVllmServer | docker_engine.DockerEngine,
    log: Log,
    scenarios: list[str] | None,
    sampler: MemorySampler | None,
    settle_s: float,
) -> None:
    """Sample the loaded engine idle for ``settle_s`` (held memory), then run the suite under 'bench'.

    The suite asks ``engine.exit_description`` whether the engine still runs (before each level, and
    after a request lost to a connection error): a dead engine stops it at that level, named in
    ``failure_reason``, and what was measured before is kept."""
    run_id = result.run.run_id
    if sampler:
        sampler.set_phase("idle")
        time.sleep(settle_s)
        sampler.set_phase("bench")

    def level_started(scenario: str, level: int, done: int, total: int) -> None:
        if done == 0:  # where a long run is; the line a crash's reason refers back to
            log(f"[{run_id}] {scenario} level {level}: {total} request(s)")

    suite = run_suite_sync(
        engine.base_url,
        engine.model,
        config.profiles[target.profile],
        config.slo,
        run_id,
        scenarios=scenarios,
        context_length=config.models[target.model].context_length,
        traces_dir=config.traces_dir(),
        metrics_url=engine.metrics_url,
        on_progress=lambda line: log(f"[{run_id}] {line}"),
        on_request=level_started,
        engine_exit=engine.exit_description,
    )
    apply_suite(result, suite, log)
    died = None if suite.engine_gone else engine.exit_description()
    if died:  # it died after the suite's last check: the suite itself saw nothing wrong
        # an engine that died under load is the run's headline, not one more failed request
        run = result.run
        if not any_ok(suite):
            run.status = "failed_serve"
        elif run.status == "ok":
            run.status = "partial"
        run.failure_reason = join_reasons(f"{died} during the suite", run.failure_reason)
        log(f"[{run_id}] {died} during the suite")
