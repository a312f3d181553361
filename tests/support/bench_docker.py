"""The Docker-host benchmark tests' pieces: a test config for a host that is this machine's dockerd (the
engine the llama-server image of support/llama_image.py), the target, one forced run, and the checks
around a production container."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx

from strix_pipeline.config import StrixConfig
from strix_pipeline.records import ImageRecord, RunResult
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from support.infra import free_port
from support.llama_image import VERSION_LABEL, LlamaImage

BUSYBOX = Path("/bin/busybox")
HOST = "testbox"
# this machine's dockerd; DOCKER_HOST points the test (and the docker CLI it uses) at another one
DOCKER_HOST = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
SMOKE_ONLY = ["smoke"]
GOOD_FLAGS = ["-t", "2", "--load-mode", "none"]  # this llama.cpp spells --no-mmap as --load-mode none


def managed(run_id: str | None = None) -> list[str]:
    """``docker ps -a`` names of managed containers (of one run when given)."""
    argv = ["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", "label=strix.managed=true"]
    if run_id:
        argv += ["--filter", f"label=strix.run_id={run_id}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    return out.split()


def remove_left_behind(run_marker: str) -> list[str]:
    """Probe containers (label ``strix.probe=true``) and the managed containers whose name holds
    ``run_marker``: removed, and returned, so a test's teardown fails on what its runs left."""
    probes = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=strix.probe=true"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    left = probes + [c for c in managed() if run_marker in c]
    for name in left:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    return left


def make_config(
    tmp_path: Path,
    llama: LlamaImage,
    model_path: Path,
    *,
    production: dict | None = None,
) -> StrixConfig:
    def engine(*extra: str) -> dict:
        return {
            "kind": "llamacpp",
            "executable": [str(llama.binary)],
            "port": free_port(),
            "extra_flags": [*GOOD_FLAGS, *extra],
        }

    host: dict = {
        "kind": "docker",
        "docker_host": DOCKER_HOST,
        "address": "127.0.0.1",
        "devices": [],
        "ready_timeout_s": 120,
        "memory_budget_gb": 16,
        "sample_interval_s": 0.5,
        # other tests share this machine: system memory moves by more than the default 1 GB
        "baseline_tolerance_gb": 64,
        "baseline_wait_s": 5,
        "after_stop_timeout_s": 5,
        # a test machine's disk is no Box's: a pull needs room for the largest image here, not 40 GB
        "min_free_disk_gb": 1,
    }
    if production:
        host["production"] = production
    return StrixConfig.model_validate(
        {
            "project": {
                "warehouse": str(tmp_path / "warehouse" / "strix.duckdb"),
                "artifacts": str(tmp_path / "artifacts"),
            },
            "hosts": {HOST: host},
            "decision": {"host": HOST, "candidate_engine": "badflag", "baseline_engine": "llamacpp"},
            "engines": {"llamacpp": engine(), "badflag": engine("--no-such-flag")},
            "models": {
                "gemma": {
                    "model": "gemma3-270m",
                    "family": "gemma3-270m",
                    "quantization": "Q4_K_M",
                    "path": str(model_path),
                    "context_length": 512,
                    "parallel": 2,
                }
            },
            "profiles": {
                "tiny": {
                    "scenarios": ["smoke", "concurrency_sweep"],
                    "request_timeout_s": 60,
                    # a 270M model is not asked for valid JSON: serving text is the point here
                    "smoke": {"output_tokens": 4, "json_check": False},
                    "concurrency_sweep": {
                        "levels": [1, 2],
                        "requests_per_level": 2,
                        "warmup": 0,
                        "input_tokens": 16,
                        "output_tokens": 4,
                        "max_duration_s": 60,
                    },
                }
            },
        }
    )


def image_record(llama: LlamaImage, digest: str | None = None) -> ImageRecord:
    now = datetime.now(UTC)
    return ImageRecord(
        engine="llamacpp",
        registry=llama.registry.host,
        repository=llama.repository,
        tag=llama.tag,
        digest=digest or llama.digest,
        floating=False,
        created=None,
        version=VERSION_LABEL,
        revision=None,
        labels=None,
        sort_key="0001",
        first_seen=now,
        last_seen=now,
    )


def target(llama: LlamaImage, engine: str = "llamacpp", digest: str | None = None) -> BenchmarkTarget:
    return BenchmarkTarget(HOST, engine, "gemma", "tiny", image_record(llama, digest))


def run(
    config: StrixConfig,
    tgt: BenchmarkTarget,
    run_id: str,
    log=None,
    scenarios: list[str] | None = SMOKE_ONLY,
) -> RunResult:
    """One run, forced (no maintenance window); smoke only unless asked (the Box here is 2 cores)."""
    lines: list[str] = []
    result = run_benchmark(
        config, tgt, run_id=run_id, log=log or lines.append, force=True, scenarios=scenarios
    )
    assert managed(run_id) == [], f"{run_id} left its container"
    return result


def assert_served(result: RunResult, *, sweep: bool = False) -> None:
    r = result.run
    assert r.status == "ok", (r.status, r.failure_reason, r.log_tail)
    served = [q for q in result.requests if q.ok and not q.warmup]
    assert served and all(q.ttft_ms and q.ttft_ms > 0 for q in served)
    if sweep:
        levels = {a.level for a in result.aggregates if a.scenario == "concurrency_sweep"}
        assert levels == {1, 2}, result.aggregates
    assert isinstance(r.launch_command, str) and "--metrics" in r.launch_command
    assert r.engine_build  # /props build_info of the binary in the image


def healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def container_state(name: str) -> str:
    return subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Status}}", name],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
