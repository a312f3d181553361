"""`strix controller`: the controller as a service (controller_service.py) and what its set-up needs.

``strix controller install --user`` writes the systemd user units of the Dagster webserver and
daemon for this checkout; ``strix controller needs-local-engine`` exits 0 only when a host of kind
``local`` has runs (`make controller` builds the embedded llama-server then, never otherwise).
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from strix_pipeline.cli.common import config_of, error
from strix_pipeline.controller_service import Controller, install

CHECKOUT = Path(__file__).resolve().parents[2]  # strix_pipeline/cli/controller.py -> the checkout


def run_install(args: argparse.Namespace) -> int:
    if not args.user:
        return error("only --user units are written (a system unit: copy them and add User=)")
    config = args.config or os.environ.get("STRIX_CONFIG")
    controller = Controller(
        checkout=CHECKOUT,
        dagster_home=Path(args.dagster_home or CHECKOUT / ".dagster").resolve(),
        host=args.host,
        port=args.port,
        config=Path(config).resolve() if config else None,
    )
    try:
        said = install(
            controller,
            unit_dir=Path(args.unit_dir) if args.unit_dir else None,
            reload=not args.no_reload,
            enable=args.enable,
        )
    except (ValueError, OSError, subprocess.SubprocessError) as e:
        return error(str(e))
    for line in said:
        print(line)
    return 0


def needs_local_engine(args: argparse.Namespace) -> int:
    config = config_of(args)
    local = [h for h, cfg in config.hosts.items() if cfg.kind == "local" and config.runs.get(h)]
    print(
        f"host(s) of kind local with runs: {', '.join(local)}" if local else "no host of kind local has runs"
    )
    return 0 if local else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("controller", help="the controller as a systemd service")
    own = p.add_subparsers(dest="controller_command", metavar="ACTION", required=True)
    i = own.add_parser(
        "install",
        help="write the Dagster webserver and daemon units (systemd --user) for this checkout",
        description="Write strix-dagster-webserver.service and strix-dagster-daemon.service to "
        "~/.config/systemd/user, pointing at this checkout's .venv, with DAGSTER_HOME, STRIX_CONFIG (when "
        "given) and Restart=on-failure; secrets come from ~/.config/strix-pipeline/controller.env.",
    )
    i.add_argument("--user", action="store_true", help="systemd user units (the only kind written)")
    i.add_argument(
        "--dagster-home", help="the Dagster instance directory (default: .dagster in the checkout)"
    )
    i.add_argument("--host", default="127.0.0.1", help="where the UI listens (default 127.0.0.1)")
    i.add_argument("--port", type=int, default=3000, help="the UI's port (default 3000)")
    i.add_argument("--unit-dir", help="write the units here instead of ~/.config/systemd/user")
    i.add_argument("--no-reload", action="store_true", help="do not run systemctl --user daemon-reload")
    i.add_argument("--enable", action="store_true", help="enable and start them now")
    i.set_defaults(func=run_install)
    n = own.add_parser(
        "needs-local-engine",
        help="exit 0 when a host of kind local has runs (the embedded llama-server is needed)",
    )
    n.set_defaults(func=needs_local_engine)
