"""Whether the Box enforces SELinux, as the probe reads it through the host's pid 1: enforcing,
permissive, absent, and unreadable (said, never taken as "not enforcing")."""

from __future__ import annotations

import subprocess

import pytest
from conftest import need
from support.box_images import BUSYBOX

from strix_pipeline.hosts.box import selinux


class _Client:
    def __init__(self, out: bytes | Exception) -> None:
        self.out, self.runs = out, []
        self.containers = self

    def run(self, image: str, argv: list[str], **kw: object) -> bytes:
        self.runs.append((image, argv, kw))
        if isinstance(self.out, Exception):
            raise self.out
        return self.out

    def get(self, name: str) -> object:
        raise LookupError(name)


@pytest.mark.parametrize(("out", "found"), [(b"1\n", True), (b"0\n", False), (b"none\n", False)])
def test_the_probe_says_whether_selinux_enforces(out: bytes, found: bool) -> None:
    client = _Client(out)
    assert selinux.enforcing(client, "busybox:1") == (found, None)
    image, argv, kw = client.runs[0]
    assert image == "busybox:1" and selinux.ENFORCE in argv[-1]
    assert kw["pid_mode"] == "host" and "label=disable" in kw["security_opt"]


def test_what_could_not_be_read_is_said() -> None:
    assert selinux.enforcing(_Client(b""), "busybox:1")[0] is None
    found, note = selinux.enforcing(_Client(RuntimeError("no such image")), "busybox:1")
    assert found is None and note is not None and "no such image" in note
    found, note = selinux.enforcing(_Client(b"1"), None)
    assert found is None and "no probe_image" in (note or "")


def test_the_script_runs_in_busybox_on_this_machine() -> None:
    """The real script under busybox: this machine (no selinuxfs, or one) prints one of the answers."""
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    script = selinux.SCRIPT.replace("busybox ", f"{BUSYBOX} ")
    out = subprocess.run(
        [str(BUSYBOX), "sh", "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert selinux.parse_enforce(out) is not None, out
