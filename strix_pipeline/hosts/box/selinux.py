"""Whether the Box enforces SELinux (Fedora, where the Strix Halo toolboxes live), read by the probe.

An enforcing Box gives a container the ``container_t`` type: it may not use the GPU's device nodes nor
read the host's model files (``user_home_t``, ``default_t``) unless they are relabelled. The engine
containers then run with ``--security-opt label=disable`` (:data:`LABEL_OPT`), not ``:z`` on their
mounts: ``:z`` relabels the host's model directory for every container, production's own included
(a toolbox or a quadlet reading the same files could lose them), and cannot relabel device nodes at
all, which the engine needs as much as its model.

The probe runs in the host's pid namespace and reads ``/proc/1/root/sys/fs/selinux/enforce``: a
container's own ``/sys`` never shows the host's selinuxfs.
"""

from __future__ import annotations

import uuid
from typing import Any

from strix_pipeline.hosts.box.gpu_holders import PROBE_LABEL

LABEL_OPT = "label=disable"
ENFORCE = "/proc/1/root/sys/fs/selinux/enforce"
SCRIPT = f"if [ -e {ENFORCE} ]; then busybox cat {ENFORCE}; else echo none; fi"


def parse_enforce(text: str) -> bool | None:
    """``1``: enforcing; ``0`` (permissive) or ``none`` (no selinuxfs): not; anything else: unknown."""
    value = text.strip()
    return {"1": True, "0": False, "none": False}.get(value)


def enforcing(client: Any, probe_image: str | None) -> tuple[bool | None, str | None]:
    """Whether the Docker host enforces SELinux, and a note when it could not be read (None)."""
    if not probe_image:
        return None, "no probe_image: whether SELinux enforces is not known (engine containers unlabelled)"
    name = f"strix-selinux-{uuid.uuid4().hex[:12]}"
    try:
        raw = client.containers.run(
            probe_image,
            ["busybox", "sh", "-c", SCRIPT],
            remove=True,
            pid_mode="host",
            cap_add=["SYS_PTRACE"],  # /proc/1/root is the host's root: ptrace rights over pid 1
            security_opt=["apparmor=unconfined", LABEL_OPT],
            network_mode="none",
            labels={PROBE_LABEL: "true"},
            name=name,
        )
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and image errors alike
        try:
            client.containers.get(name).remove(force=True)
        except Exception:  # noqa: BLE001 - never created, or already gone
            pass
        return None, f"whether SELinux enforces not read: {str(getattr(e, 'explanation', None) or e)[:200]}"
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    found = parse_enforce(text)
    if found is None:
        return None, f"whether SELinux enforces not read: the probe printed {text.strip()[:80]!r}"
    return found, None
