"""A root filesystem pushed straight to a registry as a one-layer OCI image, never through dockerd.

``docker import`` followed by ``docker push`` costs a test image twice: dockerd unpacks the tar into
its store (~35 s for vLLM's 3.4 GB) and then gzips it again for the push on one core (~100-120 s on a
2-core machine). A launcher's test needs neither: what it exercises is the pull. So the tar stream is
uploaded as it is written (the distribution API's chunked upload: POST, PATCH per chunk, PUT with the
digest computed on the way), as an *uncompressed* OCI layer (``application/vnd.oci.image.layer.v1.tar``,
which dockerd pulls like any other), with a config carrying the image's ``Env`` and ``Labels`` (what
``docker import -c`` would have set) and an OCI manifest naming both.
"""

from __future__ import annotations

import hashlib
import http.client
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO
from urllib.parse import urlsplit

from support.infra import put_manifest

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
CHUNK = 64 * 1024 * 1024  # bytes per PATCH: few round trips, bounded memory


@dataclass(frozen=True)
class Pushed:
    digest: str  # the manifest's, as the registry stored it
    layer_size: int  # the uncompressed tar's bytes


class _Upload:
    """A blob upload in progress: ``write`` buffers and PATCHes chunks, ``close`` PUTs the digest."""

    def __init__(self, registry_url: str, repository: str) -> None:
        self.base = urlsplit(registry_url)
        self.conn = http.client.HTTPConnection(self.base.netloc, timeout=300)
        self.location = self._request("POST", f"/v2/{repository}/blobs/uploads/", b"", 202)
        self.buf = bytearray()
        self.sha = hashlib.sha256()
        self.size = 0

    def _request(self, method: str, url: str, body: bytes, want: int, **headers: str) -> str:
        path = urlsplit(url)
        target = path.path + (f"?{path.query}" if path.query else "")
        self.conn.request(method, target, body=body, headers={"Content-Length": str(len(body)), **headers})
        r = self.conn.getresponse()
        text = r.read()
        if r.status != want:
            raise RuntimeError(f"{method} {target}: HTTP {r.status} (wanted {want}): {text[:300]!r}")
        return r.headers.get("Location", "")

    def write(self, data: bytes) -> int:
        self.buf += data
        if len(self.buf) >= CHUNK:
            self._flush()
        return len(data)

    def _flush(self) -> None:
        if not self.buf:
            return
        chunk = bytes(self.buf)
        self.buf.clear()
        end = self.size + len(chunk) - 1
        self.location = self._request(
            "PATCH",
            self.location,
            chunk,
            202,
            **{"Content-Type": "application/octet-stream", "Content-Range": f"{self.size}-{end}"},
        )
        self.sha.update(chunk)
        self.size += len(chunk)

    def close(self) -> str:
        """Finish the upload; returns the blob's digest."""
        self._flush()
        digest = "sha256:" + self.sha.hexdigest()
        sep = "&" if "?" in self.location else "?"
        self._request("PUT", f"{self.location}{sep}digest={digest}", b"", 201)
        self.conn.close()
        return digest


def upload_blob(registry_url: str, repository: str, data: bytes) -> str:
    up = _Upload(registry_url, repository)
    up.write(data)
    return up.close()


def push_tar_image(
    registry_url: str,
    repository: str,
    tag: str,
    write_tar: Callable[[IO[bytes]], object],
    *,
    labels: dict[str, str],
    env: dict[str, str],
) -> Pushed:
    """Push the tar that ``write_tar`` writes as a one-layer image ``repository:tag``."""
    layer = _Upload(registry_url, repository)
    write_tar(layer)  # type: ignore[arg-type]  # a writable stream is all tarfile's "w|" asks for
    layer_digest = layer.close()
    config = json.dumps(
        {
            "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": [f"{k}={v}" for k, v in env.items()], "Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},  # uncompressed: the same digest
            "history": [{"created_by": "strix tests: oci_push.push_tar_image"}],
        },
        sort_keys=True,
    ).encode()
    config_digest = upload_blob(registry_url, repository, config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": OCI_LAYER_TAR, "digest": layer_digest, "size": layer.size}],
        }
    ).encode()
    digest = put_manifest(registry_url, repository, tag, manifest, OCI_MANIFEST)
    if digest != "sha256:" + hashlib.sha256(manifest).hexdigest():
        raise RuntimeError(f"{repository}:{tag}: the registry stored the manifest as {digest!r}")
    return Pushed(digest, layer.size)
