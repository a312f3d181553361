"""Shared test infrastructure: a real registry on loopback and tiny images built and pushed with Docker.

Tests that use these helpers must request the ``registry_binary`` / ``docker_engine`` fixtures of
conftest.py first, so a missing binary fails in CI and skips locally instead of erroring here.

- ``start_registry(tmp_path)`` runs the Debian ``docker-registry`` (distribution 2.8) on a free
  127.0.0.1 port with a throwaway storage directory and delete enabled; optional htpasswd users
  (bcrypt through the stdlib ``crypt`` module, which uses libxcrypt on Debian: no extra package).
- ``build_image(tag, files)`` imports a tiny root filesystem with ``docker import`` (no base image,
  no network); ``push(tag)`` pushes it and returns the manifest digest the registry stored.

Docker treats registries on 127.0.0.0/8 as insecure-allowed, so pushing needs no daemon config.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REGISTRY_BINARY = "/usr/bin/docker-registry"
_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 10) -> None:
    """SIGTERM ``proc`` if it still runs and wait ``grace_s`` for it; then SIGKILL it and wait 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash the registry's htpasswd accepts; low cost keeps each auth check fast in tests."""
    try:
        import crypt  # deprecated in 3.11, removed in 3.13; libxcrypt gives us $2b$

        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 5))
    except (ImportError, AttributeError, ValueError):  # pragma: no cover - depends on the platform
        import bcrypt  # type: ignore[import-not-found]

        return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()


def write_htpasswd(path: Path, users: dict[str, str]) -> Path:
    path.write_text("".join(f"{user}:{bcrypt_hash(pw)}\n" for user, pw in users.items()))
    return path


@dataclass
class Registry:
    """A running docker-registry; ``stop()`` (or leaving the ``with`` block) kills it."""

    host: str  # "127.0.0.1:PORT", the name docker and the client use
    storage: Path
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    users: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    @property
    def port(self) -> int:
        return int(self.host.rsplit(":", 1)[1])

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.process)

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _config_yaml(port: int, storage: Path, htpasswd: Path | None) -> str:
    # JSON is valid YAML: no YAML library needed and no quoting surprises in paths.
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": "strix-test-secret"},
    }
    if htpasswd is not None:
        config["auth"] = {"htpasswd": {"realm": "strix-test", "path": str(htpasswd)}}
    return json.dumps(config, indent=2)


def _wait_ready(reg: Registry, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reg.process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{reg.url}/v2/", timeout=2):
                return True
        except urllib.error.HTTPError as e:
            if e.code == 401:  # auth enabled: up and demanding credentials
                return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    return False


def start_registry(
    tmp_path: Path,
    *,
    htpasswd: dict[str, str] | None = None,
    storage: Path | None = None,
    binary: str = REGISTRY_BINARY,
    timeout_s: float = 20.0,
) -> Registry:
    """Start a registry on a free loopback port. ``storage`` lets a second registry (e.g. one with
    basic auth) serve what was pushed through a first one without credentials."""
    base = Path(tmp_path) / f"registry-{os.getpid()}-{time.monotonic_ns()}"
    base.mkdir(parents=True)
    storage = Path(storage) if storage else base / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    hp = write_htpasswd(base / "htpasswd", htpasswd) if htpasswd else None
    last_log = ""
    for _attempt in range(3):  # the free port may be taken between probe and bind
        port = free_port()
        config_path = base / "config.yml"
        config_path.write_text(_config_yaml(port, storage, hp))
        log_path = base / f"registry-{port}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [binary, "serve", str(config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        reg = Registry(f"127.0.0.1:{port}", storage, config_path, log_path, proc, dict(htpasswd or {}))
        if _wait_ready(reg, timeout_s):
            return reg
        reg.stop()
        last_log = reg.log()[-2000:]
    raise RuntimeError(f"docker-registry did not start: {last_log}")


def _rootfs_tar(files: dict[str, bytes | Path]) -> bytes:
    buf = io.BytesIO()
    # A fixed mtime keeps layers reproducible; the config's `created` still differs per import.
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs: set[str] = set()
        for name in sorted(files):
            rel = name.lstrip("/")
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
            src = files[name]
            data = src.read_bytes() if isinstance(src, Path) else src
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o755 if isinstance(src, Path) and os.access(src, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_image(
    tag: str,
    files: dict[str, bytes | Path],
    *,
    cmd: list[str] | None = None,
    labels: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """``docker import`` a root filesystem made of ``files`` (path in image -> content or host file);
    returns the image id. E.g. ``{"/bin/busybox": Path("/bin/busybox")}`` gives a runnable image."""
    if not files:
        files = {"/etc/strix-image": tag.encode()}  # docker import refuses an empty archive
    changes: list[str] = []
    for k, v in (labels or {}).items():
        changes += ["-c", f"LABEL {json.dumps(k)}={json.dumps(v)}"]
    for k, v in (env or {}).items():
        changes += ["-c", f"ENV {k}={json.dumps(v)}"]
    if cmd:
        changes += ["-c", f"CMD {json.dumps(cmd)}"]
    out = subprocess.run(
        ["docker", "import", *changes, "-", tag],
        input=_rootfs_tar(files),
        capture_output=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"docker import {tag} failed: {out.stderr.decode(errors='replace')}")
    return out.stdout.decode().strip()


def push(tag: str) -> str:
    """``docker push`` and return the manifest digest (sha256:...) the registry now serves for it."""
    out = subprocess.run(["docker", "push", tag], capture_output=True, timeout=180, check=False)
    text = out.stdout.decode(errors="replace")
    if out.returncode != 0:
        raise RuntimeError(f"docker push {tag} failed: {text}{out.stderr.decode(errors='replace')}")
    found = _DIGEST.findall(text)
    if not found:
        raise RuntimeError(f"docker push {tag}: no digest in output: {text}")
    return found[-1]


def remove_image(tag: str) -> None:
    """Best-effort local cleanup; the registry keeps what was pushed."""
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=60, check=False)


# -- direct registry API: fast fixtures (many tags, hand-made indexes) and deletions ------------------

MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def get_manifest(registry_url: str, name: str, reference: str) -> tuple[bytes, str, str]:
    """(body, media type, digest) of a manifest, straight from the registry."""
    req = urllib.request.Request(
        f"{registry_url}/v2/{name}/manifests/{reference}", headers={"Accept": MANIFEST_ACCEPT}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read(), r.headers.get("Content-Type", ""), r.headers.get("Docker-Content-Digest", "")


def put_manifest(registry_url: str, name: str, reference: str, body: bytes, media_type: str) -> str:
    """PUT a manifest (e.g. the same image under another tag, or a hand-made index); returns its digest."""
    req = urllib.request.Request(
        f"{registry_url}/v2/{name}/manifests/{reference}",
        data=body,
        method="PUT",
        headers={"Content-Type": media_type},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.headers.get("Docker-Content-Digest", "")


def tag_many(registry_url: str, name: str, source_tag: str, tags: list[str]) -> str:
    """Point every tag in ``tags`` at the manifest of ``source_tag`` (seconds, not a push per tag)."""
    body, media_type, digest = get_manifest(registry_url, name, source_tag)
    for t in tags:
        put_manifest(registry_url, name, t, body, media_type)
    return digest


def delete_manifest(registry_url: str, name: str, digest: str) -> None:
    """Delete a manifest by digest (distribution 2.8 has no tag delete: every tag on it goes too)."""
    req = urllib.request.Request(f"{registry_url}/v2/{name}/manifests/{digest}", method="DELETE")
    with urllib.request.urlopen(req, timeout=30) as r:
        if r.status not in (200, 202):
            raise RuntimeError(f"DELETE {name}@{digest}: {r.status}")


def make_index(registry_url: str, name: str, entries: list[tuple[str, str, str]]) -> bytes:
    """An OCI index over manifests already in ``name``: entries are (reference, os, architecture)."""
    manifests = []
    for ref, os_, arch in entries:
        body, media_type, digest = get_manifest(registry_url, name, ref)
        manifests.append(
            {
                "mediaType": media_type,
                "digest": digest,
                "size": len(body),
                "platform": {"os": os_, "architecture": arch},
            }
        )
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }
    return json.dumps(index).encode()
