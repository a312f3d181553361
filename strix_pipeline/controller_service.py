"""The controller as a service: systemd units for the Dagster webserver and daemon of this checkout.

:func:`render_units` writes two units that run this checkout's venv (``<checkout>/.venv/bin``) with
``DAGSTER_HOME`` set, restarted on failure; :func:`install` puts them in the user's systemd directory
(``~/.config/systemd/user``), copies the project's ``dagster.yaml`` into ``DAGSTER_HOME`` when it has
none, and reloads the user's manager. A user's services stop when the user's last session ends unless
linger is on (``loginctl enable-linger``): :func:`install` says so when it is off.

Secrets (the Box's ssh user, the webhook, a DuckLake DSN) are read from an optional environment file,
``~/.config/strix-pipeline/controller.env`` (``KEY=value`` lines), never written into the units.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

WEBSERVER = "strix-dagster-webserver.service"
DAEMON = "strix-dagster-daemon.service"
ENV_FILE = "%h/.config/strix-pipeline/controller.env"  # systemd's %h: the user's home


@dataclass(frozen=True)
class Controller:
    """Where the controller runs from: the checkout, its venv, its Dagster instance, where it listens
    and (optionally) the configuration file it reads."""

    checkout: Path
    dagster_home: Path
    host: str = "127.0.0.1"  # loopback unless asked: the UI can launch runs that stop production
    port: int = 3000
    config: Path | None = None  # STRIX_CONFIG; None: ./strix.toml in the checkout, else the embedded one

    @property
    def bin(self) -> Path:
        return self.checkout / ".venv" / "bin"

    def exec_paths(self) -> list[Path]:
        return [self.bin / "dagster-webserver", self.bin / "dagster-daemon"]


def _unit(description: str, c: Controller, exec_start: str) -> str:
    env = [f"DAGSTER_HOME={c.dagster_home}"] + ([f"STRIX_CONFIG={c.config}"] if c.config else [])
    return "\n".join(
        [
            "[Unit]",
            f"Description={description}",
            "After=network-online.target",
            "Wants=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            f"WorkingDirectory={c.checkout}",
            *(f"Environment={e}" for e in env),
            f"EnvironmentFile=-{ENV_FILE}",
            f"ExecStart={exec_start}",
            "Restart=on-failure",
            "RestartSec=10",
            # a run in flight is the daemon's child: its engine and production restore need their time
            "TimeoutStopSec=120",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def render_units(c: Controller) -> dict[str, str]:
    """The two units' names and text."""
    workspace = c.checkout / "workspace.yaml"
    web, daemon = c.exec_paths()
    return {
        WEBSERVER: _unit(
            "strix-pipeline controller: Dagster webserver (UI)",
            c,
            f"{web} -h {c.host} -p {c.port} -w {workspace}",
        ),
        DAEMON: _unit(
            "strix-pipeline controller: Dagster daemon (schedules, sensors, run queue)",
            c,
            f"{daemon} run -w {workspace}",
        ),
    }


def user_unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def linger_on(user: str) -> bool | None:
    """Whether the user's manager outlives their sessions (``loginctl``); None: not known."""
    try:
        out = subprocess.run(
            ["loginctl", "show-user", user, "--property=Linger", "--value"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = out.stdout.strip()
    return {"yes": True, "no": False}.get(value)


def install(
    c: Controller, *, unit_dir: Path | None = None, reload: bool = True, enable: bool = False
) -> list[str]:
    """Writes the units (and ``dagster.yaml`` into ``DAGSTER_HOME`` when missing); reloads the user's
    manager and, with ``enable``, starts them now and at boot. Returns what it did, line by line.
    Refuses (ValueError) when the venv's executables are not there."""
    missing = [str(p) for p in c.exec_paths() if not p.exists()]
    if missing:
        raise ValueError(f"not in this checkout's venv: {', '.join(missing)} (run `make controller` first)")
    unit_dir = unit_dir or user_unit_dir()
    unit_dir.mkdir(parents=True, exist_ok=True)
    said = []
    for name, text in render_units(c).items():
        (unit_dir / name).write_text(text)
        said.append(f"wrote {unit_dir / name}")
    c.dagster_home.mkdir(parents=True, exist_ok=True)
    instance = c.dagster_home / "dagster.yaml"
    if not instance.exists():
        shutil.copyfile(c.checkout / "strix_dagster" / "dagster.yaml", instance)
        said.append(f"wrote {instance}")
    names = list(render_units(c))
    if reload:
        subprocess.run(["systemctl", "--user", "daemon-reload"], check=True, timeout=60)
        said.append("systemctl --user daemon-reload")
    if enable:
        subprocess.run(["systemctl", "--user", "enable", "--now", *names], check=True, timeout=120)
        said.append(f"enabled and started {', '.join(names)}")
    else:
        said.append(f"start them: systemctl --user enable --now {' '.join(names)}")
    user = os.environ.get("USER") or Path.home().name
    if linger_on(user) is not True:
        said.append(
            f"linger is not on for {user}: the controller stops when your last session ends; "
            f"turn it on: sudo loginctl enable-linger {user}"
        )
    return said
