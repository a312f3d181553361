"""A host the benchmarks run on (local, or a Docker daemon reached over a socket or SSH) and the
production engine that serves the Box's users between runs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from strix_pipeline.config.rules import (
    Address,
    ConfigPath,
    ContainerName,
    Device,
    DockerHost,
    EnvName,
    HttpUrl,
    ImageRef,
    NonNegFloat,
    PosInt,
    _no_dot_dot,
    _pattern,
    _Strict,
    validate_cron,
)


class ProductionEngine(_Strict):
    """The engine that serves the Box's users between benchmark runs."""

    container: ContainerName | None = None
    stop_command: list[str] | None = None
    start_command: list[str] | None = None
    # the systemd unit production runs as (e.g. "llama-server.service", a quadlet's generated unit
    # too): a process in its cgroup with a GPU device open is production's (hosts/box/device_openers.py)
    unit: str | None = None
    # the podman container production's processes run in (a toolbox: `toolbox run -c NAME ...`, whose
    # processes live in the container's cgroup, not the unit's): its openers are production's too
    podman_container: ContainerName | None = None
    # what else may hold the GPU while production is stopped, by name: a process's command name
    # ("amdgpu_top"), a systemd unit ("gdm.service") or a container's name (Docker or podman); each is
    # said in the run's log, never refuses it
    allowed_device_holders: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(
        default_factory=list
    )
    health_url: HttpUrl
    health_timeout_s: PosInt = 300
    # the production watch (schedules/production_watch.py) alerts when production has not answered its
    # health URL for this long outside any run, and again when it comes back
    watch_grace_s: PosInt = 600

    @model_validator(mode="after")
    def _one_way(self) -> ProductionEngine:
        if not self.container and not (self.stop_command and self.start_command):
            raise ValueError("give either `container` or both `stop_command` and `start_command`")
        if not self.container and not (self.unit or self.podman_container):
            # its processes with a GPU device open could not be told from anyone else's
            raise ValueError(
                "a production run by `stop_command`/`start_command` needs `unit` (the systemd unit it runs "
                'as, e.g. unit = "llama-server.service") or `podman_container` (the toolbox it runs in), '
                "so that its processes holding the GPU are told from others'"
            )
        return self


class _HostBase(_Strict):
    """The keys of either kind: the run's memory samples and their tolerance, its engine's readiness,
    and whether its memory is one pool."""

    description: str = ""
    sample_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    ready_timeout_s: PosInt = 900
    # GB = 10^9 bytes (see the package docstring): how far above the idle baseline memory may stay after
    # the engine stopped (the run's memory summary on either kind; a Docker host's guards wait on it)
    baseline_tolerance_gb: NonNegFloat = 1.0
    # how long memory may take to come back within that tolerance after the stop (a Docker host's guards
    # wait this long; the embedded local host sets it too, so it stays a key of both)
    after_stop_timeout_s: NonNegFloat = 120.0
    # host RAM and the GPU's memory are one pool (Strix Halo): SGLang's HiCache is refused at config load
    unified_memory: bool = False


class LocalHostConfig(_HostBase):
    """This machine: the engines run as processes, installed releases kept in an engine cache. It serves
    nobody, so it keeps no maintenance window and has no production."""

    kind: Literal["local"]
    # the disk the installed engine releases may take (GB, 10^9 bytes; a vLLM env is ~3.5 GB, a
    # llama-server build ~0.1 GB); over it the least recently used release is evicted
    # (provision/engine_cache.py), never the baseline, a pinned release or the one a run uses
    engine_cache_gb: Annotated[float, Field(gt=0)] = 30.0
    # releases kept in the engine cache whatever the budget (a canary: "b11401", "v0.31.0")
    pinned_releases: list[
        Annotated[str, _pattern(r"[bv][0-9][0-9A-Za-z.+-]{0,63}", "a release tag such as b11434 or v0.32.0")]
    ] = Field(default_factory=list)


class DockerHostConfig(_HostBase):
    """A Docker daemon reached over a socket or SSH (the Box): engine containers, the probes that read
    the host, its maintenance window and the production engine stopped for it."""

    kind: Literal["docker"]
    # "unix:///var/run/docker.sock" or "ssh://{user}@box[:port]"; the user comes from ssh_user_env
    docker_host: DockerHost
    ssh_user_env: EnvName | None = None
    # ssh:// hosts (strix_pipeline/hosts/docker/ssh.py): the variable holding the private key's path (-i,
    # IdentitiesOnly); unset variable: ssh's own keys (agent, ~/.ssh/config)
    ssh_key_path_env: EnvName | None = None
    # a known_hosts file holding the Box's host key (host keys are checked strictly); None: ssh's own
    ssh_known_hosts: ConfigPath | None = None
    ssh_connect_timeout_s: Annotated[int, Field(gt=0, le=300)] = 10
    # keepalive probes; 3 unanswered ones end the connection: a drop is noticed within 3x this
    ssh_alive_interval_s: Annotated[int, Field(gt=0, le=300)] = 5
    address: Address = "127.0.0.1"  # where the engines' HTTP ports are reached
    # GB = 10^9 bytes (see the package docstring): the most the flags of one run may reserve
    memory_budget_gb: Annotated[float, Field(gt=0)] | None = None
    baseline_wait_s: NonNegFloat = 120.0
    maintenance_window: str | None = None  # cron of the window start; default: the schedule
    maintenance_window_hours: Annotated[float, Field(gt=0, le=168)] = 6.0
    production: ProductionEngine | None = None
    probe_image: ImageRef | None = None  # tiny image used to read /sys and /proc on the host
    # an image with python3 and numpy (the official vLLM ROCm image has both; busybox has neither) in
    # which one short-lived container per run, before the engine starts, measures the host's copy
    # bandwidth and reads the model file's header: decode efficiency's inputs (hosts/probes/efficiency.py).
    # None: the run stores its decode speed and no figure. (A local host probes in the pipeline's own
    # process, runner/local.py: it has no such key.)
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
    # it the oldest no planned run needs are removed before a run's disk check (hosts/cleanup/cache_prune.py),
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
    # device nodes passed to engine containers (the ROCm pair; none on a CPU-only test host)
    devices: list[Device] = Field(default_factory=lambda: ["/dev/kfd", "/dev/dri"])
    # the GPU target the host's engines must be compiled for ("gfx1151"): an image whose compiled
    # targets (engines/<kind>.py ARCH_LIST_COMMAND) lack it is refused before production stops; None
    # (a host without a GPU): no architecture gate
    gpu_target: Annotated[str, _pattern(r"gfx[0-9a-f]{3,5}", "a GPU target such as gfx1151")] | None = None
    idle_baseline_gb: NonNegFloat | None = (
        None  # GB (10^9 bytes) in use on the idle host; else the reading before start
    )
    # GB (10^9 bytes): the most VRAM + GTT an idle Box may hold with production stopped (the field
    # report's idle Box: ~0.6 GB); above it a run is refused, naming the holders (hosts/box/gpu_holders.py)
    idle_ceiling_gb: NonNegFloat | None = None

    @field_validator("maintenance_window")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return None if v is None else validate_cron(v)


# A host's table is one kind or the other, told by its `kind`: a key of the other kind is refused at load,
# by name (config/load.py says whose key it is).
HostConfig = Annotated[LocalHostConfig | DockerHostConfig, Field(discriminator="kind")]
HOST_KINDS: dict[str, type[LocalHostConfig] | type[DockerHostConfig]] = {
    "local": LocalHostConfig,
    "docker": DockerHostConfig,
}
