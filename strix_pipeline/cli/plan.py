"""`strix plan --week`: the week's runs laid night by night into each Box's maintenance window.

Each night: production stopped once, every run with its start and end, production started again,
and what did not fit, by name, deferred to the next night. The images are the ones the weekly
schedule benchmarks (the warehouse's), the durations each series' measured history (else the default
estimate), what is already measured this week left out; with no image known yet, the configuration's
standard week (planning/week.py ``standard_images``). A host of kind ``local`` has no window and is
not planned. Nothing is started or stopped: this only reads.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from strix_pipeline.cli.common import config_of, warehouse_arg, warehouse_path
from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.outside_text import visible
from strix_pipeline.planning import measured as account
from strix_pipeline.planning import night_fit as fit
from strix_pipeline.planning.cron import fires_between
from strix_pipeline.planning.deadline import restore_lead_s
from strix_pipeline.planning.priority import STARVE_WEEKS
from strix_pipeline.planning.resolution import resolution_lines
from strix_pipeline.planning.week import Series, box_pair_runs, standard_images, this_week, week_runs
from strix_pipeline.planning.window import keeps_window, window_expr, windows
from strix_pipeline.records import ImageRecord
from strix_pipeline.runner.pair_bisect import week_lines
from strix_pipeline.runner.pair_runs import PAIR_HOST, PairSpec, pair_profile
from strix_pipeline.runner.pairs import METRICS
from strix_pipeline.warehouse import BisectionRecord, NoiseRecord, Warehouse, WarehouseError
from strix_pipeline.warehouse.past_runs import deferred_runs, history_durations, measured_runs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="the week's benchmark runs night by night, and what is deferred", description=__doc__
    )
    p.add_argument("--week", action="store_true", help="plan the week (the only plan there is, for now)")
    p.add_argument(
        "--from",
        dest="start",
        metavar="YYYY-MM-DD",
        help="the week starting at the schedule's first fire on or after this day (default: the next one)",
    )
    p.add_argument(
        "--pair-runs",
        type=int,
        default=0,
        metavar="N",
        help="extra runs per comparison by pairs on a Box (default 0: comparisons by pairs run on "
        "host local, which keeps no window)",
    )
    p.add_argument(
        "--starve-weeks",
        type=int,
        default=STARVE_WEEKS,
        metavar="N",
        help=f"a run deferred N weeks goes first (default {STARVE_WEEKS})",
    )
    warehouse_arg(p)
    p.set_defaults(func=run_plan)


class _Seen:
    """What the warehouse says, or nothing (no file yet, or it cannot be read: said in the header)."""

    def __init__(self) -> None:
        self.images: list[ImageRecord] = []
        self.rows: list[account.MeasuredRun] = []
        self.durations: dict[Series, list[float]] = {}
        self.deferred: list[account.DeferredRun] = []
        self.noise: list[NoiseRecord] = []
        self.bisections: list[BisectionRecord] = []  # the running ones
        self.note = ""


def _read(args: argparse.Namespace, config: StrixConfig) -> _Seen:
    seen = _Seen()
    try:
        with Warehouse.open_reader(warehouse_path(args), lock_retry_s=5.0) as wh:
            seen.images = wh.known_images()
            seen.rows = measured_runs(wh)
            seen.deferred = deferred_runs(wh)
            seen.noise = wh.latest_noise()
            seen.bisections = wh.list_bisections(status="running")
            for host, runs in config.runs.items():
                for r in runs:
                    key = (host, r.engine, r.model, r.profile)
                    seen.durations[key] = history_durations(wh, *key)
    except WarehouseError as e:
        seen.note = f"warehouse not read ({type(e).__name__})"
    return seen


def run_plan(args: argparse.Namespace) -> int:
    if not args.week:
        print("strix plan: say --week (the week's plan night by night)")
        return 2
    config = config_of(args)
    for line in week_text(
        config, _read(args, config), _week_start(config, args.start), args.pair_runs, args.starve_weeks
    ):
        print(visible(line))
    return 0


def _week_start(config: StrixConfig, day: str | None) -> datetime:
    tz = ZoneInfo(config.project.timezone)
    after = datetime.fromisoformat(day).replace(tzinfo=tz) if day else datetime.now(UTC)
    fires = fires_between(config.project.schedule, after, after + timedelta(days=8), config.project.timezone)
    return fires[0] if fires else after


def week_text(
    config: StrixConfig, seen: _Seen, start: datetime, pair_runs: int = 0, starve_weeks: int = STARVE_WEEKS
) -> list[str]:
    tz = ZoneInfo(config.project.timezone)
    # the week the weekly schedule asks for (planning.week.this_week), from the warehouse's images
    week = this_week(config, seen.images, [], seen.rows, start)
    source = "the warehouse's images"
    if not week.images:
        week = this_week(config, standard_images(config, start), [], seen.rows, start)
        source = "the configuration's standard week (no image known yet)"
    since, waited = account.deferral_ages(seen.deferred, start)
    runs = week_runs(
        config,
        week.images,
        seen.durations,
        waited=waited,
        measured=week.measured,
        pair_runs=pair_runs,
        deferred_since=since,
    )
    out = [
        f"week of {start.astimezone(tz):%a %Y-%m-%d %H:%M} ({config.project.timezone}): {source}"
        + (f"; {seen.note}" if seen.note else ""),
        f"a run deferred {starve_weeks} week(s) goes first; "
        f"{pair_runs or box_pair_runs(config)} extra run(s) per comparison",
    ]
    for host_name, host in config.hosts.items():
        mine = [r for r in runs if r.host == host_name]
        if not keeps_window(host) or not mine:
            continue
        nights = windows(host, config.project.schedule, start, start + account.WEEK, config.project.timezone)
        # the runs end by the restore's time, the one the runner stops them at (planning/deadline.py)
        lead = restore_lead_s(host.production)
        plan = fit.plan_week(mine, nights, restart_s=lead, starve_weeks=starve_weeks)
        expr = window_expr(host, config.project.schedule)
        out += [
            "",
            f"host {host_name}: {len(mine)} runs, window {expr!r} + {host.maintenance_window_hours:g} h",
        ]
        for n, night in enumerate(plan.nights, 1):
            out += _night_text(n, night, host, tz, n < len(plan.nights))
        stops = sum(1 for night in plan.nights if night.production_down)
        placed = sum(len(night.slots) for night in plan.nights)
        left = ", ".join(r.name for r in plan.left) or "none"
        out += [
            f"  week: {placed} of {len(mine)} runs over {len(plan.nights)} night(s), production stopped "
            f"{stops} time(s) (once per night); left for next week: {left}"
        ]
    a = config.analysis
    return (
        out
        + pairs_text(config, seen.noise)
        + week_lines(seen.bisections, a.compare_max_pairs, a.bisect_max_pairs)
    )


def pairs_text(config: StrixConfig, noise: list[NoiseRecord]) -> list[str]:
    """What a comparison by pairs on host local can resolve at the configured target and cap, from
    this machine's measured noise (planning/resolution.py): said before the week spends its runs."""
    target, cap = config.analysis.compare_target, config.analysis.compare_max_pairs
    head = f"comparisons by pairs on {PAIR_HOST} (llamacpp), target ±{target:.0%}, cap {cap} pairs"
    mine = [f for f in noise if (f.host, f.engine) == (PAIR_HOST, "llamacpp")]
    if not mine:
        return ["", f"{head}: no noise measured on this machine yet (the weekly canary's runs measure it)"]
    profile = config.profiles.get(pair_profile(config))
    levels = {"prefill_tokens_per_s": PairSpec.of(profile).prefill_tokens} if profile else {}
    targets = {m: spec.target(target) for m, spec in METRICS.items()}
    return ["", f"{head}:"] + [
        f"  {line}" for line in resolution_lines(mine, PAIR_HOST, "llamacpp", targets, cap, levels)
    ]


def _night_text(n: int, night: fit.Night, host: DockerHostConfig, tz: ZoneInfo, more: bool) -> list[str]:
    w = night.window
    out = [f"  night {n}: {w.start.astimezone(tz):%a %Y-%m-%d %H:%M}-{w.end.astimezone(tz):%H:%M}"]
    if night.production_down is None:
        out.append("    nothing fits: production not stopped")
    else:
        prod = (
            host.production.container or "production" if host.production else "production (none configured)"
        )
        out.append(
            f"    {night.production_down.astimezone(tz):%H:%M}        stop {prod} (once for the night)"
        )
        for s in night.slots:
            tag = " [canary]" if s.run.canary else ""
            out.append(
                f"    {s.start.astimezone(tz):%H:%M}-{s.end.astimezone(tz):%H:%M}  {s.run.name}{tag}"
                f"  ({s.run.estimate.seconds / 60:.0f} min, {s.run.estimate.basis})"
            )
        last = night.slots[-1].end.astimezone(tz)
        out.append(
            f"    {last:%H:%M}        start {prod} again, healthy by "
            f"{night.production_up.astimezone(tz):%H:%M}"
        )  # type: ignore[union-attr]
    if night.deferred:
        where = "the next night" if more else "next week"
        out.append(
            f"    deferred to {where} ({len(night.deferred)}): " + ", ".join(r.name for r in night.deferred)
        )
    return out
