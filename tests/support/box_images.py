"""Engine images as the Box meets them, for the checks made before production stops: a Strix Halo
toolbox (llama-server installed under /usr/local/bin, ``CMD ["/bin/bash"]``), a llama.cpp HIP library
compiled for other GPU targets, each pushed to a loopback registry and tracked as an image source;
and a watch on the production container's state for the whole of a run.

The HIP library is a stand-in: clang's offload bundle names each target as
``hipv4-amdgcn-amd-amdhsa--gfx1151`` inside ``libggml-hip.so``, and the bytes here carry the same
entries, which is all the arch-list command of engines/llamacpp.py reads (no GPU, as on the Box).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from strix_pipeline.records import ImageRecord
from support.bench_docker import healthy
from support.infra import Registry, build_image, free_port, push, remove_image
from support.llama_image import llama_rootfs

BUSYBOX = Path("/bin/busybox")
# what the llama.cpp arch-list command calls, as busybox applets (busybox runs the one argv[0] names)
ARCH_TOOLS = ("/bin/sh", "/bin/find", "/bin/grep", "/bin/sed", "/bin/sort", "/bin/tr", "/bin/bash")
TOOLBOX_BINARY = "/usr/local/bin/llama-server"  # where the toolboxes' cmake --install puts it


def hip_library(targets: list[str]) -> bytes:
    """Bytes shaped like a HIP fat binary's bundle entries for ``targets``."""
    entries = b"".join(b"hipv4-amdgcn-amd-amdhsa--" + t.encode() + b"\x00" for t in targets)
    return b"\x7fELF\x02\x01\x01" + b"\x00" * 57 + b"__CLANG_OFFLOAD_BUNDLE__\x00host-x86_64\x00" + entries


def toolbox_files(binary: Path, scratch: Path, targets: list[str]) -> dict[str, bytes | Path]:
    """A toolbox-like root filesystem: the real llama-server (at its own path, so its RPATH resolves)
    started by ``/usr/local/bin/llama-server``, busybox as the shell tools, and a HIP library for
    ``targets`` under /usr/local/lib. No /app at all."""
    wrapper = scratch / "llama-server-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec {binary} "$@"\n')
    wrapper.chmod(0o755)
    files: dict[str, bytes | Path] = {**llama_rootfs(binary), TOOLBOX_BINARY: wrapper}
    files.update({tool: BUSYBOX for tool in ARCH_TOOLS})
    files["/usr/local/lib/libggml-hip.so"] = hip_library(targets)
    return files


def cdna_files(targets: list[str]) -> dict[str, bytes | Path]:
    """An image built for other GPUs: /app/llama-server exists (a stand-in that never starts: the gate
    refuses first), the HIP library lists only ``targets``."""
    files: dict[str, bytes | Path] = {tool: BUSYBOX for tool in ARCH_TOOLS}
    files["/app/llama-server"] = BUSYBOX
    files["/app/libggml-hip.so"] = hip_library(targets)
    return files


@dataclass
class PushedImage:
    registry: Registry
    repository: str
    tag: str
    digest: str
    binary: Path = BUSYBOX  # make_config's default executable; the tests set their own

    def record(self, engine: str = "llamacpp") -> ImageRecord:
        now = datetime.now(UTC)
        return ImageRecord(
            engine=engine,
            registry=self.registry.host,
            repository=self.repository,
            tag=self.tag,
            digest=self.digest,
            floating=False,
            created=None,
            version=self.tag,
            revision=None,
            labels=None,
            sort_key=self.tag,
            first_seen=now,
            last_seen=now,
        )

    def remove(self) -> None:
        remove_image(f"{self.registry.host}/{self.repository}:{self.tag}")
        remove_image(f"{self.registry.host}/{self.repository}@{self.digest}")


def push_image(
    registry: Registry,
    repository: str,
    tag: str,
    files: dict[str, bytes | Path],
    cmd: list[str] | None = None,
    labels: dict[str, str] | None = None,
) -> PushedImage:
    """Build, push, and drop the local copy: a run pulls it back by digest."""
    ref = f"{registry.host}/{repository}:{tag}"
    build_image(ref, files, cmd=cmd, labels=labels)
    digest = push(ref)
    remove_image(ref)
    return PushedImage(registry, repository, tag, digest)


@contextmanager
def production_httpd(
    client,
    busybox: str,
    name_prefix: str,
    *,
    restart: str | None = None,
    labels: dict[str, str] | None = None,
) -> Iterator[tuple[str, str]]:
    """Production's engine as the tests have it: a busybox httpd on a free loopback port answering
    its health URL, removed afterwards; yields (container name, health URL) once it answers.
    ``restart``: its own restart policy (``always``, ``on-failure:3``), as ``docker run --restart``
    takes it; ``labels``: its labels (a compose project's, watchtower's)."""
    port = free_port()
    name = f"{name_prefix}-{port}"
    c = client.containers.run(
        busybox,
        [
            "sh",
            "-c",
            f"mkdir -p /www && echo ok > /www/health && httpd -f -p 127.0.0.1:{port} -h /www & "
            "trap 'kill $!; exit 0' TERM; wait",
        ],
        detach=True,
        network_mode="host",
        name=name,
        labels=labels or {},
        restart_policy=_restart_policy(restart),
    )
    try:
        url = f"http://127.0.0.1:{port}/health"
        deadline = time.monotonic() + 15
        while not healthy(url):
            assert time.monotonic() < deadline, f"{url} never healthy"
            time.sleep(0.1)
        yield name, url
    finally:
        c.remove(force=True)


def _restart_policy(restart: str | None) -> dict[str, object] | None:
    if not restart:
        return None
    name, _, count = restart.partition(":")
    return {"Name": name, "MaximumRetryCount": int(count or 0)} if name == "on-failure" else {"Name": name}


@dataclass
class ProductionWatch:
    """Polls ``docker inspect`` of the production container until stopped: every state it was seen in
    (``fmt``: what of it is read, by default its status)."""

    name: str
    interval_s: float = 0.1
    fmt: str = "{{.State.Status}}"
    states: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _state(self) -> str:
        argv = ["docker", "inspect", "-f", self.fmt, self.name]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout.strip()

    def _loop(self) -> None:
        while not self._stop.is_set():
            state = self._state()
            if not self.states or self.states[-1] != state:
                self.states.append(state)
            time.sleep(self.interval_s)

    def __enter__(self) -> ProductionWatch:
        self.states.append(self._state())
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        state = self._state()
        if self.states[-1] != state:
            self.states.append(state)


def rocm_probe_files(scratch: Path, gpu: str) -> dict[str, bytes | Path]:
    """A ROCm probe image's stand-in: ``rocminfo`` printing rocminfo's agent lines (the CPU agent, then
    the GPU agent named ``gpu``), busybox as the shell."""
    script = scratch / f"rocminfo-{gpu}"
    script.write_text(
        "#!/bin/sh\ncat <<'EOF'\nROCk module is loaded\n*******\nAgent 1\n*******\n"
        "  Name:                    AMD RYZEN AI MAX+ 395 w/ Radeon 8060S\n  Device Type:             CPU\n"
        f"*******\nAgent 2\n*******\n  Name:                    {gpu}\n"
        "  Marketing Name:          AMD Radeon 8060S\n  Device Type:             GPU\n*** Done ***\nEOF\n"
    )
    script.chmod(0o755)
    return {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX, "/bin/cat": BUSYBOX, "/usr/bin/rocminfo": script}


VLLM_STANDIN = "/usr/local/bin/vllm-standin"


def vllm_standin_files(scratch: Path) -> dict[str, bytes | Path]:
    """A vLLM stand-in (busybox): it "compiles" into /root/.cache/vllm when that holds nothing yet
    (saying so), then answers /health and /v1/models on the ``--port`` it is given."""
    script = scratch / "vllm-standin"
    script.write_text(
        '#!/bin/sh\nport=8000\nwhile [ $# -gt 0 ]; do [ "$1" = --port ] && port=$2; shift; done\n'
        "mkdir -p /root/.cache/vllm /tmp/www/v1\n"
        "if [ -e /root/.cache/vllm/kernels ]; then echo 'compiled kernels found'; "
        "else echo 'compiling kernels'; sleep 1; echo k > /root/.cache/vllm/kernels; fi\n"
        'echo ok > /tmp/www/health\necho \'{"data": [{"id": "standin"}]}\' > /tmp/www/v1/models\n'
        'exec busybox httpd -f -p "$port" -h /tmp/www\n'
    )
    script.chmod(0o755)
    files: dict[str, bytes | Path] = {tool: BUSYBOX for tool in ARCH_TOOLS}
    files.update(
        {"/bin/busybox": BUSYBOX, "/bin/mkdir": BUSYBOX, "/bin/sleep": BUSYBOX, VLLM_STANDIN: script}
    )
    return files


def torch_image_files(scratch: Path, arch_flags: str) -> dict[str, bytes | Path]:
    """A PyTorch engine image's stand-in: ``python3`` answers the engines' arch-list snippet as a ROCm
    PyTorch built for ``arch_flags`` would ("torch: gfx90a;gfx942"); ``vllm`` exists (never started)."""
    script = scratch / f"python3-{arch_flags.replace(';', '-')}"
    script.write_text(f"#!/bin/sh\necho 'torch: {arch_flags}'\n")
    script.chmod(0o755)
    return {
        "/bin/busybox": BUSYBOX,
        "/bin/sh": BUSYBOX,
        "/usr/bin/python3": script,
        "/usr/local/bin/vllm": BUSYBOX,
    }
