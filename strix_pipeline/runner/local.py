"""A run on the embedded host: llama-server or vLLM as a local process."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

from strix_pipeline.config import StrixConfig
from strix_pipeline.engines import comparable_flags
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local import LocalLlamaServer, ensure_gemma_model, log_tail
from strix_pipeline.hosts.local_vllm import LocalVllmServer
from strix_pipeline.memory import (
    MemorySampler,
    TreeProbe,
    read_smi,
    run_here,
)
from strix_pipeline.runner.inputs import RunInputs
from strix_pipeline.runner.measure import measure
from strix_pipeline.runner.record import finish_memory, record_host_facts
from strix_pipeline.runner.target import BenchmarkTarget, Log


def local_server(
    config: StrixConfig, target: BenchmarkTarget, log_dir: Path, log: Log
) -> LocalLlamaServer | LocalVllmServer:
    """The local launcher of the target's engine, not started yet (LocalLlamaServer or LocalVllmServer)."""
    host_cfg = config.hosts[target.host]
    model = config.models[target.model]
    engine = config.engines[target.engine]
    if engine.kind == "llamacpp":
        return LocalLlamaServer(
            model_path=Path(model.path) if model.path else ensure_gemma_model(),
            ctx_size=model.context_length * model.parallel,  # -c is shared by the slots
            parallel=model.parallel,
            extra_args=[*engine.extra_flags, *model.extra_flags.get("llamacpp", [])],
            log_dir=log_dir,
            ready_timeout_s=host_cfg.ready_timeout_s,
            alias=model.served_name or target.model,
        )
    if engine.kind == "vllm":
        # the Box's vLLM spec (engines/vllm.py) with the CPU's executable and device settings
        return LocalVllmServer(
            engine=engine,
            profile=model,
            vllm_version=engine.local_version,
            log_dir=log_dir,
            ready_timeout_s=host_cfg.ready_timeout_s,
            progress=log,
        )
    raise EngineStartError(
        "failed_guard", f"host {target.host} is local: it runs llama-server and vLLM, not {engine.kind}"
    )


def run_local(r: RunInputs) -> None:
    config, target, result, log_dir, log, scenarios = (
        r.config,
        r.target,
        r.result,
        r.log_dir,
        r.log,
        r.scenarios,
    )

    host_cfg = config.hosts[target.host]
    kind = config.engines[target.engine].kind
    run = result.run
    server = local_server(config, target, log_dir, log)
    smi = lambda: read_smi(run_here)  # noqa: E731 - rocm-smi / amd-smi when this machine has them
    sampler = MemorySampler(TreeProbe(), run.run_id, interval_s=host_cfg.sample_interval_s, smi=smi)
    record_host_facts(run, sampler.probe)
    with ExitStack() as stack:
        # the memory check also when the run breaks or is cancelled: after the sampler has stopped
        stack.callback(finish_memory, result, sampler, host_cfg.baseline_tolerance_gb)
        stack.enter_context(sampler)
        sampler.set_phase("loading")
        try:
            stack.enter_context(server)
            sampler.probe = TreeProbe(pid=server.pid)  # the engine's whole session: all its processes
            run.launch_command = server.command_line
            run.engine_flags = json.dumps(comparable_flags(kind, server.flags))
            run.engine_build = server.engine_build
            log(f"[{run.run_id}] ready at {server.base_url} (build {server.engine_build})")
            settle_s = max(1.0, 2 * host_cfg.sample_interval_s)
            measure(config, target, result, server, log, scenarios, sampler, settle_s)
        finally:
            server.stop()
            sampler.probe = TreeProbe()
            sampler.set_phase("after_stop")
            if server.log_path is not None:
                run.log_tail = log_tail(server.log_path)
