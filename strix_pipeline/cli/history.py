"""`strix history`: benchmark N releases of a local engine spread over the package index's history.

The releases come from the index pip installs from (registry/index_discovery.py); which ones, from
strix_pipeline.planning.release_spread. Each is one partition of ``benchmark_run``, run through Dagster by
`strix run`'s process and recorded as one backfill the UI shows; the analysis runs once after the
last. A release that cannot be built or started here is a failed run with its reason, not the end of
the history.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strix_pipeline.cli.run import run as run_partitions
from strix_pipeline.config import StrixConfig, config_path
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.release_spread import HistoryError, VersionChoice, choose
from strix_pipeline.planning.targets import local_engines, partition_key
from strix_pipeline.records import ImageRecord
from strix_pipeline.registry.errors import RegistryError
from strix_pipeline.registry.index_discovery import INDEX_PACKAGES, index_images
from strix_pipeline.warehouse import Warehouse, WarehouseMissing

DEFAULT_VERSIONS = "4"


def index_releases(config: StrixConfig, engine: str) -> list[ImageRecord]:
    """The engine's releases on the package index, as host local's image versions."""
    kind = config.engines[engine].kind
    if kind not in INDEX_PACKAGES:
        raise HistoryError(f"engine {engine} ({kind}) has no releases on a package index")
    return index_images(engine, kind, datetime.now(UTC))


def chosen_partitions(config: StrixConfig, args: argparse.Namespace) -> list[tuple[str, ImageRecord]]:
    local = local_engines(config)
    engines = args.engine or list(local)
    unknown = [e for e in engines if e not in local]
    if unknown:
        raise HistoryError(
            f"engine(s) {', '.join(unknown)} not configured on a local host (have: {', '.join(local)})"
        )
    out = []
    for engine in engines:
        versions = VersionChoice.parse(getattr(args, f"versions_{engine}", None) or args.versions)
        since_text = getattr(args, f"since_{engine}", None) or args.since
        since = datetime.fromisoformat(since_text).replace(tzinfo=UTC) if since_text else None
        for image in choose(index_releases(config, engine), engine, versions, since):
            out.append((partition_key(engine, image), image))
    return out


# One row per run of the history's partitions: what the closing table of a history shows.
HISTORY_SQL = """
SELECT r.engine, r.image_version AS release, r.image_digest AS digest, i.created AS uploaded, r.status,
       t.ttft_p95_ms, t.output_tokens_per_s, r.decode_efficiency, r.held_gib, r.failure_reason
FROM v_runs r
LEFT JOIN images i ON i.digest = r.image_digest AND i.tag = r.image_version
LEFT JOIN v_ttft_at_concurrency t
  ON t.run_id = r.run_id AND t.scenario = 'concurrency_sweep' AND t.concurrency = 5
WHERE list_contains(?, r.image_digest)
ORDER BY r.engine, r.image_sort_key, r.started_at
"""


def history(args: argparse.Namespace) -> int:
    console = Console()
    path = str(Path(args.config or config_path()).resolve())
    config = load_config(path)
    try:
        chosen = chosen_partitions(config, args)
    except (HistoryError, RegistryError, ValueError) as e:
        console.print(f"[red]strix history: {e}[/]", soft_wrap=True)
        return 2
    table = Table(title="strix history: releases chosen")
    for col in ("engine", "release", "uploaded", "partition"):
        table.add_column(col)
    for key, image in chosen:
        uploaded = f"{image.created:%Y-%m-%d}" if image.created else "?"
        table.add_row(image.engine, image.tag, uploaded, key)
    console.print(table)
    if args.dry_run:
        return 0
    engines = sorted({i.engine for _, i in chosen})
    title = f"history {' '.join(engines)}: {len(chosen)} releases"
    code = run_partitions(
        argparse.Namespace(config=path, partition=[k for k, _ in chosen], engine=None, history=title)
    )
    rows = print_history(console, config, [i.digest for _, i in chosen])
    if code and history_complete(rows, [i.digest for _, i in chosen]):
        console.print(
            "strix history: every release is recorded; the ones that did not run here are failed runs "
            "with their reason (above), as the support matrix shows them",
            soft_wrap=True,
        )
        return 0
    return code


def history_complete(rows: list[dict], digests: list[str]) -> bool:
    """A history did its job when each release has a run, some measured, and each one that did not is
    a start or serve failure with its reason: a release that cannot run here is data. A harness error
    (status ``error``) or a release with no run at all is not."""
    by_digest = {r["digest"]: r for r in rows}
    if set(digests) - set(by_digest):
        return False
    if not any(r["status"] in ("ok", "partial") for r in rows):
        return False
    return all(
        r["status"] in ("ok", "partial") or (r["status"].startswith("failed_") and r["failure_reason"])
        for r in rows
    )


def print_history(console: Console, config: StrixConfig, digests: list[str]) -> list[dict]:
    try:
        with Warehouse.open_reader(config.warehouse_target()) as wh:
            rows = wh.query_df(HISTORY_SQL, [digests]).to_dicts()
    except WarehouseMissing:
        return []
    table = Table(title="strix history: at 5 clients, and the single-client share of the bandwidth limit")
    for col in (
        "engine",
        "release",
        "uploaded",
        "status",
        "TTFT p95 ms",
        "tok/s",
        "efficiency",
        "held GiB",
        "reason",
    ):
        table.add_column(col)

    def num(v, fmt: str) -> str:
        return format(v, fmt) if v is not None else "-"

    for r in rows:
        table.add_row(
            r["engine"],
            r["release"] or "?",
            f"{r['uploaded']:%Y-%m-%d}" if r["uploaded"] else "?",
            r["status"],
            num(r["ttft_p95_ms"], ".0f"),
            num(r["output_tokens_per_s"], ".1f"),
            num(r["decode_efficiency"], ".3f"),
            num(r["held_gib"], ".2f"),
            (r["failure_reason"] or "")[:160],
        )
    console.print(table)
    console.print("change points: strix changes · charts: the run's charts/index.html", soft_wrap=True)
    return rows


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "history",
        help="benchmark releases of the local engines spread over the package index's history",
        description=__doc__,
    )
    p.add_argument("--engine", action="append", help="this local engine only (repeatable; default: all)")
    p.add_argument(
        "--versions",
        default=DEFAULT_VERSIONS,
        help="how many releases (newest, oldest and evenly spaced between; default 4) or which: "
        "b10333,b11434",
    )
    for engine in ("llamacpp", "vllm"):
        p.add_argument(
            f"--versions-{engine}",
            dest=f"versions_{engine}",
            help=f"--versions for {engine} only (make history: --versions-vllm 3)",
        )
        p.add_argument(f"--since-{engine}", dest=f"since_{engine}", help=f"--since for {engine} only")
    p.add_argument("--since", help="only releases uploaded since this date (YYYY-MM-DD)")
    p.add_argument("--dry-run", action="store_true", help="show the releases chosen, benchmark nothing")
    p.set_defaults(func=history)
