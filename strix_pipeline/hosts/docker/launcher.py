"""Engines as containers on a Docker host (the Box over ``ssh://``, or the local socket).

``with DockerLauncher(...) as engine:`` pulls the image by digest (progress in the log), starts the
engine spec's command with the ROCm options, streams the container log to a file, waits for
readiness and yields a :class:`DockerEngine`. Leaving the block -- normally, by an exception or a
cancellation -- stops and removes the container. A start that fails raises
:class:`EngineStartError` with the log tail, after removing the container, so the next run starts
clean. The host's client and facts are in ``docker_host``, the running engine in ``docker_engine``.

vLLM's KV cache is sized for the profile's token capacity once the image is there
(:meth:`DockerLauncher.size_for_context`), so C5 compares the engines at the same context on the Box
too.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import httpx

from strix_pipeline.config import DockerHostConfig, EngineConfig, ImageSource, ModelProfile
from strix_pipeline.engines import build_spec, compile_cache_dir, vllm
from strix_pipeline.engines.base import CONTAINER_MODELS_DIR, DeviceMemory, EngineSpec, container_model_path
from strix_pipeline.hosts import guards
from strix_pipeline.hosts.box.selinux import LABEL_OPT
from strix_pipeline.hosts.cleanup import cache_prune
from strix_pipeline.hosts.docker import model_config
from strix_pipeline.hosts.docker.as_deployed import as_deployed
from strix_pipeline.hosts.docker.engine import (
    DockerEngine,
    LogStreamer,
    container_exit,
    container_log_tail,
)
from strix_pipeline.hosts.docker.host import (
    make_client,
    resolve_group_ids,
    split_image_ref,
)
from strix_pipeline.hosts.docker.model_files import required_files
from strix_pipeline.hosts.docker.names import safe_name
from strix_pipeline.hosts.docker.readiness import (
    VERSION_LABEL,
    engine_build,
    last_log_line,
    ready_answer,
    url_host,
)
from strix_pipeline.hosts.docker.ssh import client_transport
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.guards import MANAGED_LABEL, RUN_LABEL
from strix_pipeline.memory.bytes_per_token import ModelFileError
from strix_pipeline.memory.kv_capacity import KvSizing, layout_from_config_json
from strix_pipeline.planning.production_baseline import ProductionBaseline
from strix_pipeline.units import MB, gib_text

log = logging.getLogger(__name__)


class DockerLauncher:
    """Context manager: start an engine container, wait until it serves, always remove it.

    ``model_path`` overrides the profile's path on the host (e.g. a file assembled elsewhere).
    ``pull``: "missing" (pull when the exact reference is not present), "always", or "never".
    ``group_ids``: numeric groups; None reads them from the config or the host.
    ``release``: the engine release the image holds (the image record's version), which says the flags
    it takes; None: the pulled image's version label, else unknown (taken as today's).
    ``read_config``: how the checkpoint's config.json is read (default: through the image,
    hosts/docker/model_config.py).
    """

    def __init__(
        self,
        host_cfg: DockerHostConfig,
        engine_cfg: EngineConfig,
        model_profile: ModelProfile,
        image_ref: str,
        run_id: str,
        log_dir: str | Path,
        client: Any | None = None,
        *,
        port: int | None = None,
        model_path: str | None = None,
        pull: str = "missing",
        ready_timeout_s: float | None = None,
        stop_timeout_s: int = 30,
        group_ids: list[int] | None = None,
        poll_interval_s: float = 0.5,
        source: ImageSource | None = None,
        release: str | None = None,
        read_config: model_config.ConfigReader | None = None,
        production: ProductionBaseline | None = None,
    ) -> None:
        self.host = host_cfg
        self.source = source  # the image source the image comes from: its executable wins
        self.engine_cfg = engine_cfg
        self.profile = model_profile
        self.image_ref = image_ref
        self.run_id = run_id
        self.log_dir = Path(log_dir)
        self.client = client
        self.port = port
        self.host_model_path = model_path or model_profile.path
        if not self.host_model_path:
            raise EngineStartError(
                "failed_guard", f"model profile {model_profile.model!r} has no path on the host"
            )
        self.pull_policy = pull
        self.ready_timeout_s = float(ready_timeout_s or host_cfg.ready_timeout_s)
        self.stop_timeout_s = stop_timeout_s
        self.group_ids = group_ids
        self.poll_interval_s = poll_interval_s
        self.container: Any = None
        self.log_path = self.log_dir / f"{safe_name(run_id)}-{engine_cfg.kind}.log"
        self._streamer: LogStreamer | None = None
        self._own_client = client is None
        self._image: Any = None  # set by pull()
        # "cold" / "warm" once started with a compile cache (engines/<kind>.py COMPILE_CACHE_DIR)
        self.compile_cache: str | None = None
        self.release = release
        self.read_config = read_config
        self.production = production  # as deployed: its command and environment, not the profile's
        self.device: DeviceMemory | None = None  # set by size_pools
        # set by size_for_context: vLLM's KV cache for the context (None: the configured pool) and
        # the pool production's configuration would hold, which C5 shows beside it
        self.kv_sizing: KvSizing | None = None
        self.production_pool_bytes: int | None = None
        self.context_note: str | None = None  # what the sizing did, or why it did not: for the run's log
        self._context_sized = False
        # the Box enforces SELinux (hosts/box/selinux.py, read by the run before the stop)
        self.selinux_enforcing = False
        self.spec = self._build_spec()

    # -- spec and container options

    def _build_spec(self) -> EngineSpec:
        in_container = container_model_path(self.host_model_path, self.host.models_dir)
        loopback = self.host.address in ("127.0.0.1", "localhost", "::1")
        spec = build_spec(
            self.engine_cfg,
            self.profile,
            in_container,
            port=self.port,
            # host networking: bind loopback when the pipeline reaches the engine there, else all
            bind_host="127.0.0.1" if loopback else "0.0.0.0",
            budget_gb=self.host.memory_budget_gb,
            device=self.device,
            source=self.source,
        )
        if self.production is not None:
            spec = as_deployed(spec, self.production, "127.0.0.1" if loopback else "0.0.0.0")
        if self.kv_sizing is not None:  # sized for the context: kept when the pools are sized again
            spec = vllm.for_context(spec, self.kv_sizing.bytes, self.profile, self.device)
        return spec

    def size_pools(self, device: DeviceMemory) -> None:
        """Size pool fractions against ``device`` (the host's device total as HIP sees it, read by its
        probe) instead of the budget: the spec, and so the guards' reservations, are built again."""
        self.device = device
        self.spec = self._build_spec()

    def size_for_context(self) -> None:
        """vLLM's KV cache sized for the profile's token capacity (context per slot x slots: what
        llama-server's ``-c`` holds), so C5 compares the engines at the same context:
        ``--kv-cache-memory-bytes N`` replaces the pool fraction, N from the checkpoint's config.json
        as the engine will see it, in vLLM's block rounding for the device (GPU or CPU backend). Once,
        after the pull (the config is read through the image), before production stops: the sized
        reservations are checked against the budget here. The configured pool stays when the release
        predates the flag, the configuration sizes the cache itself or the config cannot say; the
        engine's log says why. The pool production's configuration holds is kept either way
        (``production_pool_bytes``). Other engines: nothing to size."""
        if self._context_sized or self.spec.kind != vllm.KIND:
            return
        self._context_sized = True
        device = self.device or DeviceMemory()
        self.production_pool_bytes = vllm.production_pool_bytes(self.spec.flags, self.profile, device)
        release = self.release or self._version_label()
        why = vllm.context_refusal(self.spec.flags, release)
        if why is None:
            try:
                found = self._read_config()(self.spec.model_path)
                layout = layout_from_config_json(
                    found.data, found.source, vllm.cache_dtype_bytes(self.spec.flags)
                )
                self.kv_sizing = vllm.same_context_kv(self.spec.flags, self.profile, layout, cpu=device.cpu)
            except (ModelFileError, ValueError) as e:  # no readable config, a cache dtype of unknown size
                why = str(e)
        pool = self.production_pool_bytes
        shown = f" (production's pool, {gib_text(pool)})" if pool is not None else ""
        if self.kv_sizing is None:
            self.context_note = (
                f"vLLM KV cache not sized for the same context as llama-server: {why}; "
                f"the pool stays as configured{shown}"
            )
            self._log_line(self.context_note)
            return
        self.spec = self._build_spec()
        unknown = "" if release else f" (release not known: taken as one with {vllm.KV_BYTES_FLAG})"
        self.context_note = (
            f"vLLM KV cache for the same context as llama-server{unknown}: {self.kv_sizing.describe()}"
            f"; the configured pool{shown} is shown beside it"
        )
        self._log_line(self.context_note)
        what = f"{self.spec.kind} '{self.spec.served_model_name}'"
        guards.check_reservations(self.spec.reservations, self.host.memory_budget_gb, what=what)

    def _read_config(self) -> model_config.ConfigReader:
        if self.read_config is not None:
            return self.read_config
        if self.client is None:
            self.client = make_client(self.host)
        return model_config.in_image(self.client, self.image_ref, self.model_volumes(), run_id=self.run_id)

    def _version_label(self) -> str | None:
        """The pulled image's ``org.opencontainers.image.version``: what image discovery records as its
        version when the image has one (registry/discovery.py)."""
        labels = (self.image_attrs.get("Config") or {}).get("Labels") or {}
        return labels.get(VERSION_LABEL) or None

    def compile_cache_volume(self) -> str | None:
        """The named volume holding what this image's engine compiled at start: one per image (a newer
        image compiles anew, so its first start is cold), reused by every later start of it."""
        if compile_cache_dir(self.engine_cfg.kind) is None:
            return None
        return cache_prune.volume_name(self.engine_cfg.kind, self.image_ref)

    def volumes(self) -> dict[str, dict[str, str]]:
        vols: dict[str, dict[str, str]] = {}
        cache_dir, volume = compile_cache_dir(self.engine_cfg.kind), self.compile_cache_volume()
        if cache_dir and volume:
            vols[volume] = {"bind": cache_dir, "mode": "rw"}
        return vols | self.model_volumes()

    def model_volumes(self) -> dict[str, dict[str, str]]:
        """The model's read-only mounts: what the engine sees under /models, and what its config is
        read through (never the compile cache: a read must not create its volume, which says warm)."""
        vols: dict[str, dict[str, str]] = {}
        if self.host.models_dir:
            vols[self.host.models_dir] = {"bind": CONTAINER_MODELS_DIR, "mode": "ro"}
        p = PurePosixPath(self.host_model_path)
        under = self.host.models_dir and str(p).startswith(self.host.models_dir.rstrip("/") + "/")
        if p.is_absolute() and not under:
            # on its own at /models/<name>: every part of a split GGUF, since llama.cpp loads the
            # others from beside the first
            for f in required_files(str(p)).files:
                vols[f] = {"bind": container_model_path(f, self.host.models_dir), "mode": "ro"}
        return vols

    def container_name(self) -> str:
        return safe_name(f"strix-{self.engine_cfg.kind}-{self.run_id}")[:63]

    def run_kwargs(self, group_ids: list[int]) -> dict[str, Any]:
        executable = self.spec.executable
        kwargs: dict[str, Any] = {
            "entrypoint": executable,
            "command": self.spec.flags,
            "name": self.container_name(),
            "detach": True,
            "network_mode": "host",
            "environment": dict(self.spec.env),  # the engine's and its image source's
            "volumes": self.volumes(),
            "labels": {
                MANAGED_LABEL: "true",
                RUN_LABEL: self.run_id,
                "strix.engine": self.engine_cfg.kind,
                "strix.image": self.image_ref,
            },
            "devices": [f"{d}:{d}:rwm" for d in self.host.devices],
            "group_add": [int(g) for g in group_ids],
            # an SELinux-enforcing Box: the devices and the model mounts usable without relabelling the
            # host's files (hosts/box/selinux.py says why not `:z`)
            "security_opt": ["seccomp=unconfined", *([LABEL_OPT] if self.selinux_enforcing else [])],
        }
        if self.engine_cfg.shm_size:
            kwargs["shm_size"] = self.engine_cfg.shm_size
        else:
            kwargs["ipc_mode"] = "host"
        return kwargs

    # -- lifecycle

    def __enter__(self) -> DockerEngine:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.client is None:
            self.client = make_client(self.host)
        try:
            return self._start()
        except BaseException as e:
            tail = container_log_tail(self.container, self.log_path)
            self._cleanup()
            if isinstance(e, EngineStartError):
                if e.log_tail is None:
                    e.log_tail = tail
                raise
            if isinstance(e, Exception):
                raise EngineStartError("failed_start", f"{type(e).__name__}: {e}", tail) from e
            raise  # KeyboardInterrupt / cancellation: cleaned up, propagate as is

    def __exit__(self, *exc: object) -> None:
        self._cleanup()

    def pull(self) -> None:
        """Pull the image now (by digest), so the start later does not: a Box run pulls while the
        production engine still serves. A failure is ``failed_start``, as at the start."""
        if self.client is None:
            self.client = make_client(self.host)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_line(f"run {self.run_id}: {self.engine_cfg.kind} image {self.image_ref}")
        self._image = self._pull()
        self.size_for_context()

    @property
    def image_attrs(self) -> dict[str, Any]:
        """The pulled image's inspect data (after :meth:`pull`; empty before)."""
        return dict(getattr(self._image, "attrs", None) or {})

    def _start(self) -> DockerEngine:
        if self._image is None:  # pull() was not called first
            self._log_line(f"run {self.run_id}: {self.engine_cfg.kind} image {self.image_ref}")
            self._image = self._pull()
        image = self._image
        self.size_for_context()  # done by pull() when it was called first
        gids = self.group_ids if self.group_ids is not None else resolve_group_ids(self.host, self.client)
        kwargs = self.run_kwargs(gids)
        self._log_line(f"command: {self.spec.command_line()}")
        import docker.errors

        if volume := self.compile_cache_volume():
            try:
                self.client.volumes.get(volume)
                self.compile_cache = "warm"
            except docker.errors.NotFound:
                self.compile_cache = "cold"  # created by the run below, kept for the next start
            self._log_line(f"compile cache {volume}: {self.compile_cache}")

        started_at = datetime.now(UTC)
        try:
            self.container = self.client.containers.run(self.image_ref, **kwargs)
        except docker.errors.APIError as e:
            raise EngineStartError(
                "failed_start", f"container could not be created: {e.explanation or e}"
            ) from e
        self._streamer = LogStreamer(self.container, self.log_path)
        self._streamer.start()
        base_url = f"http://{url_host(self.host.address)}:{self.spec.port}"
        self._wait_ready(base_url)
        self.container.reload()
        pid = self.container.attrs.get("State", {}).get("Pid") or None
        build = engine_build(self.spec, base_url, image)
        return DockerEngine(
            base_url=base_url,
            model=self.spec.served_model_name,
            metrics_url=base_url + self.spec.metrics_path,
            log_path=self.log_path,
            command=list(self.spec.command),
            engine_build=build,
            container_id=self.container.id,
            container_name=self.container.name,
            image_ref=self.image_ref,
            image_id=getattr(image, "id", None),
            repo_digests=list((getattr(image, "attrs", None) or {}).get("RepoDigests") or []),
            spec=self.spec,
            pid=pid,
            labels=dict(kwargs["labels"]),
            image_attrs=dict(getattr(image, "attrs", None) or {}),
            _container=self.container,
            transport=client_transport(self.client),
            started_at=started_at,
        )

    def _pull(self) -> Any:
        import docker.errors

        if self.pull_policy != "always":
            try:
                image = self.client.images.get(self.image_ref)
                self._log_line(f"image present: {image.id}")
                return image
            except docker.errors.ImageNotFound:
                if self.pull_policy == "never":
                    raise EngineStartError(
                        "failed_start", f"image {self.image_ref} is not on the host"
                    ) from None
            except docker.errors.APIError as e:
                log.debug("image lookup %s: %s", self.image_ref, e)
        repo, reference = split_image_ref(self.image_ref)
        self._log_line(
            f"pulling {repo}@{reference}"
            if reference.startswith("sha256:")
            else f"pulling {repo}:{reference}"
        )
        last_report = 0.0
        layers: dict[str, tuple[int, int]] = {}
        statuses: dict[str, str] = {}
        try:
            for event in self.client.api.pull(repo, tag=reference, stream=True, decode=True):
                if "error" in event:
                    raise EngineStartError(
                        "failed_start", f"pull of {self.image_ref} failed: {event['error']}"
                    )
                layer, status = event.get("id"), event.get("status", "")
                detail = event.get("progressDetail") or {}
                if layer and detail.get("total"):
                    layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
                if (
                    layer
                    and statuses.get(layer) != status
                    and not status.startswith(("Downloading", "Extracting"))
                ):
                    statuses[layer] = status
                    self._log_line(f"pull {layer}: {status}")
                elif not layer and status:
                    self._log_line(f"pull: {status}")
                now = time.monotonic()
                if layers and now - last_report > 5:
                    last_report = now
                    done = sum(c for c, _ in layers.values())
                    total = sum(t for _, t in layers.values())
                    self._log_line(
                        f"pull progress: {done / MB:.1f} / {total / MB:.1f} MB over {len(layers)} layers"
                    )
        except docker.errors.APIError as e:
            raise EngineStartError(
                "failed_start", f"pull of {self.image_ref} failed: {e.explanation or e}"
            ) from e
        try:
            return self.client.images.get(self.image_ref)
        except docker.errors.ImageNotFound as e:
            raise EngineStartError("failed_start", f"image {self.image_ref} missing after the pull") from e

    def _wait_ready(self, base_url: str) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        last = "no answer yet"
        max_polls = int(self.ready_timeout_s / max(self.poll_interval_s, 0.01)) + 10
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0)) as http:
            for _ in range(max_polls):
                self.container.reload()
                state = self.container.attrs.get("State", {})
                if self.container.status in ("exited", "dead") or state.get("Status") in ("exited", "dead"):
                    tail = container_log_tail(self.container, self.log_path)
                    raise EngineStartError(
                        "failed_start",
                        f"{container_exit(state, self.spec.kind)} before it was ready{last_log_line(tail)}",
                        tail,
                    )
                ok, last = ready_answer(http, base_url, self.spec.ready_paths)
                if ok:
                    self._log_line(f"ready: {base_url} ({', '.join(self.spec.ready_paths)})")
                    return
                if time.monotonic() >= deadline:
                    break
                time.sleep(self.poll_interval_s)
        raise EngineStartError(
            "failed_start",
            f"not ready within {self.ready_timeout_s:g} s ({last})",
            container_log_tail(self.container, self.log_path),
        )

    def _cleanup(self) -> None:
        if self._streamer is not None:
            self._streamer.stopping.set()
        c, self.container = self.container, None
        if c is not None:
            try:
                c.reload()
                if c.status == "running":
                    c.stop(timeout=self.stop_timeout_s)
            except Exception as e:  # noqa: BLE001 - docker-py wraps socket and HTTP errors alike: remove(force) follows
                log.debug("stop %s: %s", getattr(c, "name", "?"), e)
            try:
                c.remove(force=True)
                self._log_line(f"container {c.name} stopped and removed")
            except Exception as e:  # noqa: BLE001 - docker-py wraps socket and HTTP errors alike: logged, the stop goes on
                log.warning("could not remove container %s: %s", getattr(c, "name", "?"), e)
        if self._streamer is not None:
            self._streamer.join(timeout=10)
            self._streamer = None
        if self._own_client and self.client is not None:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001 - closing a client whose daemon is gone: nothing left to release
                pass
            self.client = None

    def _log_line(self, text: str) -> None:
        log.info("%s", text)
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("a") as f:
                f.write(f"[strix {time.strftime('%H:%M:%S')}] {text}\n")
        except OSError:
            pass
