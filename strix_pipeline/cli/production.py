"""`strix production show`: what production runs on each Box, read there read-only (``docker inspect``
of its container, or ``systemctl show`` of its unit over ssh), and the baseline run it gives. The read
is stored (warehouse ``production_reads``), so `strix doctor` can say when production changed."""

from __future__ import annotations

import argparse
import shlex
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from strix_pipeline.cli.common import as_markup, config_of, error, on_warehouse, shown, warehouse_arg
from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.hosts.box.production_read import read_production
from strix_pipeline.hosts.docker.host import make_client
from strix_pipeline.hosts.docker.ssh import client_transport
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.planning.production_baseline import (
    ProductionBaseline,
    ProductionRead,
    ProductionReadError,
    derive_baseline,
)
from strix_pipeline.planning.production_target import baseline_choice
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.production_reads import ProductionReadRecord


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "production", help="production as deployed on a Box: what it runs, the baseline it gives"
    )
    psub = p.add_subparsers(dest="production_command", metavar="COMMAND")
    s = psub.add_parser(
        "show",
        help="read production (read-only) and print it with the baseline it gives",
        description="Reads each Docker host's production over the pipeline's own access (docker inspect of "
        "its container, systemctl show of its unit over ssh), changes nothing there, prints what was read "
        "and the baseline run it gives, and stores the read so `strix doctor` can say when it changed.",
    )
    s.add_argument("--host", action="append", help="only this host (repeatable; default: every Docker host)")
    warehouse_arg(s)
    s.set_defaults(func=run_show)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def production_hosts(config: StrixConfig, only: list[str] | None) -> list[str]:
    return [
        h
        for h, cfg in config.hosts.items()
        if isinstance(cfg, DockerHostConfig) and cfg.production is not None and (not only or h in only)
    ]


def read_host(config: StrixConfig, host: str) -> ProductionRead:
    """``host``'s production, read over a client of its own (closed again)."""
    cfg = config.docker_config(host)
    assert cfg.production is not None
    client = make_client(cfg, timeout_s=30)
    try:
        transport = client_transport(client)
        return read_production(cfg.production, client, transport.target if transport else None)
    finally:
        client.close()


def read_table(host: str, read: ProductionRead) -> Table:
    t = Table(title=f"production on {host}: what was read ({read.kind} {read.name})")
    t.add_column("what")
    t.add_column("value", overflow="fold")
    t.add_row("image", shown(read.image or "-"))
    t.add_row("image digest", shown(read.image_digest or "- (a binary)"))
    t.add_row("command", shown(shlex.join(read.argv)))
    t.add_row("environment", shown("\n".join(read.env) or "-"))
    t.add_row("mounts", shown("\n".join(f"{m.source} -> {m.destination}" for m in read.mounts) or "-"))
    t.add_row("devices", shown(", ".join(read.devices) or "-"))
    if read.image is None:  # a binary: the build its --version gave
        t.add_row(
            "build", shown(f"{read.build or '- (its --version names none)'} ({read.build_backend or '-'})")
        )
    t.add_row("read digest", shown(read.digest))
    return t


def baseline_table(host: str, base: ProductionBaseline) -> Table:
    t = Table(title=f"the baseline it gives on {host}: {base.source}")
    t.add_column("setting")
    t.add_column("value", overflow="fold")
    t.add_row("image", shown(base.image_ref or f"the matching engine build ({base.build or 'build unread'})"))
    t.add_row("backend", base.backend)
    t.add_row("model file on the host", shown(base.model_on_host))
    for label, value in base.settings:
        t.add_row(label, shown(value))
    t.add_row("flags", shown(shlex.join(base.flags)))
    for c in base.changes:
        t.add_row(f"changed: {c.what}", shown(f"{c.production or '(set)'} -> {c.baseline} ({c.why})"))
    if not base.changes:
        t.add_row("changed", "nothing (the run adds --host and --port)")
    return t


def run_show(args: argparse.Namespace) -> int:
    config = config_of(args)
    hosts = production_hosts(config, args.host)
    if not hosts:
        return error(
            "no Docker host with a [hosts.<name>.production] to read" + (" among --host" if args.host else "")
        )
    console = Console()
    console.print(f"the decision's baseline: {baseline_choice(config)}")
    records: list[ProductionReadRecord] = []
    rc = 0
    for host in hosts:
        try:
            read = read_host(config, host)
            base = derive_baseline(read)
        except (ProductionReadError, EngineStartError) as e:
            rc = error(f"host {host}: {e}")
            continue
        console.print(read_table(host, read))
        console.print(baseline_table(host, base))
        records.append(ProductionReadRecord(host, datetime.now(UTC), read.digest, read.to_json()))

    def keep(wh: Warehouse) -> None:
        for row in records:
            wh.save_production_read(row)

    if records:
        _, stored = on_warehouse(args, keep, "storing the read", read_only=False)
        if not stored:
            console.print(
                as_markup(f"stored {len(records)} read(s); `strix doctor` compares the next with them")
            )
        rc = rc or stored
    return rc
