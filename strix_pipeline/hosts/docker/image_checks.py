"""Checks of a pulled engine image, made while production still serves: a refusal here costs no outage.

- :func:`check_executable`: the argv prefix the run will start (engines.executable_for) exists in the
  image -- an absolute path as is, a bare name on the image's own ``PATH`` -- read through Docker's
  archive API on a created, never started container: no shell in the image, no GPU needed.
- :func:`check_arch`: the image was compiled for the host's GPU target (``gpu_target``, "gfx1151"):
  the engine's arch-list command (engines/<kind>.py ``ARCH_LIST_COMMAND``) runs in the image without
  devices or network; a component that lacks the target refuses the run as "not built for gfx1151",
  one whose targets cannot be read (a compressed offload bundle the image cannot decompress) too.

Both raise :class:`EngineStartError` with status ``failed_guard`` (the engine was never tried).

- :func:`read_file`: a small file as a container of the image sees it -- the image's own files and the
  mounts the engine gets -- read through the same archive API: no ``cat`` or shell needed in the image.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import shlex
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import Any

from strix_pipeline.engines.base import CompiledTargets, parse_compiled_targets
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.guards import MANAGED_LABEL, RUN_LABEL

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ARCH_TIMEOUT_S = 180.0  # importing torch in a large image on a cold page cache takes tens of seconds
NOT_BUILT = "not built for {target}"
GO_MODE_DIR = 1 << 31  # Go's os.ModeDir, as Docker's path stat reports a mode
MAX_READ_BYTES = 1 << 20  # read_file's limit: a model's config.json is a few KB
MAX_LINKS = 8  # links read_file follows before it gives up


class ImageFileError(Exception):
    """A file a container of the image cannot give: absent, a directory, too large, a loop of links."""


def _image_env(image_attrs: dict[str, Any]) -> dict[str, str]:
    env = ((image_attrs.get("Config") or {}).get("Env")) or []
    return dict(item.split("=", 1) for item in env if "=" in item)


def _candidates(executable: str, image_attrs: dict[str, Any]) -> list[str]:
    if executable.startswith("/"):
        return [executable]
    path = _image_env(image_attrs).get("PATH") or DEFAULT_PATH
    return [str(PurePosixPath(d) / executable) for d in path.split(":") if d.startswith("/")]


def _stat(client: Any, container_id: str, path: str) -> dict[str, Any] | None:
    """Docker's path stat (HEAD /containers/{id}/archive): None when the path is not in the container."""
    api = client.api
    res = api.head(api._url("/containers/{0}/archive", container_id), params={"path": path})
    if res.status_code == 404:
        return None
    api._raise_for_status(res)
    header = res.headers.get("X-Docker-Container-Path-Stat")
    return json.loads(base64.b64decode(header)) if header else {}


def _is_executable_file(stat: dict[str, Any]) -> bool:
    mode = int(stat.get("mode", 0))
    if stat.get("linkTarget"):
        return True  # a link (e.g. /usr/local/bin/vllm -> …): the start resolves it
    return not mode & GO_MODE_DIR and bool(mode & 0o111)


@contextmanager
def created(
    client: Any,
    image_ref: str,
    entrypoint: list[str],
    *,
    run_id: str,
    check: str,
    volumes: dict[str, dict[str, str]] | None = None,
) -> Iterator[Any]:
    """A container of ``image_ref`` created and never started (no device, no network), for reading its
    filesystem through Docker's archive API; removed whatever happens (a removal that fails is found
    by the leftover guard: it carries the managed label)."""
    extra = {"volumes": volumes} if volumes else {}
    container = client.containers.create(
        image_ref,
        entrypoint=entrypoint,
        command=[],
        network_disabled=True,
        labels={MANAGED_LABEL: "true", RUN_LABEL: run_id, "strix.check": check},
        **extra,
    )
    try:
        yield container
    finally:
        try:
            container.remove(force=True)
        except Exception as e:  # noqa: BLE001 - a removal that failed is found by the leftover guard later
            log.warning("could not remove check container %s: %s", container.id[:12], e)


def check_executable(
    client: Any, image_ref: str, executable: list[str], image_attrs: dict[str, Any], *, run_id: str
) -> str:
    """Refuse (``failed_guard``) an image that lacks the executable the run would start; returns the
    path found. Only the first word is looked up (``python3`` of ``python3 -m sglang.launch_server``)."""
    import docker.errors

    if not executable:
        raise EngineStartError("failed_guard", f"no executable configured for {image_ref}")
    exe = executable[0]
    tried = _candidates(exe, image_attrs)
    with created(client, image_ref, [exe], run_id=run_id, check="executable") as container:
        for path in tried:
            try:
                stat = _stat(client, container.id, path)
            except docker.errors.APIError as e:
                log.debug("stat %s in %s: %s", path, image_ref, e)
                stat = None
            if stat is not None and _is_executable_file(stat):
                return path
    where = (
        ""
        if exe.startswith("/")
        else f" on the image's PATH ({', '.join(str(PurePosixPath(t).parent) for t in tried)})"
    )
    raise EngineStartError(
        "failed_guard",
        f"the image has no executable {exe}{where}: set `executable` on its image source "
        f"(the Strix Halo toolboxes install llama-server to /usr/local/bin); production was not stopped",
    )


def list_compiled_targets(
    client: Any, image_ref: str, command: list[str], *, run_id: str, timeout_s: float = ARCH_TIMEOUT_S
) -> CompiledTargets:
    """Run ``command`` in the image with no devices and no network; its output, parsed. A command that
    fails or does not finish is a ``failed_guard`` naming it and its last words."""
    container = client.containers.run(
        image_ref,
        entrypoint=command[:1],
        command=command[1:],
        detach=True,
        network_mode="none",
        labels={MANAGED_LABEL: "true", RUN_LABEL: run_id, "strix.check": "arch"},
    )
    try:
        deadline = time.monotonic() + timeout_s
        code: int | None = None
        while time.monotonic() < deadline:
            container.reload()
            if container.status in ("exited", "dead"):
                code = int((container.attrs.get("State") or {}).get("ExitCode", -1))
                break
            time.sleep(0.5)
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        try:
            container.remove(force=True)
        except Exception as e:  # noqa: BLE001 - a removal that failed is found by the leftover guard later
            log.warning("could not remove check container %s: %s", container.id[:12], e)
    shown = shlex.join(command)
    shown = shown if len(shown) <= 120 else shown[:119] + "…"
    if code is None:
        raise EngineStartError(
            "failed_guard", f"listing the image's GPU targets ({shown}) took over {timeout_s:g} s"
        )
    if code != 0:
        last = [ln for ln in err.splitlines() if ln.strip()][-1:] or ["no output"]
        raise EngineStartError(
            "failed_guard",
            f"could not list the image's GPU targets: {shown} exited {code}: {last[0][:300]}",
        )
    return parse_compiled_targets(out)


def check_arch(
    client: Any, image_ref: str, command: list[str], target: str, *, run_id: str
) -> CompiledTargets | None:
    """Refuse (``failed_guard``, reason "not built for <target>: …") an image whose compiled targets lack
    the host's; returns what was found. An empty command skips the gate (None)."""
    if not command:
        return None
    found = list_compiled_targets(client, image_ref, command, run_id=run_id)
    if found.unreadable:
        # an unread bundle may be exactly the one without the target: never a pass
        parts = "; ".join(f"{name}: {why}" for name, why in found.unreadable.items())
        raise EngineStartError(
            "failed_guard",
            f"cannot tell whether the image was built for {target}: {parts}; production was not stopped",
        )
    missing = found.missing(target)
    if missing:
        parts = "; ".join(f"{name} has {' '.join(t) or 'no GPU target'}" for name, t in missing.items())
        raise EngineStartError(
            "failed_guard", f"{NOT_BUILT.format(target=target)}: {parts}; production was not stopped"
        )
    return found


def read_file(
    client: Any,
    image_ref: str,
    path: str,
    *,
    run_id: str,
    volumes: dict[str, dict[str, str]] | None = None,
    max_bytes: int = MAX_READ_BYTES,
) -> str:
    """The text of ``path`` as a container of ``image_ref`` with ``volumes`` sees it (the image's own
    files, the bind mounts), read through Docker's archive API on a created, never started container:
    nothing runs in the image, so neither a shell nor ``cat`` must be there. A link is followed where
    Docker resolved it inside the container (a Hugging Face cache's snapshot -> blob). Raises
    :class:`ImageFileError` for a path that gives no file; docker-py's own errors pass through."""
    import docker.errors

    with created(client, image_ref, ["true"], run_id=run_id, check="file", volumes=volumes) as container:
        for _ in range(MAX_LINKS + 1):
            try:
                chunks, stat = container.get_archive(path)
            except docker.errors.NotFound:
                raise ImageFileError(f"{path}: no such file in the container") from None
            mode, size = int(stat.get("mode", 0)), int(stat.get("size", 0))
            if stat.get("linkTarget"):  # set for a link only, resolved in the container's root
                path = stat["linkTarget"]
                continue
            if mode & GO_MODE_DIR:
                raise ImageFileError(f"{path}: a directory, not a file")
            if size > max_bytes:
                raise ImageFileError(f"{path}: {size} bytes, over the {max_bytes} this reader takes")
            return _only_file(b"".join(chunks), path).decode("utf-8", errors="replace")
    raise ImageFileError(f"{path}: more than {MAX_LINKS} links")


def _only_file(archive: bytes, path: str) -> bytes:
    """The one regular file of the tar Docker's archive API gave for a file path."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            f = tar.extractfile(member) if member.isfile() else None
            if f is not None:
                return f.read()
    raise ImageFileError(f"{path}: the container's archive holds no file")
