"""A Box with systemd as its init, for the restore that must outlive the controller: the Box user's
``systemd-run --user`` timer fires under a real user manager kept alive by linger, after every ssh
session of that user is gone.

The image is assembled from this machine's installed Debian packages (``systemd``, ``dbus``,
``libpam-systemd``, ``openssh-server``, ``curl`` and their dependencies, as support/vllm_image.py
takes ``g++``), plus the ``docker`` CLI binary: nothing is downloaded. The container runs with
``--network host`` (dockerd here has no bridge), so it starts nothing that binds a port but its sshd on
the test's loopback port; the units that would touch the host or wait for hardware (networkd,
resolved, udev, getty, sysctl, modules, binfmt, the kernel's mounts) are masked. On this dockerd
(20.10, cgroup v1, ``--bridge=none --iptables=false``) systemd runs as PID 1 without
``--privileged``: ``/run`` and ``/run/lock`` as tmpfs and ``/sys/fs/cgroup`` mounted read-only
(:data:`RUN_FLAGS`) are enough -- it creates its units' cgroups below the container's own and boots
to ``running``, the user's manager included.

Inside: the user ``bench`` (in a ``docker`` group of the host socket's gid, so its ``docker`` CLI
reaches this machine's dockerd through the mounted socket, as the simulator's ssh path does), linger
enabled for it (``/var/lib/systemd/linger/bench``) unless the test turns it off, and sshd as a unit
with PAM, so each ssh session is a logind session and gets ``XDG_RUNTIME_DIR`` as on a real Box.
Production is a user unit of ``bench`` (``strix-production.service``) wrapping ``docker run`` of a
busybox httpd: stopping the unit removes the container, starting it runs one again.

Use (module fixtures below, registered in tests/conftest.py)::

    def test_x(systemd_box, ...):
        systemd_box.url            # ssh://bench@127.0.0.1:PORT, the Box's docker_host
        systemd_box.user_shell("systemctl --user is-active strix-production.service")
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.infra import build_image, free_port, remove_image
from support.sshd import keygen
from support.vllm_image import (
    RootFs,
    import_image,
    ldd_closure,
    missing_packages,
    package_closure,
    package_files,
)

TAG = "strix-test/systemd-box:1"
USER = "bench"
UID = 1000
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "dbus-user-session",
    "libpam-systemd",
    "openssh-server",
    "bash",
    "dash",
    "coreutils",
    "util-linux",
    "procps",
    "curl",
)
PAM_COMMON = ("common-account", "common-auth", "common-password", "common-session")
PAM_COMMON += ("common-session-noninteractive",)
BUSYBOX = Path("/bin/busybox")
DOCKER_CLI = Path("/usr/bin/docker")
DOCKER_SOCK = Path("/var/run/docker.sock")
CONF_DIR = "/etc/strix-box"  # mounted per container: sshd's config, host key, the user's key
PRODUCTION_UNIT = "strix-production.service"
# units that would touch the host (sysctl, modules, binfmt, the kernel's file systems), bind ports
# (networkd, resolved), or wait for hardware and consoles (udev, getty): none belongs in a test Box
MASKED = (
    "systemd-networkd.service",
    "systemd-networkd.socket",
    "systemd-networkd-wait-online.service",
    "systemd-resolved.service",
    "systemd-timesyncd.service",
    "systemd-udevd.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service",
    "systemd-udev-settle.service",
    "systemd-hwdb-update.service",
    "getty@.service",
    "getty.target",
    "console-getty.service",
    "serial-getty@.service",
    "systemd-sysctl.service",
    "systemd-modules-load.service",
    "kmod-static-nodes.service",
    "systemd-binfmt.service",
    "proc-sys-fs-binfmt_misc.automount",
    "proc-sys-fs-binfmt_misc.mount",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "sys-fs-fuse-connections.mount",
    "dev-hugepages.mount",
    "dev-mqueue.mount",
    "systemd-remount-fs.service",
    "systemd-firstboot.service",
    "systemd-random-seed.service",
    "systemd-machine-id-commit.service",
    "systemd-pstore.service",
    "systemd-journald-audit.socket",
    "systemd-ask-password-console.path",
    "systemd-ask-password-wall.path",
    "systemd-boot-check-no-failures.service",
    "cryptsetup.target",
    "swap.target",
    "ssh.service",  # the package's own: ours listens on the test's port only
    "ssh.socket",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "dpkg-db-backup.timer",
)

SSHD_UNIT = f"""[Unit]
Description=sshd on the test's loopback port
After=systemd-user-sessions.service

[Service]
ExecStartPre=/bin/mkdir -p /run/sshd
ExecStart=/usr/sbin/sshd -D -e -f {CONF_DIR}/sshd_config
KillMode=process
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

# production as a systemd user unit wrapping `docker run`, as a Box owner writes one
PRODUCTION_UNIT_TEXT = """[Unit]
Description=production engine (a busybox httpd standing in)

[Service]
EnvironmentFile=%h/.config/strix-production.env
ExecStartPre=-/usr/bin/docker rm -f ${NAME}
ExecStart=/usr/bin/docker run --rm --name ${NAME} --network host ${IMAGE} sh -c \
 "mkdir -p /www && echo ok > /www/health && exec httpd -f -p 127.0.0.1:${PORT} -h /www"
ExecStop=/usr/bin/docker stop -t 5 ${NAME}
# docker run exits with the engine's status: 143 when the stop's SIGTERM ended it
SuccessExitStatus=143
Restart=always
RestartSec=1
"""


def dockerfile(base: str, docker_gid: int) -> str:
    """The second layer: users, units, masks, linger, and ownership (the base layer is all root's)."""
    masks = " ".join(f"/etc/systemd/system/{u}" for u in MASKED)
    user_units = f"/home/{USER}/.config/systemd/user"
    return f"""FROM {base}
RUN printf '%s\\n' 'root:x:0:0:root:/root:/bin/bash' 'messagebus:x:100:101::/nonexistent:/usr/sbin/nologin' \\
      'sshd:x:101:65534::/run/sshd:/usr/sbin/nologin' '{USER}:x:{UID}:{UID}::/home/{USER}:/bin/bash' \\
      'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' >/etc/passwd \\
 && printf '%s\\n' 'root:x:0:' 'messagebus:x:101:' 'systemd-journal:x:102:' 'nogroup:x:65534:' \\
      'docker:x:{docker_gid}:{USER}' '{USER}:x:{UID}:' >/etc/group \\
 && for u in root messagebus sshd {USER} nobody; do echo "$u:*:19000:0:99999:7:::"; done >/etc/shadow \\
 && chmod 640 /etc/shadow \\
 && printf '%s\\n' 'passwd: files systemd' 'group: files systemd' 'shadow: files' 'hosts: files' \\
      >/etc/nsswitch.conf \\
 && : >/etc/machine-id && mkdir -p /root /tmp /var/tmp /var/log/journal /var/lib/systemd/linger \\
 && chmod 1777 /tmp /var/tmp \\
 && touch /var/lib/systemd/linger/{USER} \\
 && mkdir -p /etc/systemd/system/multi-user.target.wants {user_units} \\
 && for m in {masks}; do ln -sf /dev/null "$m"; done \\
 && ln -sf ../strix-sshd.service /etc/systemd/system/multi-user.target.wants/strix-sshd.service \\
 && chown -R {UID}:{UID} /home/{USER}
COPY strix-sshd.service /etc/systemd/system/strix-sshd.service
COPY {PRODUCTION_UNIT} {user_units}/{PRODUCTION_UNIT}
ENV container=docker
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""


def systemd_box_rootfs() -> RootFs:
    """The base layer: every file of the packages (and what they link), the docker CLI."""
    fs = RootFs()
    for top in ("bin", "lib", "lib64", "sbin"):  # merged /usr: the same links
        if os.path.islink(f"/{top}"):
            fs.entries[f"/{top}"] = Path(f"/{top}")
    for f in package_files(package_closure(PACKAGES)):
        fs.add_host(f)
    fs.add_host(DOCKER_CLI)
    # written by libpam-runtime's pam-auth-update at install, so in no package's file list
    for name in PAM_COMMON:
        fs.add_host(Path("/etc/pam.d") / name)
    have = {str(p) for p in fs.host_files()}
    for lib in ldd_closure(fs.host_files(), have):
        fs.add_host(lib)
        fs.add_host(Path(os.path.realpath(lib)))
    return fs


def build_systemd_box_image(scratch: Path, docker_gid: int) -> str:
    """Both layers, tagged :data:`TAG` (the base is removed once the image is built on it)."""
    base = TAG + "-base"
    import_image(base, systemd_box_rootfs(), labels={}, env={})
    ctx = scratch / "systemd-box-context"
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "Dockerfile").write_text(dockerfile(base, docker_gid))
    (ctx / "strix-sshd.service").write_text(SSHD_UNIT)
    (ctx / PRODUCTION_UNIT).write_text(PRODUCTION_UNIT_TEXT)
    out = subprocess.run(
        ["docker", "build", "--network", "host", "-q", "-t", TAG, str(ctx)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    remove_image(base)
    if out.returncode != 0:
        raise RuntimeError(f"docker build {TAG} failed: {out.stderr[-2000:]}")
    return TAG


# ---------------------------------------------------------------------------------------- running it


@dataclass
class SystemdBox:
    container: str
    port: int
    key: Path  # the Box user's private key
    known_hosts: Path
    conf: Path
    busybox: str = ""  # an image of this module's own for production and engines (others remove theirs)

    @property
    def url(self) -> str:
        return f"ssh://{USER}@127.0.0.1:{self.port}"

    def ssh_argv(self, command: str) -> list[str]:
        return [
            "ssh",
            "-i",
            str(self.key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-p",
            str(self.port),
            f"{USER}@127.0.0.1",
            command,
        ]

    def user_shell(self, command: str, *, check: bool = True, timeout_s: float = 60) -> str:
        """``command`` run by the Box user's shell over ssh (a logind session, as the controller's)."""
        out = subprocess.run(
            self.ssh_argv(command), capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"{command!r} exited {out.returncode}: {out.stderr[-1000:]}")
        return out.stdout

    def root(self, *argv: str, check: bool = True) -> str:
        """``argv`` run as root in the Box (docker exec): the owner's own hand, not the pipeline's."""
        out = subprocess.run(
            ["docker", "exec", self.container, *argv], capture_output=True, text=True, timeout=60, check=False
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"{argv} exited {out.returncode}: {out.stderr[-1000:]}")
        return out.stdout

    def journal(self) -> str:
        return self.root("journalctl", "-b", "--no-pager", "-n", "200", check=False)

    def wait_user_manager(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while self.root("systemctl", "is-active", f"user@{UID}.service", check=False).strip() != "active":
            if time.monotonic() > deadline:
                raise RuntimeError(f"user@{UID}.service never active:\n{self.journal()[-3000:]}")
            time.sleep(0.2)

    def unit_state(self, unit: str = PRODUCTION_UNIT) -> str:
        return self.user_shell(f"systemctl --user is-active {unit}", check=False).strip()


def _conf(directory: Path, port: int) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    host_key = keygen(directory / "host_ed25519", "strix-systemd-box-host")
    user_key = keygen(directory / "user_ed25519", "strix-systemd-box-user")
    (directory / "authorized_keys").write_text(user_key.with_suffix(".pub").read_text())
    host_pub = host_key.with_suffix(".pub").read_text().split()
    known = directory / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (directory / "sshd_config").write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {CONF_DIR}/host_ed25519",
                f"AuthorizedKeysFile {CONF_DIR}/authorized_keys",
                "AuthenticationMethods publickey",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                f"AllowUsers {USER}",
                "UsePAM yes",  # pam_systemd: each ssh session a logind session, as on a Box
                "StrictModes no",
                "PrintMotd no",
                "MaxStartups 100",
            ]
        )
        + "\n"
    )
    for p in directory.iterdir():  # sshd (root in the Box) reads them; the key stays the test's
        p.chmod(0o600 if p.name == "host_ed25519" else 0o644)
    user_key.chmod(0o600)
    return user_key, known


# how the container runs on dockerd 20.10 with cgroup v1 (found by trying): systemd as PID 1 needs
# /run and /run/lock as tmpfs and the cgroup tree mounted (read-only is enough: it creates its units'
# cgroups below the container's own); no --privileged, no port but sshd's
RUN_FLAGS = (
    "--network",
    "host",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:ro",
)


def start_systemd_box(directory: Path, image: str = TAG, timeout_s: float = 60) -> SystemdBox:
    port = free_port()
    conf = directory / "conf"
    key, known = _conf(conf, port)
    name = f"strix-test-systemd-box-{port}"
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            *RUN_FLAGS,
            "-v",
            f"{conf}:{CONF_DIR}:ro",
            "-v",
            f"{DOCKER_SOCK}:{DOCKER_SOCK}",
            image,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    box = SystemdBox(name, port, key, known, conf)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stdout
                subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
                raise RuntimeError(f"sshd in {name} never listened on {port}:\n{logs[-3000:]}") from None
            time.sleep(0.2)
    box.wait_user_manager(timeout_s)
    return box


def stop_systemd_box(box: SystemdBox) -> None:
    subprocess.run(["docker", "rm", "-f", box.container], capture_output=True, timeout=60, check=False)


def need(condition: bool, what: str, how: str) -> None:
    from conftest import need as conftest_need  # conftest imports support modules: not at import time

    conftest_need(condition, what, how)


@pytest.fixture(scope="module")
def systemd_box(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SystemdBox]:
    """A Box with systemd as init, its sshd on a free loopback port, linger on for ``bench``."""
    missing = missing_packages(PACKAGES)
    need(not missing, f"the Debian packages {', '.join(missing)}", f"apt-get install {' '.join(missing)}")
    need(
        DOCKER_CLI.is_file() and DOCKER_SOCK.exists(),
        "the docker CLI and socket",
        "apt-get install docker.io",
    )
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    scratch = tmp_path_factory.mktemp("systemd-box")
    build_systemd_box_image(scratch, DOCKER_SOCK.stat().st_gid)
    busybox = f"strix-test/systemd-box-busybox:{os.getpid()}"
    build_image(busybox, {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX, "/bin/sleep": BUSYBOX})
    box = start_systemd_box(scratch)
    box.busybox = busybox
    try:
        yield box
    finally:
        stop_systemd_box(box)
        remove_image(TAG)
        remove_image(busybox)
