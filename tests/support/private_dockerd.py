"""A dockerd of the test's own, to restart: the shared daemon is never restarted, but what a Box's dockerd
does when it restarts (a package upgrade restarting docker.service at night) is to start every container
whose restart policy says so, ``always`` even after a ``docker stop``.

``PrivateDockerd(root)`` runs ``dockerd`` with its own data root, exec root, pid file and socket under
``root`` (no bridge, no iptables: containers use the host's network), an image of busybox imported in
it; ``restart()`` stops it (SIGTERM, as systemd does) and starts it again; ``stop()`` removes its
containers, stops it and unmounts what it left. Needs root and the dockerd binary.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
IMAGE = "strix-test/private-busybox:1"


def private_dockerd_available() -> bool:
    return shutil.which("dockerd") is not None and os.geteuid() == 0 and BUSYBOX.is_file()


class PrivateDockerd:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.sock = self.root / "docker.sock"
        self.url = f"unix://{self.sock}"
        self.log = self.root / "dockerd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _argv(self) -> list[str]:
        return [
            "dockerd",
            f"--data-root={self.root / 'data'}",
            f"--exec-root={self.root / 'exec'}",
            f"--pidfile={self.root / 'dockerd.pid'}",
            f"--host={self.url}",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
        ]

    def docker(self, *args: str, stdin: bytes | None = None, check: bool = True) -> str:
        done = subprocess.run(
            ["docker", "-H", self.url, *args], input=stdin, capture_output=True, timeout=60, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode()

    def start(self, timeout_s: float = 60) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while self.docker("version", check=False) == "" or not self.sock.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def shutdown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.shutdown()
        self.start()

    def import_busybox(self) -> str:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(BUSYBOX, "bin/busybox")
            link = tarfile.TarInfo("bin/sh")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        self.docker("import", "-", IMAGE, stdin=buf.getvalue())
        return IMAGE

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            ids = self.docker("ps", "-aq", check=False).split()
            if ids:
                self.docker("rm", "-f", *ids, check=False)
        self.shutdown()
        netns = self.root / "exec" / "netns"
        for ns in netns.glob("*") if netns.is_dir() else []:
            subprocess.run(["umount", str(ns)], capture_output=True, timeout=30, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
