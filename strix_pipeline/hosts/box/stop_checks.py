"""What would fail only after production is stopped, checked while it still serves.

Each check returns a :class:`Finding` (ok or not, what was seen, how to fix it). ``strix doctor``
shows each as a line; a run makes the same checks before it stops production (runner/docker_run.py) and
refuses with ``failed_guard`` on the first that fails (:func:`refuse_unless`): a failure here costs
no outage, where after the stop it would cost up to ``ready_timeout_s`` of one.

- :func:`models_present`: the model paths of the runs exist on the Box, every part of a split GGUF
  (hosts/docker/model_files.py) included (each directory mounted read-only as a bind mount, which Docker
  refuses -- never creates -- when it is absent);
- :func:`production_ready`: the production container exists and runs, its health URL answers 200;
- :func:`port_reachable`: nothing else holds the engine's port, and a listener there (busybox httpd in
  the probe image, host network) is reached from this controller -- a firewall shows up now;
- :func:`gpu_seen`: ``rocminfo`` in ``rocm_probe_image`` with the devices lists ``gpu_target``;
- :func:`disk_free`: Docker's data root has room for the largest image (``min_free_disk_gb`` at least).

A check that could not look (no probe image, a tool missing in it) says so and refuses nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

import httpx

from strix_pipeline.config import DockerHostConfig, ProductionEngine
from strix_pipeline.hosts.cleanup.disk_budget import Pull
from strix_pipeline.hosts.docker.host import resolve_group_ids
from strix_pipeline.hosts.docker.model_files import ModelFiles, on_host
from strix_pipeline.hosts.docker.readiness import url_host
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.guards import port_in_use
from strix_pipeline.registry.errors import RegistryError
from strix_pipeline.units import GB

PROBE_LABELS = {"strix.probe": "true"}
# the doctor lines' names (docs/box.md lists them as they are)
PRODUCTION = "production engine"
MODELS = "models on the host"
PORT = "engine port {port}"
GPU = "ROCm container sees {target}"
DISK = "disk for images"
_AGENT = re.compile(r"^\s*Name:\s+(gfx[0-9a-f]+)\s*$", re.M)
ROCM_PROBE_FIX = (
    "set hosts.<name>.rocm_probe_image to an image with rocminfo (rocm/dev-ubuntu-22.04:7.2.1-complete)"
)


@dataclass(frozen=True)
class Finding:
    name: str  # the doctor line's name
    ok: bool
    detail: str
    fix: str | None = None
    checked: bool = True  # False: could not look (no probe image, a tool missing in it): no refusal


def refuse_unless(finding: Finding) -> None:
    """A failed check refuses the run (``failed_guard``) before production is stopped; one that could
    not look is the caller's to log, never a refusal."""
    if not finding.ok and finding.checked:
        fix = f" ({finding.fix})" if finding.fix else ""
        raise EngineStartError(
            "failed_guard", f"{finding.name}: {finding.detail}{fix}; production was not stopped"
        )


def _unchecked(name: str, why: str, fix: str | None = None) -> Finding:
    return Finding(name, False, f"not checked: {why}", fix, checked=False)


def _run(client: Any, image: str, argv: list[str], **kw: Any) -> str:
    raw = client.containers.run(image, argv, remove=True, labels=PROBE_LABELS, **kw)
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _error(e: BaseException) -> str:
    return str(getattr(e, "explanation", None) or e)[:300]


# ---------------------------------------------------------------- models


@dataclass(frozen=True)
class ModelSeen:
    """One profile's files on the host, as the probe found them."""

    profile: str
    files: ModelFiles  # what the engine opens (hosts/docker/model_files.py): every part of a split GGUF
    absent: tuple[str, ...] = ()  # of files.files
    no_directory: bool = False  # Docker refused the bind mount: the directory itself is absent

    @property
    def ok(self) -> bool:
        return not self.absent and not self.files.problem


def find_models(
    client: Any, host: DockerHostConfig, paths: dict[str, str]
) -> tuple[list[ModelSeen], Finding | None]:
    """Each profile's files (``paths``: profile -> its path) looked for on the host, one probe container
    per directory. The Finding, when set, is why the probe could not look: then no file is known
    absent, but a path that cannot work (``files.problem``) is still known."""
    wanted = {prof: on_host(path, host.models_dir) for prof, path in sorted(paths.items())}
    # a path that cannot work whatever is on the host needs no probe
    by_dir: dict[str, dict[str, None]] = {}  # directory -> the names in it (ordered, once each)
    for f in wanted.values():
        if not f.problem and not f.in_image:
            by_dir.setdefault(f.directory, {}).update(dict.fromkeys(f.names))
    absent, no_dir, could_not = _look(client, host, by_dir)
    seen = [
        ModelSeen(prof, f, tuple(x for x in f.files if x in absent), f.directory in no_dir)
        for prof, f in wanted.items()
    ]
    return seen, could_not


def _look(
    client: Any, host: DockerHostConfig, by_dir: dict[str, dict[str, None]]
) -> tuple[set[str], set[str], Finding | None]:
    """(the absent files' paths, the absent directories, why the probe could not look)."""
    if not by_dir:
        return set(), set(), None
    if not host.probe_image:
        return set(), set(), _unchecked(MODELS, "no probe_image", "set hosts.<name>.probe_image (busybox)")
    import docker.types

    absent: set[str] = set()
    no_dir: set[str] = set()
    script = 'for f in "$@"; do test -e "/m/$f" || echo "absent $f"; done'
    for directory, names in sorted(by_dir.items()):
        mount = docker.types.Mount("/m", directory, type="bind", read_only=True)
        argv = ["busybox", "sh", "-c", script, "sh", *names]
        try:
            lines = _run(client, host.probe_image, argv, mounts=[mount]).splitlines()
        except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and image errors alike
            if "does not exist" not in _error(e):
                why = f"the probe could not look: {_error(e)}"
                return set(), set(), _unchecked(MODELS, why, "the probe image needs busybox")
            # Docker refuses a bind mount of an absent directory (never creates it): all of it is absent
            no_dir.add(directory)
            lines = [f"absent {n}" for n in names]
        absent |= {str(PurePosixPath(directory) / n) for n in names if f"absent {n}" in lines}
    return absent, no_dir, None


def models_finding(seen: list[ModelSeen], could_not: Finding | None = None) -> Finding:
    """The one line for every profile: a path that cannot work, then each absent file named with its
    profile ("gpt-oss-120b (/srv/models/x-00002-of-00003.gguf)")."""
    name = MODELS
    if not seen:
        return Finding(name, True, "no model profile with a path runs here")
    fix = (
        "put each model at its profile's path, every part of a split GGUF beside the first "
        "(strix doctor says where)"
    )
    problems = [f"{s.profile}: {s.files.problem}" for s in seen if s.files.problem]
    if problems:
        return Finding(name, False, "; ".join(problems), fix)
    if could_not is not None:
        return could_not
    gone = [
        f"{s.profile} ({x}{f': no directory {s.files.directory}' if s.no_directory else ''})"
        for s in seen
        for x in s.absent
    ]
    if gone:
        return Finding(name, False, "absent: " + "; ".join(gone), fix)
    shown = [
        f"{s.files.path} in the engine's image (no models_dir: nothing of the host's to look for)"
        if s.files.in_image
        else s.files.path + (f" (+{len(s.files.files) - 1} parts)" if s.files.split else "")
        for s in seen
    ]
    return Finding(name, True, ", ".join(sorted(shown)))


def models_present(client: Any, host: DockerHostConfig, paths: dict[str, str]) -> Finding:
    """``paths``: model profile name -> its path on the host. Absent files are named with their profile."""
    return models_finding(*find_models(client, host, paths))


# ---------------------------------------------------------------- production


def http_status(url: str, timeout_s: float = 5.0) -> str | None:
    """None when ``url`` answers 200, else what it did."""
    try:
        code = httpx.get(url, timeout=timeout_s).status_code
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"[:200]
    return None if code == 200 else f"HTTP {code}"


def production_ready(
    client: Any, production: ProductionEngine | None, *, status: Callable[[str], str | None] = http_status
) -> Finding:
    """The engine the run stops can be seen back: its container exists and runs, its health URL is 200."""
    name = PRODUCTION
    if production is None:
        return Finding(name, True, "none configured: nothing is stopped")
    url = str(production.health_url)
    if production.container:
        import docker.errors

        try:
            state = client.containers.get(production.container).status
        except docker.errors.NotFound:
            return Finding(
                name,
                False,
                f"no container {production.container} on the host",
                "set production.container to the name `docker ps` shows",
            )
        if state != "running":
            return Finding(name, False, f"container {production.container} is {state}", "start it first")
    said = status(url)
    if said is not None:
        return Finding(
            name,
            False,
            f"{url} does not answer 200 while production serves ({said}): its restore could not be seen",
            "fix production.health_url (reachable from this controller)",
        )
    what = f"container {production.container} running" if production.container else "stop/start commands"
    return Finding(name, True, f"{what}, {url} answers 200")


def production_port(production: ProductionEngine | None) -> int | None:
    """The port production's health URL names (its serving port, as the Box's users call it)."""
    if production is None:
        return None
    url = httpx.URL(str(production.health_url))
    return url.port or (443 if url.scheme == "https" else 80)


# ---------------------------------------------------------------- the engine's port


def port_reachable(
    client: Any, host: DockerHostConfig, port: int, *, production_port: int | None = None
) -> Finding:
    """Free now (unless it is production's own, freed by its stop), and reached from here when listened on."""
    name = PORT.format(port=port)
    if port_in_use(host.address, port):
        if port == production_port:
            return Finding(
                name,
                True,
                f"{host.address}:{port} is production's: users' clients reach the benchmark there",
                "give the engine another port and fence it (docs/box.md)",
            )
        return Finding(
            name,
            False,
            f"{host.address}:{port} is already in use on the host: the engine could not bind it",
            "stop what listens there or give the engine another port",
        )
    if not host.probe_image:
        return _unchecked(name, "no probe_image", "set hosts.<name>.probe_image (busybox)")
    script = (
        "busybox mkdir -p /tmp/w && echo strix-port-check > /tmp/w/index.html && "
        'exec busybox httpd -f -p "$1" -h /tmp/w'
    )
    try:
        c = client.containers.run(
            host.probe_image,
            ["busybox", "sh", "-c", script, "sh", str(port)],
            detach=True,
            network_mode="host",
            labels=PROBE_LABELS,
        )
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and image errors alike
        return _unchecked(name, f"could not listen there: {_error(e)}", "the probe image needs busybox")
    url = f"http://{url_host(host.address)}:{port}/"
    said = "no answer"
    try:
        for _ in range(30):
            try:
                r = httpx.get(url, timeout=httpx.Timeout(3.0, connect=2.0))
                if "strix-port-check" in r.text:
                    return Finding(name, True, f"{url} reached from this controller")
                said = f"HTTP {r.status_code}"
            except httpx.HTTPError as e:
                said = f"{type(e).__name__}: {e}"[:200]
            c.reload()
            if c.status in ("exited", "dead"):  # the listener never ran: not the firewall
                tail = c.logs().decode(errors="replace").strip()[-200:]
                return _unchecked(
                    name,
                    f"the probe's listener exited: {tail or 'no output'}",
                    "the probe image needs busybox httpd",
                )
            time.sleep(0.2)
    finally:
        try:
            c.remove(force=True)
        except Exception:  # noqa: BLE001 - removed already, or the daemon is gone: nothing to keep
            pass
    return Finding(
        name,
        False,
        f"a listener on the host's port {port} is not reached at {url} ({said})",
        f"open port {port}/tcp from this controller in the host's firewall",
    )


# ---------------------------------------------------------------- the GPU in a container


def gpu_seen(client: Any, host: DockerHostConfig, group_ids: list[int]) -> Finding:
    """``rocminfo`` in the ROCm probe image, with the devices, groups and options an engine gets."""
    target = host.gpu_target
    name = GPU.format(target=target or "the GPU")
    if not target:
        return Finding(name, True, "no gpu_target: no GPU expected on this host")
    if not host.rocm_probe_image:
        return _unchecked(name, "no rocm_probe_image", ROCM_PROBE_FIX)
    try:
        out = _run(
            client,
            host.rocm_probe_image,
            ["rocminfo"],
            devices=[f"{d}:{d}:rwm" for d in host.devices],
            group_add=[int(g) for g in group_ids],
            security_opt=["seccomp=unconfined"],
            network_mode="host",
        )
    except Exception as e:  # noqa: BLE001 - docker-py wraps a failed rocminfo (ContainerError) and the rest alike
        return Finding(
            name,
            False,
            f"rocminfo in {host.rocm_probe_image} failed: {_error(e)}",
            "check /dev/kfd and /dev/dri, the video/render groups and the amdgpu driver",
        )
    agents = list(dict.fromkeys(_AGENT.findall(out)))
    if target not in agents:
        return Finding(
            name,
            False,
            f"rocminfo lists {', '.join(agents) or 'no GPU agent'}, not {target}",
            "check the amdgpu driver and firmware; never HSA_OVERRIDE_GFX_VERSION on gfx1151",
        )
    return Finding(name, True, f"rocminfo in {host.rocm_probe_image}: {', '.join(agents)}")


# ---------------------------------------------------------------- disk


def largest_image_bytes(client: Any) -> tuple[int, str]:
    best, tag = 0, "none"
    for image in client.images.list():
        size = int((image.attrs or {}).get("Size") or 0)
        if size > best:
            best, tag = size, ",".join(image.tags or []) or image.id[:19]
    return best, tag


def disk_free(
    client: Any,
    host: DockerHostConfig,
    *,
    pulls: list[Pull] | None = None,
    cache_bytes: int = 0,
    unsized: str | None = None,
) -> Finding:
    """Free bytes of Docker's data root (``df`` in the probe image) against what the run's pulls need:
    with ``pulls`` (each sized from its manifest) their bytes, what the compile caches may still take
    (``cache_bytes``) and ``min_free_disk_gb`` (hosts/cleanup/disk_budget.py); without (``unsized`` says why)
    the largest image already there stands in for a pull's size, as before sizes were read."""
    name = DISK
    if not host.probe_image:
        return _unchecked(name, "no probe_image", "set hosts.<name>.probe_image (busybox)")
    import docker.types

    root = str(client.info().get("DockerRootDir") or "/var/lib/docker")
    try:
        out = _run(
            client,
            host.probe_image,
            ["busybox", "df", "-Pk", "/d"],
            mounts=[docker.types.Mount("/d", root, type="bind", read_only=True)],
        )
        free = int(out.strip().splitlines()[-1].split()[3]) * 1024
    except Exception as e:  # noqa: BLE001 - df absent or its output not as POSIX says: not checked
        return _unchecked(name, f"could not read the free space of {root}: {_error(e)}")
    if pulls is not None:
        found = disk_budget(
            free, pulls, cache_bytes=cache_bytes, min_free_bytes=int(host.min_free_disk_gb * GB)
        )
        return replace(found, detail=f"{root}: {found.detail}")
    largest, tag = largest_image_bytes(client)
    need = max(int(host.min_free_disk_gb * GB), largest)
    detail = (
        f"{free / GB:.1f} GB free on {root}; a pull needs {need / GB:.1f} GB (largest image {tag} "
        f"{largest / GB:.1f} GB, min_free_disk_gb {host.min_free_disk_gb:g})"
        + (f"; {unsized}" if unsized else "")
    )
    if free < need:
        return Finding(name, False, detail, "prune old engine images (docker image prune) or grow the disk")
    return Finding(name, True, detail)


def disk_budget(free_bytes: int, pulls: list[Pull], *, cache_bytes: int, min_free_bytes: int) -> Finding:
    """Whether ``free_bytes`` hold every pull and ``cache_bytes`` with ``min_free_bytes`` left over."""
    need = sum(p.bytes for p in pulls) + cache_bytes + min_free_bytes
    images = ", ".join(f"{p.image} {p.bytes:,} bytes ({p.bytes / GB:.2f} GB)" for p in pulls) or "no image"
    detail = (
        f"{free_bytes:,} bytes ({free_bytes / GB:.2f} GB) free; needs {need:,} bytes "
        f"({need / GB:.2f} GB): pulls {images}; caches {cache_bytes:,} bytes; "
        f"min free {min_free_bytes:,} bytes"
    )
    if free_bytes < need:
        return Finding(
            DISK,
            False,
            f"short by {need - free_bytes:,} bytes: {detail}",
            "prune unused images and compile caches (strix prune budget), or grow the disk",
        )
    return Finding(DISK, True, detail)


def sized_pulls(pulls: Callable[[], list[Pull]] | None) -> tuple[list[Pull] | None, str | None]:
    """The run's pulls sized from their manifests, or None and why not (a registry that does not
    answer: the disk check falls back to the largest image there, and says so)."""
    if pulls is None:
        return None, None
    try:
        return pulls(), None
    except (RegistryError, ValueError) as e:
        return None, f"pull sizes not read from the registry ({e}): the largest image there stands in"


# ---------------------------------------------------------------- all of them, before a run's stop


def image_present(client: Any, image_ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(image_ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def before_stop(
    client: Any,
    host: DockerHostConfig,
    *,
    port: int,
    model_path: str,
    image_ref: str,
    prune: Callable[[], None] | None = None,
    pulls: Callable[[], list[Pull]] | None = None,
    cache_bytes: int = 0,
) -> list[str]:
    """The checks of one run, before its pull and production's stop: the first failure refuses the run
    (``failed_guard``); returns what could not be checked, for the run's log. ``pulls`` sizes the
    images the run will pull (its engine's and the probes' not on the host yet) and ``cache_bytes`` is
    what the compile caches may still take (hosts/cleanup/cache_prune.py): the disk must hold both and
    ``min_free_disk_gb``. ``prune`` removes the images no series needs (hosts/cleanup/image_prune.py, saying
    what it removed) when the disk is short, and the disk is looked at again."""
    findings = [
        production_ready(client, host.production),
        models_present(client, host, {"the run's model": model_path}),
        port_reachable(client, host, port, production_port=production_port(host.production)),
    ]
    sized, unsized = sized_pulls(pulls)
    if sized or not image_present(client, image_ref):
        disk = disk_free(client, host, pulls=sized, cache_bytes=cache_bytes, unsized=unsized)
        if not disk.ok and disk.checked and prune is not None:
            prune()
            disk = disk_free(client, host, pulls=sized, cache_bytes=cache_bytes, unsized=unsized)
        findings.append(disk)
    if host.gpu_target and host.rocm_probe_image:
        findings.append(gpu_seen(client, host, resolve_group_ids(host, client)))
    for finding in findings:
        refuse_unless(finding)
    return [f"{f.name}: {f.detail}" for f in findings if not f.checked]
