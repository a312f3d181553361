"""Where a run's memory readings come from: the local tree, or a probe container on a Docker host."""

from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path
from typing import Any, Protocol

from strix_pipeline.memory.gpu_counters import PROBE_PATHS, read_gpu_counters
from strix_pipeline.memory.tree import HostMemoryFacts, Reading, read_host_facts, read_tree

log = logging.getLogger(__name__)


class MemoryProbe(Protocol):
    def read(self) -> list[Reading]: ...

    def host_facts(self) -> HostMemoryFacts: ...

    def close(self) -> None: ...


class TreeProbe:
    """Reads a root tree directly: ``/`` on the machine running the pipeline, or a fixture tree."""

    def __init__(self, root: Path = Path("/"), pid: int | None = None) -> None:
        self.root = Path(root)
        self.pid = pid

    def read(self) -> list[Reading]:
        return read_tree(self.root, self.pid) + read_gpu_counters(self.root)

    def host_facts(self) -> HostMemoryFacts:
        return read_host_facts(self.root)

    def close(self) -> None:
        pass


PROBE_NAME = "strix-memory-probe"

# What the probe container prints: each readable file under a "@@@ <path>" header; the GPU's power,
# clocks, temperature and load ride along in the same exec (one round trip per sample over ssh).
_PROBE_SCRIPT = (
    "for f in /host/sys/class/drm/card*/device/mem_info_* /host/sys/class/drm/card*/device/vbios_version "
    + " ".join(PROBE_PATHS)
    + " "
    "/host/proc/meminfo /host/proc/cmdline "
    "/host/proc/sys/kernel/osrelease /host/sys/module/ttm/parameters/pages_limit "
    "/host/sys/module/amdttm/parameters/pages_limit "
    "/host/sys/class/kfd/kfd/topology/nodes/*/properties "
    "/host/sys/class/kfd/kfd/topology/nodes/*/mem_banks/*/properties; do "
    '[ -r "$f" ] && { echo "@@@ $f"; cat "$f"; }; done; true'
)


def parse_probe_output(text: str) -> dict[str, str]:
    """``@@@ /host/<path>`` headers followed by the file's content -> {"<path>": content}."""
    files: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("@@@ "):
            if current is not None:
                files[current] = "\n".join(lines) + "\n"
            current = line[4:].strip().removeprefix("/host/")
            lines = []
        elif current is not None:
            lines.append(line)
    if current is not None:
        files[current] = "\n".join(lines) + "\n"
    return files


def lay_out_tree(files: dict[str, str], root: Path) -> Path:
    """Lay files out under ``root`` so the tree readers can read them."""
    for rel, content in files.items():
        if ".." in Path(rel).parts:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


class DockerProbe:
    """Reads a Docker host's counters through a long-lived tiny container (/sys, /proc read-only).

    ``image`` needs ``sh`` and ``cat`` (busybox is enough). The container is labelled
    ``strix.probe=true`` and never ``strix.managed``: the leftover guard leaves it alone. It is
    removed by :meth:`close` (call it when the run ends); a probe of the same name left by a killed
    run is removed when the next one starts. ``devices``: the host's GPU devices, so the KFD topology
    of the GPU node is readable (the device total as HIP sees it). ``sys_path``/``proc_path`` exist
    so tests can mount a fixture tree.
    """

    def __init__(
        self,
        client: Any,
        image: str,
        *,
        sys_path: str = "/sys",
        proc_path: str = "/proc",
        extra_volumes: dict[str, dict[str, str]] | None = None,
        name: str | None = PROBE_NAME,
        devices: list[str] | None = None,
    ) -> None:
        if name:
            # one probe per host: a probe left by a killed run is replaced, never duplicated
            try:
                client.containers.get(name).remove(force=True)
            except Exception:  # noqa: BLE001 - no leftover probe (NotFound) or the daemon says so on create
                pass
        volumes = {
            sys_path: {"bind": "/host/sys", "mode": "ro"},
            proc_path: {"bind": "/host/proc", "mode": "ro"},
        }
        volumes.update(extra_volumes or {})
        self.container = client.containers.run(
            image,
            command=["sh", "-c", "while true; do sleep 3600; done"],
            detach=True,
            name=name,
            network_mode="host",
            volumes=volumes,
            labels={"strix.probe": "true"},
            auto_remove=False,
            # the KFD topology's GPU node answers EPERM to a container whose device cgroup does not
            # allow the GPU's render node read and write (kfd_topology.c node_show / mem_show,
            # kfd_devcgroup_check_permission): the host's GPU devices are passed
            devices=[f"{d}:{d}:rw" for d in devices or []],
        )
        self._lock = threading.Lock()

    def exec(self, argv: list[str]) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of ``argv`` in the probe container, stdout and stderr apart."""
        with self._lock:
            result = self.container.exec_run(argv, demux=True)
        out, err = result.output if isinstance(result.output, tuple) else (result.output, None)
        code = int(result.exit_code if result.exit_code is not None else -1)
        return code, (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")

    def files(self) -> dict[str, str]:
        code, output, err = self.exec(["sh", "-c", _PROBE_SCRIPT])
        if code != 0:
            raise RuntimeError(f"memory probe exited {code}: {(output + err)[-500:]}")
        return parse_probe_output(output)

    def read(self) -> list[Reading]:
        with tempfile.TemporaryDirectory(prefix="strix-probe-") as tmp:
            root = lay_out_tree(self.files(), Path(tmp))
            return read_tree(root) + read_gpu_counters(root)

    def host_facts(self) -> HostMemoryFacts:
        with tempfile.TemporaryDirectory(prefix="strix-probe-") as tmp:
            return read_host_facts(lay_out_tree(self.files(), Path(tmp)))

    def close(self) -> None:
        try:
            self.container.remove(force=True)
        except Exception as e:  # noqa: BLE001 - a probe that is already gone is fine
            log.debug("probe container removal: %s", e)
