"""Every process on the Box that has a GPU device open, whoever started it.

Docker's own list of containers with a device misses what a podman toolbox, a CDI device, a systemd
service or a shell holds, and the SMI tools list only the processes that hold KFD memory now. The
kernel knows every opener: ``/proc/<pid>/fd`` links to ``/dev/kfd`` or ``/dev/dri/*``. A probe
container in the host's pid namespace (busybox ``ls -l`` over every ``/proc/<pid>/fd``, with
CAP_SYS_PTRACE and AppArmor unconfined: reading another process's fd table needs ptrace rights)
lists them with each one's command name and cgroup, and the cgroup says who runs it: a Docker or
podman container, a systemd unit, a user's session. Production's own processes (its container's pids,
or its systemd unit) and the pipeline's are not holders; any other opener refuses the run before
production is stopped, by name.

:func:`parse_openers` and :func:`owner_of` are pure; :func:`list_openers` runs the probe.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from strix_pipeline.hosts.box.gpu_holders import GPU_DEVICES, PROBE_LABEL, Holder, production_pids
from strix_pipeline.hosts.errors import EngineStartError

log = logging.getLogger(__name__)

# busybox sh: the fd tables first (one ls for all; how many were read and how many denied), then each
# opener's command name, cgroup lines and podman container name (podman writes it to /run/.containerenv
# in a privileged container, which a toolbox is). Arguments: the device paths (a path or a directory).
OPENERS_SCRIPT = r"""
busybox ls -l /proc/[0-9]*/fd/ 2>&1 | {
  pids=" "; cur=""; read_ok=0; denied=0
  while read -r line; do
    case "$line" in
      /proc/*/fd:|/proc/*/fd/:) cur=${line#/proc/}; cur=${cur%%/*}; read_ok=$((read_ok+1)) ;;
      *"ermission denied"*) denied=$((denied+1)) ;;
      *" -> "*)
        t=${line##* -> }
        for d in "$@"; do
          case "$t" in
            "$d"|"$d"/*)
              echo "fd $cur $t"
              case "$pids" in *" $cur "*) ;; *) pids="$pids$cur " ;; esac ;;
          esac
        done ;;
    esac
  done
  echo "scan $read_ok $denied"
  for p in $pids; do
    echo "comm $p $(busybox cat /proc/$p/comm 2>/dev/null)"
    busybox cat /proc/$p/cgroup 2>/dev/null | while read -r c; do echo "cgroup $p $c"; done
    n=$(busybox sed -n 's/^name="\(.*\)"$/\1/p' /proc/$p/root/run/.containerenv 2>/dev/null)
    if [ -n "$n" ]; then echo "podman $p $n"; fi
  done
}
"""

_CONTAINER = re.compile(r"(?:docker-|/docker/)([0-9a-f]{12,64})")
_PODMAN = re.compile(r"(?:libpod-|/libpod_parent/|/libpod/)([0-9a-f]{12,64})")
_UNIT = re.compile(r"/([^/]+\.(?:service|scope))$")
# a unit anywhere in a cgroup path: a quadlet's container runs in <unit>/libpod-payload-<id>
_ANY_UNIT = re.compile(r"/([^/]+\.(?:service|scope))(?=/|$)")


@dataclass
class Opener:
    """A process with a GPU device open: its pid (the host's), command name, devices and cgroups."""

    pid: int
    comm: str = "?"
    devices: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    podman_name: str | None = None  # the podman container it runs in, when podman said (a toolbox)

    def units(self) -> set[str]:
        """Every systemd unit its cgroups lie under, at any depth."""
        return {u for line in self.cgroups for u in _ANY_UNIT.findall(line.split(":", 2)[-1])}


@dataclass(frozen=True)
class Owner:
    """Who runs a process, from its cgroup: ``kind`` is container, podman, unit, session or other."""

    kind: str
    name: str  # a container id, a unit name, a cgroup path

    def describe(self) -> str:
        return {
            "container": f"Docker container {self.name[:12]}",
            "podman": f"podman container {self.name[:12]}",
            "unit": f"systemd unit {self.name}",
            "session": f"user session ({self.name})",
        }.get(self.kind, f"cgroup {self.name}")


def parse_openers(text: str) -> list[Opener]:
    """The probe's lines (``fd PID PATH``, ``comm PID NAME``, ``cgroup PID LINE``) as openers, in pid
    order."""
    found: dict[int, Opener] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        pid_text, _, value = rest.partition(" ")
        if kind not in ("fd", "comm", "cgroup", "podman") or not pid_text.isdigit():
            continue
        o = found.setdefault(int(pid_text), Opener(int(pid_text)))
        if kind == "fd" and value not in o.devices:
            o.devices.append(value)
        elif kind == "comm" and value.strip():
            o.comm = value.strip()
        elif kind == "cgroup":
            o.cgroups.append(value.strip())
        elif kind == "podman" and value.strip():
            o.podman_name = value.strip()
    return [found[p] for p in sorted(found) if found[p].devices]


@dataclass(frozen=True)
class Scan:
    """How many processes' descriptor tables the probe read, and how many it was denied (SELinux, a
    missing ptrace right): openers among the denied ones are not seen."""

    read: int
    denied: int

    def note(self) -> str | None:
        if not self.denied:
            return None
        return (
            f"the descriptors of {self.denied} of {self.read + self.denied} processes could not be read "
            "(permission denied: SELinux or a missing ptrace right): GPU device openers among them are "
            "not seen"
        )


def parse_scan(text: str) -> Scan | None:
    """The probe's ``scan READ DENIED`` line; None when it printed none (an older probe, a broken run)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "scan" and parts[1].isdigit() and parts[2].isdigit():
            return Scan(int(parts[1]), int(parts[2]))
    return None


def owner_of(cgroups: Sequence[str]) -> Owner:
    """Who runs a process, from its ``/proc/<pid>/cgroup`` lines (v2 ``0::/path``, v1 ``N:ctrl:/path``)."""
    paths = [line.split(":", 2)[2] if line.count(":") >= 2 else line for line in cgroups]
    for path in paths:
        if m := _CONTAINER.search(path):
            return Owner("container", m.group(1))
        if m := _PODMAN.search(path):
            return Owner("podman", m.group(1))
    for path in paths:
        if path.startswith("/user.slice"):
            return Owner("session", path.rsplit("/", 1)[-1] or path)
        if m := _UNIT.search(path):
            return Owner("unit", m.group(1))
    return Owner("other", paths[0] if paths else "unknown")


@dataclass(frozen=True)
class Production:
    """What production is, to tell its processes from others: its container's id and pids, or its
    systemd unit (a production run by commands)."""

    container_id: str | None = None
    pids: frozenset[int] = frozenset()
    unit: str | None = None  # its cgroup at any depth: a quadlet's container runs under its unit
    podman_container: str | None = None  # the toolbox it runs in

    def owns(self, opener: Opener, owner: Owner) -> bool:
        if opener.pid in self.pids:
            return True
        if owner.kind == "container" and self.container_id and self.container_id.startswith(owner.name):
            return True
        if self.podman_container is not None and opener.podman_name == self.podman_container:
            return True
        return self.unit is not None and (owner.name == self.unit or self.unit in opener.units())


def allowed_as(
    opener: Opener, owner: Owner, allowed: frozenset[str], container_names: dict[str, str]
) -> str | None:
    """The name under which the owner allowed ``opener`` (its command, a unit it runs under, its podman
    or Docker container's name), None when it is not allowed."""
    docker_name = next(
        (n for cid, n in container_names.items() if owner.kind == "container" and cid.startswith(owner.name)),
        None,
    )
    for name in (opener.comm, *sorted(opener.units()), opener.podman_name, docker_name):
        if name and name in allowed:
            return name
    return None


def foreign_openers(
    openers: Sequence[Opener],
    production: Production,
    allowed: frozenset[str] = frozenset(),
    container_names: dict[str, str] | None = None,
    said: list[str] | None = None,
) -> list[Holder]:
    """The openers that are not production's nor allowed by name (``allowed``: production's
    ``allowed_device_holders``; ``container_names``: Docker's container ids to names), as holders
    named by their owner (the pipeline's own engine is not running when the check is made: it runs
    before any engine starts). The allowed ones are appended to ``said``."""
    out = []
    for o in openers:
        owner = owner_of(o.cgroups)
        if production.owns(o, owner):
            continue
        if (name := allowed_as(o, owner, allowed, container_names or {})) is not None:
            if said is not None:
                said.append(f"{o.comm} pid {o.pid} ({owner.describe()}, allowed as {name!r})")
            continue
        out.append(
            Holder("process", f"{o.comm} pid {o.pid}", f"{owner.describe()}, opens {', '.join(o.devices)}")
        )
    return out


def list_openers(client: Any, probe_image: str, devices: Sequence[str] = GPU_DEVICES) -> list[Opener]:
    """Every process on the Docker host with one of ``devices`` open, read by a probe container in the
    host's pid namespace. Raises what docker-py raises when the probe cannot run."""
    return probe_openers(client, probe_image, devices)[0]


def probe_openers(
    client: Any, probe_image: str, devices: Sequence[str] = GPU_DEVICES
) -> tuple[list[Opener], Scan | None]:
    """:func:`list_openers` with how many descriptor tables were read and denied."""
    name = f"strix-openers-{uuid.uuid4().hex[:12]}"
    try:
        raw = _run_probe(client, probe_image, devices, name)
    except Exception:
        # a container that was created but could not start is not removed by remove=True
        try:
            client.containers.get(name).remove(force=True)
        except Exception:  # noqa: BLE001 - never created, or already gone
            pass
        raise
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return parse_openers(text), parse_scan(text)


def _run_probe(client: Any, probe_image: str, devices: Sequence[str], name: str) -> Any:
    return client.containers.run(
        probe_image,
        ["busybox", "sh", "-c", OPENERS_SCRIPT, "sh", *devices],
        remove=True,
        pid_mode="host",
        # reading another process's fd table needs ptrace rights; AppArmor's docker-default profile
        # denies them across containers. Not privileged: a host that withholds a capability refuses it
        cap_add=["SYS_PTRACE"],
        # label=disable: on an SELinux-enforcing Box a container's type may not read other processes'
        # /proc entries at all (a no-op where SELinux is off)
        security_opt=["apparmor=unconfined", "label=disable"],
        network_mode="none",
        labels={PROBE_LABEL: "true"},
        name=name,
    )


def production_facts(client: Any, production: Any) -> Production | None:
    """Production as the openers are told apart by (``config.ProductionEngine``): its container's id
    and pids, else its systemd ``unit``; None when neither can say (commands and no unit)."""
    if production is None:
        return Production()
    if production.container:
        try:
            container_id = client.containers.get(production.container).id
        except Exception:  # noqa: BLE001 - not running or gone: it holds nothing
            container_id = None
        return Production(container_id, frozenset(production_pids(client, production.container)))
    podman = getattr(production, "podman_container", None)
    return Production(unit=production.unit, podman_container=podman) if production.unit or podman else None


def _container_names(client: Any) -> dict[str, str]:
    """Docker's containers, id to name (an allowed holder may be named by its container)."""
    try:
        return {c.id: c.name for c in client.containers.list(all=True)}
    except Exception as e:  # noqa: BLE001 - not listed: only commands and units can be allowed then
        log.debug("containers not listed: %s", e)
        return {}


def device_opener_holders(
    client: Any, probe_image: str | None, production: Any, devices: Sequence[str] = GPU_DEVICES
) -> tuple[list[Holder], str | None]:
    """The processes other than production's with a GPU device open, and a note when they could not
    be listed or attributed (as gpu_holders.foreign_holders gives its holders: doctor and run alike)."""
    if not probe_image:
        return [], "no probe_image: processes with /dev/kfd or /dev/dri open not listed"
    prod = production_facts(client, production)
    if prod is None:
        return (
            [],
            "production runs by commands without `unit`: device openers not attributed (set production.unit)",
        )
    try:
        openers, scan = probe_openers(client, probe_image, devices)
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and image errors alike
        why = str(getattr(e, "explanation", None) or e)[:200]
        return [], f"processes with GPU devices open not listed: {why}"
    allowed = frozenset(getattr(production, "allowed_device_holders", None) or ())
    said: list[str] = []
    names = _container_names(client) if allowed else {}
    holders = foreign_openers(openers, prod, allowed, names, said)
    notes = [
        scan.note() if scan is not None else "the probe did not say how many descriptor tables it read",
        f"allowed GPU device holders open: {'; '.join(said)}" if said else None,
    ]
    return holders, "; ".join(n for n in notes if n) or None


def check_device_openers(
    client: Any, probe_image: str | None, production: Any, devices: Sequence[str] = GPU_DEVICES
) -> str | None:
    """Refuse (``failed_guard``) while a process that is not production's has a GPU device open,
    naming it and who runs it; returns a note when the openers could not be listed or attributed."""
    holders, note = device_opener_holders(client, probe_image, production, devices)
    if holders:
        raise EngineStartError(
            "failed_guard",
            "a GPU device is open in a process other than production's, so a benchmark would share the "
            "GPU with it; production was not stopped: " + "; ".join(h.describe() for h in holders),
        )
    return note
