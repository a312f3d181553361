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


class HostConfig(_Strict):
    kind: Literal["local", "docker"]
    description: str = ""
    # docker: "unix:///var/run/docker.sock" or "ssh://{user}@box[:port]"; the user comes from ssh_user_env
    docker_host: DockerHost | None = None
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
    # (hosts/probes/efficiency.py). None: a Docker host's run stores its decode speed and no figure
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
    # report's idle Box: ~0.6 GB); above it a run is refused, naming the holders (hosts/box/gpu_holders.py)
    idle_ceiling_gb: NonNegFloat | None = None
    # host RAM and the GPU's memory are one pool (Strix Halo): SGLang's HiCache is refused at config load
    unified_memory: bool = False
    # local hosts: the disk the installed engine releases may take (GB, 10^9 bytes; a vLLM env is
    # ~3.5 GB, a llama-server build ~0.1 GB); over it the least recently used release is evicted
    # (provision/engine_cache.py), never the baseline, a pinned release or the one a run uses
    engine_cache_gb: Annotated[float, Field(gt=0)] = 30.0
    # releases kept in the engine cache whatever the budget (a canary: "b11401", "v0.31.0")
    pinned_releases: list[
        Annotated[str, _pattern(r"[bv][0-9][0-9A-Za-z.+-]{0,63}", "a release tag such as b11434 or v0.32.0")]
    ] = Field(default_factory=list)

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
