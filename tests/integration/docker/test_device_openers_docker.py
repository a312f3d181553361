"""The device-openers probe on a real dockerd: a privileged busybox container in the
host's pid namespace finds a process outside Docker -- as a systemd service or a podman toolbox would
be -- that holds a GPU device open (a stand-in device here: this machine has no /dev/kfd), names it,
and refuses before production is stopped; production's own process passes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.infra import build_image, remove_image

from strix_pipeline.config import ProductionEngine
from strix_pipeline.hosts.box import device_openers as do
from strix_pipeline.hosts.box import selinux
from strix_pipeline.hosts.errors import EngineStartError

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    kfd = tmp_path / "kfd"
    kfd.write_text("")
    hold = "import sys, time; f = open(sys.argv[1]); print('open', flush=True); time.sleep(90)"
    proc = subprocess.Popen([sys.executable, "-c", hold, str(kfd)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    try:
        yield proc.pid, kfd
    finally:
        proc.kill()
        proc.wait()


def test_a_process_outside_docker_with_the_device_open_is_named_and_refused(
    client, busybox: str, holder: tuple[int, Path]
) -> None:
    pid, kfd = holder
    openers = do.list_openers(client, busybox, [str(kfd)])
    assert [o.pid for o in openers] == [pid], openers
    assert openers[0].devices == [str(kfd)] and openers[0].comm.startswith("python")
    with pytest.raises(EngineStartError) as e:
        do.check_device_openers(client, busybox, None, [str(kfd)])  # no production configured
    assert e.value.status == "failed_guard" and f"pid {pid} (" in e.value.reason, e.value.reason
    assert f"opens {kfd}" in e.value.reason and "production was not stopped" in e.value.reason
    # the same process as production's own is no holder
    assert do.foreign_openers(openers, do.Production(pids=frozenset({pid}))) == []
    left = client.containers.list(all=True, filters={"label": f"{do.PROBE_LABEL}=true"})
    assert left == [], "the probe container is removed"


def test_a_probe_that_cannot_start_leaves_no_container_and_refuses_nothing(client, docker_engine) -> None:
    tag = "strix-test/no-busybox:1"
    build_image(tag, {"/etc/strix-image": b"no shell here"})
    try:
        with pytest.raises(Exception, match="busybox"):  # created, then its start fails
            do.list_openers(client, tag, ["/dev/kfd"])
        note = do.check_device_openers(client, tag, None, ["/dev/kfd"])
        assert note is not None and note.startswith("processes with GPU devices open not listed"), note
        left = client.containers.list(all=True, filters={"label": f"{do.PROBE_LABEL}=true"})
        assert left == [], "a probe created but not started is removed"
    finally:
        remove_image(tag)


def test_a_holder_the_owner_allowed_by_name_is_said_not_refused(
    client, busybox: str, holder: tuple[int, Path]
) -> None:
    """The probe (label=disable among its options, accepted where SELinux is off) finds the opener and
    says it is allowed; how many fd tables it was denied, if any, is said beside it."""
    pid, kfd = holder
    (opener,) = do.list_openers(client, busybox, [str(kfd)])
    production = ProductionEngine(
        container="strix-test-no-such-production",
        health_url="http://127.0.0.1:9/health",
        allowed_device_holders=[opener.comm],
    )
    note = do.check_device_openers(client, busybox, production, [str(kfd)])
    assert note is not None and f"pid {pid} (" in note and f"allowed as {opener.comm!r}" in note, note
    # this daemon may deny some (a user namespace, a sandboxed runtime): said with the count, never silent
    scan = do.probe_openers(client, busybox, [str(kfd)])[1]
    assert scan is not None and scan.read > 0
    assert ("could not be read" in note) is (scan.denied > 0), note


def test_selinux_is_read_through_the_hosts_pid_1(client, busybox: str) -> None:
    found, note = selinux.enforcing(client, busybox)
    on_host = Path("/sys/fs/selinux/enforce")
    expected = on_host.read_text().strip() == "1" if on_host.exists() else False
    assert (found, note) == (expected, None)
