"""`strix decide [--json]`, `strix changes`, `strix ack ID --reason TEXT`."""

from __future__ import annotations

import argparse
import dataclasses
import json

from rich.console import Console
from rich.table import Table

from strix_pipeline.analysis.bisect.steps import steps_text, summary
from strix_pipeline.analysis.decision import Decision, evaluate, format_value, matchup_rows, reproduce
from strix_pipeline.analysis.floor import MEASURED, magnitude_floor, measured_noise_for
from strix_pipeline.analysis.series import Series, detection_points, load_series
from strix_pipeline.cli.common import config_of, error, on_warehouse, open_reader, shown, warehouse_arg
from strix_pipeline.cli.compare import comparison_table
from strix_pipeline.config import ChangeDetectionConfig, StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.warehouse import BisectionRecord, ComparisonRecord, NoiseRecord, Warehouse

LATEST_COMPARISONS = 3  # comparisons by pairs `strix changes` shows, newest first

STATUS_STYLE = {"pass": "green", "fail": "red", "unknown": "dim"}


def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser(
        "decide",
        help="evaluate the switch criteria and print the verdict with its evidence",
        description="Evaluate C1-C5 on the decision host from the warehouse (read-only unless --save).",
    )
    d.add_argument("--json", action="store_true", help="print the decision as JSON")
    d.add_argument("--save", action="store_true", help="store this evaluation in the decision history")
    d.add_argument(
        "--evaluation",
        metavar="ID",
        help="recompute the stored evaluation ID from the warehouse (at its evaluated_at) and check it "
        "equals what was stored; exit 1 and list the differences when it does not",
    )
    warehouse_arg(d)
    d.set_defaults(func=run_decide)

    c = sub.add_parser("changes", help="list the change points found on the trend series")
    c.add_argument("--all", action="store_true", help="include acknowledged changes")
    c.add_argument("--json", action="store_true", help="print JSON")
    warehouse_arg(c)
    c.set_defaults(func=run_changes)

    a = sub.add_parser("ack", help="acknowledge a change point with a reason (it stays, marked)")
    a.add_argument("change_id", metavar="ID", help="the change id (see `strix changes`)")
    a.add_argument("--reason", required=True, help="why this change is expected or accepted")
    warehouse_arg(a)
    a.set_defaults(func=run_ack)


def print_decision(d: Decision, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"Switch decision on {d.host}: {d.label.upper()} — {d.reason}", show_lines=True)
    for col in (
        "id",
        "criterion",
        "req.",
        "status",
        "value",
        "threshold",
        "CI",
        "quant ≠",
        "first held",
        "evidence",
        "reason",
    ):
        table.add_column(col, overflow="fold")
    for c in d.criteria:
        ci = (
            f"{format_value(c.ci_low, c.unit)}–{format_value(c.ci_high, c.unit)}"
            if c.ci_low is not None
            else "–"
        )
        evidence = "\n".join(c.evidence_run_ids + [g[:19] for g in c.image_digests]) or "–"
        table.add_row(
            c.criterion,
            c.name,
            "yes" if c.required else "no",
            f"[{STATUS_STYLE.get(c.status, '')}]{c.status}[/]",
            format_value(c.value, c.unit),
            format_value(c.threshold, c.unit),
            ci,
            "yes" if c.quantization_mismatch else "no",
            f"{c.first_held_at:%Y-%m-%d}" if c.first_held_at else "–",
            evidence,
            c.reason,
        )
    console.print(table)
    matchups = matchup_rows(d)
    if matchups:
        both = Table(
            title="C3 and C5 on both match-ups (production: each engine's production format; "
            "equal weights: the baseline serving the candidate's weights)"
        )
        for col in ("criterion", "match-up", "decides", "status", "value", "CI", "runs"):
            both.add_column(col, overflow="fold")
        for p in matchups:
            both.add_row(
                p.criterion,
                p.label,
                "yes" if p.decides else "no",
                f"[{STATUS_STYLE.get(p.status, '')}]{p.status}[/]",
                format_value(p.value, p.unit),
                p.interval,
                "\n".join(p.run_ids) or "–",
            )
        console.print(both)
    if d.previous_verdict is not None:
        note = " (changed)" if d.verdict_changed else ""
        console.print(f"previous verdict: {d.previous_verdict}{note}")


def run_decide(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.evaluation:
        return run_reproduce(args, config)

    def decide(wh: Warehouse) -> Decision:
        d = evaluate(wh, config)
        if args.save:
            wh.save_decision(d.criteria)
        return d

    d, rc = on_warehouse(args, decide, read_only=not args.save, opener=open_reader)
    if d is None:
        return rc
    if args.json:
        print(json.dumps(d.to_json(), indent=2))
    else:
        print_decision(d)
    return 0


def run_reproduce(args: argparse.Namespace, config: StrixConfig) -> int:
    """`strix decide --evaluation ID`: replay a stored evaluation; 0 when it equals the stored one."""
    if args.save:
        return error("--evaluation replays a stored evaluation; it does not --save")

    def replay(wh: Warehouse) -> tuple[Decision, Decision, list[str]] | None:
        try:
            return reproduce(wh, config, args.evaluation)
        except KeyError:
            return None

    done, rc = on_warehouse(args, replay, opener=open_reader)
    if rc:
        return rc
    if done is None:
        return error(f"no stored evaluation with id {args.evaluation!r}")
    stored, again, diffs = done
    if args.json:
        out = {"evaluation_id": stored.evaluation_id, "reproduced": not diffs, "differences": diffs}
        print(json.dumps(out | {"recomputed": again.to_json()}, indent=2))
    else:
        print_decision(again)
        if diffs:
            print(f"evaluation {stored.evaluation_id} does NOT reproduce ({len(diffs)} difference(s)):")
            for line in diffs:
                print(f"  {line}")
        else:
            print(
                f"evaluation {stored.evaluation_id} ({stored.evaluated_at:%Y-%m-%d %H:%M:%S} UTC) "
                "reproduces: "
                f"verdict {stored.label}, every criterion equal"
            )
    return 1 if diffs else 0


def run_changes(args: argparse.Namespace) -> int:
    def read(wh: Warehouse):
        searches = {b.change_id: (b, steps_text(wh, b)) for b in wh.list_bisections() if b.change_id}
        return (
            wh.list_changes(ack_status=None if args.all else "active"),
            load_series(wh),
            searches,
            # a warehouse before schema v11, opened read-only, is not migrated: it has no comparisons
            wh.list_comparisons(limit=LATEST_COMPARISONS) if "comparisons" in wh.table_names() else [],
            wh.latest_noise() if "noise_figures" in wh.table_names() else [],
        )

    got, rc = on_warehouse(args, read, opener=open_reader)
    if got is None:
        return rc
    rows, series, searches, compared, noise = got
    if args.json:
        out = []
        for r in rows:
            found = searches.get(r.change_id)
            bisection = dataclasses.asdict(found[0]) | {"steps": found[1]} if found else None
            out.append(dataclasses.asdict(r) | {"bisection": bisection})
        print(json.dumps(out, indent=2, default=str))
        return 0
    print_noise(noise)
    if not rows:
        print_no_changes(series, config_of(args).change_detection, noise, unacknowledged_only=not args.all)
        print_comparisons(compared)
        return 0
    table = Table(title="Change points" + ("" if args.all else " (unacknowledged)"))
    for col in (
        "id",
        "engine",
        "host",
        "scenario",
        "level",
        "metric",
        "before → after",
        "change",
        "p",
        "status",
        "ack",
        "host drift / canary",
        "bisection",
    ):
        table.add_column(col, overflow="fold")
    for r in rows:
        found = searches.get(r.change_id)
        # every cell from the warehouse is text, never rich markup (a version is a registry's string)
        cells = (
            r.change_id,
            r.engine,
            r.host,
            r.scenario,
            str(r.level),
            r.metric,
            f"{r.version_before} → {r.version_after}",
            f"{r.magnitude_pct:+.1f}%" if r.magnitude_pct is not None else "–",
            f"{r.pvalue:.1g}" if r.pvalue is not None else "–",
            r.status,
            r.ack_status + (f": {r.ack_reason}" if r.ack_reason else ""),
            r.host_drift or (f"beside: {r.canary_moved}" if r.canary_moved else "–"),
            bisection_cell(*found) if found else "–",
        )
        table.add_row(*(shown(c) for c in cells))
    Console().print(table)
    print_comparisons(compared)
    return 0


def print_noise(rows: list[NoiseRecord]) -> None:
    """Each series' run-to-run noise as its canary measured it, and the smallest step a comparison by
    3 / 5 / 10 pairs sees at it; or why there is none yet."""
    console = Console()
    if not rows:
        console.print(
            "Run-to-run noise: not measured yet (the canary needs three runs of its release: "
            "[analysis] canary, one a week)"
        )
        return
    first = rows[0]
    table = Table(
        title=f"Run-to-run noise, from the canary's latest runs ({first.computed_at:%Y-%m-%d %H:%M} UTC)"
    )
    for col in (
        "host",
        "canary",
        "scenario",
        "level",
        "metric",
        "runs",
        "CV",
        "step seen at 3 / 5 / 10 pairs",
    ):
        table.add_column(col, overflow="fold")
    for r in rows:
        cells = (
            r.host,
            f"{r.engine} {r.version}",
            r.scenario,
            str(r.level),
            r.metric,
            str(r.runs),
            f"{r.cv:.1%}",
            r.steps_text,
        )
        table.add_row(*(shown(c) for c in cells))
    console.print(table)


def print_comparisons(rows: list[ComparisonRecord]) -> None:
    """The latest comparisons by pairs (`strix compare`), a table each, newest first."""
    by_id: dict[str, list[ComparisonRecord]] = {}
    for r in rows:
        by_id.setdefault(r.comparison_id, []).append(r)
    console = Console()
    for cid, metrics in by_id.items():
        first = metrics[0]
        title = f"Comparison {cid} on {first.host} ({first.engine}), {first.started_at:%Y-%m-%d %H:%M} UTC"
        console.print(comparison_table(metrics, title))


def bisection_cell(b: BisectionRecord, steps: list[str]) -> str:
    """The bisection of a change: what it found, then each step (release, figure, interval, side)."""
    return "\n".join([summary(b), *steps])


def print_no_changes(
    series: list[Series], cfg: ChangeDetectionConfig, noise: list[NoiseRecord], *, unacknowledged_only: bool
) -> None:
    """ "None", with why: each series looked at, its versions, the noise of one of its points (a weekly
    mean) and the smallest step that would have counted there (max(min_magnitude_pct, noise_multiple x
    noise): floor.magnitude_floor); the caption says how many floors rest on the canary's
    measured figure rather than the series' own noise."""
    console = Console()
    what = "unacknowledged change points" if unacknowledged_only else "change points"
    looked = [s for s in series if len({p.version for p in s.points}) >= 2]
    console.print(
        f"No {what} found in {len(looked)} series with two or more versions ({len(series)} series in all)."
    )
    if not looked:
        console.print("A change point needs a series with runs of at least two versions: run strix history.")
        return
    table = Table(title="What was looked at: the noise that would hide a step")
    for col in (
        "engine",
        "host",
        "scenario",
        "level",
        "metric",
        "versions",
        "noise",
        "smallest step counted",
    ):
        table.add_column(col, overflow="fold")
    from_canary = 0
    for s in sorted(looked, key=lambda s: (s.engine, s.host, s.scenario, s.level, s.metric)):
        measured = measured_noise_for(s, noise)
        floor = magnitude_floor(
            detection_points(s.points),
            cfg,
            measured.cv if measured else None,
            measured.runs if measured else None,
        )
        from_canary += floor.source == MEASURED
        table.add_row(
            s.engine,
            s.host,
            s.scenario,
            str(s.level),
            s.metric,
            str(len({p.version for p in s.points})),
            f"{floor.noise_pct:.1f}%",
            f"{floor.pct:.1f}%",
        )
    # a column more would fold the figures on an 80-column terminal: which noise is which, in words
    table.caption = (
        "noise of one point (the mean of one release's runs in one week; a run while a series has "
        f"fewer than three such means): for {from_canary} series the canary's CV of one run (the noise "
        "table above, same host, scenario, level and metric) / √(runs a point), for the others the "
        "series' own"
    )
    console.print(table)


def run_ack(args: argparse.Namespace) -> int:
    if not args.reason.strip():
        return error("--reason must say why")
    found, rc = on_warehouse(
        args, lambda wh: wh.ack_change(args.change_id, args.reason.strip()), read_only=False
    )
    if rc:
        return rc
    if not found:
        return error(f"no change with id {args.change_id!r} (see `strix changes --all`)")
    print(f"acknowledged {args.change_id}: {args.reason.strip()}")
    return 0
