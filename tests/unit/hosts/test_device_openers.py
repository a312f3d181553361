"""Every opener of a GPU device, named by who runs it: the probe's script run by the
real busybox over this machine's /proc against a process holding a stand-in device open, the cgroup
read as a Docker or podman container, a systemd unit or a session, and production told apart."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import need
from support.box_images import BUSYBOX

from strix_pipeline.hosts.box import device_openers as do
from strix_pipeline.hosts.errors import EngineStartError

CID = "4f1c2a9be07d" + "0" * 52


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    """A real process with a stand-in device open (a directory of devices, like /dev/dri)."""
    dri = tmp_path / "dri"
    dri.mkdir()
    (dri / "renderD128").write_text("")
    hold = "import sys, time; f = open(sys.argv[1]); print('open', flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", hold, str(dri / "renderD128")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    try:
        yield proc, dri
    finally:
        proc.kill()
        proc.wait()


def test_the_probe_script_finds_a_process_with_a_device_open(holder: tuple[subprocess.Popen, Path]) -> None:
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    proc, dri = holder
    out = subprocess.run(
        [
            str(BUSYBOX),
            "sh",
            "-c",
            do.OPENERS_SCRIPT.replace("busybox ", f"{BUSYBOX} "),
            "sh",
            "/nonexistent/kfd",
            str(dri),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    found = {o.pid: o for o in do.parse_openers(out)}
    assert proc.pid in found, out[-2000:]
    mine = found[proc.pid]
    assert mine.devices == [str(dri / "renderD128")] and mine.comm.startswith("python")
    assert mine.cgroups, "its cgroup lines were read"
    assert all(str(dri) in d for o in found.values() for d in o.devices)  # nothing else matched


@pytest.mark.parametrize(
    ("lines", "kind", "shown"),
    [
        ([f"0::/system.slice/docker-{CID}.scope"], "container", "Docker container 4f1c2a9be07d"),
        ([f"12:devices:/docker/{CID}", "0::/"], "container", "Docker container 4f1c2a9be07d"),
        (
            [f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container"],
            "podman",
            "podman container 4f1c2a9be07d",
        ),
        (["0::/system.slice/ollama.service"], "unit", "systemd unit ollama.service"),
        (["0::/user.slice/user-1000.slice/session-3.scope"], "session", "user session (session-3.scope)"),
        (["0::/machine.slice/vm"], "other", "cgroup /machine.slice/vm"),
    ],
)
def test_the_cgroup_says_who_runs_the_process(lines: list[str], kind: str, shown: str) -> None:
    owner = do.owner_of(lines)
    assert owner.kind == kind and owner.describe() == shown


OUT = f"""fd 100 /dev/kfd
scan 40 0
fd 100 /dev/dri/renderD128
fd 200 /dev/dri/renderD128
fd 300 /dev/kfd
comm 100 llama-server
cgroup 100 0::/system.slice/docker-{CID}.scope
comm 200 ollama
cgroup 200 0::/system.slice/ollama.service
comm 300 python3
cgroup 300 0::/user.slice/user-1000.slice/session-3.scope
"""


def test_production_is_told_apart_and_the_rest_is_named() -> None:
    openers = do.parse_openers(OUT)
    assert [o.pid for o in openers] == [100, 200, 300]
    assert openers[0].devices == ["/dev/kfd", "/dev/dri/renderD128"]
    held = do.foreign_openers(openers, do.Production(container_id=CID))
    assert [h.name for h in held] == ["ollama pid 200", "python3 pid 300"]
    assert held[0].detail == "systemd unit ollama.service, opens /dev/dri/renderD128"
    # production run as a systemd unit: its unit's processes are its own
    assert [h.name for h in do.foreign_openers(openers, do.Production(unit="ollama.service"))] == [
        "llama-server pid 100",
        "python3 pid 300",
    ]
    assert do.foreign_openers(openers, do.Production(pids=frozenset({100, 200, 300}))) == []


class FakeClient:
    """docker-py's surface the check uses: containers.run (the probe) and containers.get (production)."""

    def __init__(self, out: str, error: Exception | None = None) -> None:
        self.out, self.error, self.runs = out, error, []
        self.containers = self

    def run(self, image: str, argv: list[str], **kw: object) -> bytes:
        self.runs.append((image, argv, kw))
        if self.error:
            raise self.error
        return self.out.encode()

    def get(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(id=CID, top=lambda: {"Titles": ["UID", "PID"], "Processes": [["root", "100"]]})


def production(**kw: object) -> SimpleNamespace:
    return SimpleNamespace(**({"container": None, "unit": None} | kw))


def test_the_probe_says_when_it_could_not_read_other_processes_descriptors(
    holder: tuple[subprocess.Popen, Path],
) -> None:
    """Run as an unprivileged user the real script is denied root's fd tables: it counts them, and the
    check says so in its note instead of passing in silence."""
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    _, dri = holder
    script = do.OPENERS_SCRIPT.replace("busybox ", f"{BUSYBOX} ")
    argv = [str(BUSYBOX), "sh", "-c", script, "sh", "/nonexistent/kfd", str(dri)]
    out = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    scan = do.parse_scan(out)
    assert scan is not None and scan.denied > 0 and scan.read > 0, out[-500:]
    note = scan.note()
    assert note is not None and f"{scan.denied} of {scan.read + scan.denied} processes" in note
    denied = OUT.replace("scan 40 0", f"scan {scan.read} {scan.denied}")
    only_production = "\n".join(ln for ln in denied.splitlines() if " 100 " in ln or ln.startswith("scan"))
    said = do.check_device_openers(FakeClient(only_production), "probe:1", production(container="llama-prod"))
    assert said is not None and "could not be read (permission denied" in said
    silent = "\n".join(ln for ln in OUT.splitlines() if " 100 " in ln)  # no scan line at all
    said = do.check_device_openers(FakeClient(silent), "probe:1", production(container="llama-prod"))
    assert said is not None and "did not say how many descriptor tables it read" in said


TOOLBOX = f"""scan 40 0
fd 400 /dev/kfd
comm 400 llama-server
cgroup 400 0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container
podman 400 llama-rocm-7.2
fd 500 /dev/dri/renderD128
comm 500 llama-server
cgroup 500 0::/system.slice/llama-quadlet.service/libpod-payload-{CID}/init.scope
fd 600 /dev/dri/card1
comm 600 amdgpu_top
cgroup 600 0::/user.slice/user-1000.slice/session-3.scope
fd 700 /dev/dri/card1
comm 700 Xorg
cgroup 700 0::/system.slice/gdm.service
"""


def test_production_in_a_toolbox_or_a_quadlet_is_production() -> None:
    openers = do.parse_openers(TOOLBOX)
    assert openers[0].podman_name == "llama-rocm-7.2"
    assert "llama-quadlet.service" in openers[1].units()
    in_toolbox = do.foreign_openers(openers, do.Production(podman_container="llama-rocm-7.2"))
    assert [h.name for h in in_toolbox] == ["llama-server pid 500", "amdgpu_top pid 600", "Xorg pid 700"]
    as_quadlet = do.foreign_openers(openers, do.Production(unit="llama-quadlet.service"))
    assert [h.name for h in as_quadlet] == ["llama-server pid 400", "amdgpu_top pid 600", "Xorg pid 700"]


def test_holders_the_owner_allowed_are_said_not_refused() -> None:
    prod = production(unit="llama-quadlet.service", podman_container=None)
    prod.allowed_device_holders = ["amdgpu_top", "gdm.service", "llama-rocm-7.2"]
    note = do.check_device_openers(FakeClient(TOOLBOX), "probe:1", prod)
    assert note is not None
    assert "amdgpu_top pid 600 (user session (session-3.scope), allowed as 'amdgpu_top')" in note
    assert "Xorg pid 700 (systemd unit gdm.service, allowed as 'gdm.service')" in note
    assert "allowed as 'llama-rocm-7.2'" in note
    prod.allowed_device_holders = ["amdgpu_top"]
    with pytest.raises(EngineStartError) as e:
        do.check_device_openers(FakeClient(TOOLBOX), "probe:1", prod)
    assert "Xorg pid 700" in e.value.reason and "amdgpu_top" not in e.value.reason


def test_an_allowed_docker_container_is_named_by_its_name() -> None:
    openers = do.parse_openers(OUT)
    said: list[str] = []
    held = do.foreign_openers(
        openers,
        do.Production(unit="ollama.service"),
        frozenset({"metrics-exporter"}),
        {CID: "metrics-exporter"},
        said,
    )
    assert [h.name for h in held] == ["python3 pid 300"]
    assert said == ["llama-server pid 100 (Docker container 4f1c2a9be07d, allowed as 'metrics-exporter')"]


def test_the_check_refuses_before_the_stop_naming_each_foreign_opener() -> None:
    client = FakeClient(OUT)
    with pytest.raises(EngineStartError) as e:
        do.check_device_openers(client, "probe:1", production(container="llama-prod"))
    assert e.value.status == "failed_guard"
    assert "production was not stopped" in e.value.reason
    assert "process ollama pid 200 (systemd unit ollama.service, opens /dev/dri/renderD128)" in e.value.reason
    assert "llama-server" not in e.value.reason  # production's own
    image, argv, kw = client.runs[0]
    assert image == "probe:1" and argv[-2:] == ["/dev/kfd", "/dev/dri"]
    assert kw["pid_mode"] == "host" and kw["cap_add"] == ["SYS_PTRACE"]


def test_the_check_passes_when_only_production_holds_the_gpu() -> None:
    only_production = "\n".join(ln for ln in OUT.splitlines() if " 100 " in ln or ln.startswith("scan"))
    assert (
        do.check_device_openers(FakeClient(only_production), "probe:1", production(container="llama-prod"))
        is None
    )


def test_what_could_not_be_looked_at_is_a_note_not_a_pass_in_silence() -> None:
    assert "no probe_image" in (
        do.check_device_openers(FakeClient(OUT), None, production(container="p")) or ""
    )
    # (a production by commands without `unit` or `podman_container` is refused at load: test_config)
    broken = FakeClient("", RuntimeError("image not found"))
    assert "not listed: image not found" in (
        do.check_device_openers(broken, "probe:1", production(container="p")) or ""
    )
