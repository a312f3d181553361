"""`strix compare A B`: release B against release A by pairs on host local, each metric's verdict.

A and B run in balanced random AB/BA pairs, a fresh llama-server per run with one warm-up request
discarded (runner/pairs.py, runner/pair_runs.py); after 3, then 5, then 10 pairs, doubling on to the
cap (``--cap``, default ``[analysis] compare_max_pairs``; 160 climbs 10 -> 20 -> 40 -> 80 -> 160, the
significance level spent across the looks) each metric's paired ratio B/A is judged (stats/paired.py,
docs/comparing.md): *different* (the interval excludes 1 and the step is at least half
``--target``), *within +-target* (two one-sided tests at the look's alpha: the 1 - 2 alpha interval
lies within +-``--target``), or *unknown*, which runs more pairs; still unknown at the cap, it is
*inconclusive* with the interval reached. The comparison's verdict is its primary metric's
(``--primary``, default the first judged), wrong with probability <= alpha over all looks; the other
metrics are descriptive, and so is TTFT at several clients on a 2-core host (runner/pair_model.py
``descriptive_only``: it never decides there). A side scoring lower on the evaluation set with
confidence is *different (quality)* whatever its speed; one whose runs fail more often with
confidence is *different (fails more)*; a verdict is void when a busy host excluded one side's runs
more often. The comparison is
stored (tables ``comparisons``, ``comparison_runs``; view ``v_comparisons``) and `strix changes`
lists the latest. A and B are releases this machine has a build of (``b11434`` or ``11434.0.0``):
the installed llama-server and the releases built into the cache.
"""

from __future__ import annotations

import argparse
import os
import time

import duckdb
from rich.console import Console
from rich.table import Table

from strix_pipeline.cli.common import config_of, open_reader, open_warehouse, shown, warehouse_arg
from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.resolution import resolution_lines
from strix_pipeline.runner.pair_model import METRICS, PairsResult, descriptive_only
from strix_pipeline.runner.pair_records import records
from strix_pipeline.runner.pair_runs import (
    PAIR_HOST,
    PairSpec,
    UnknownRelease,
    local_runs,
    pair_log_dir,
    pair_profile,
    resolve_release,
)
from strix_pipeline.runner.pairs import compare_releases
from strix_pipeline.stats import paired
from strix_pipeline.warehouse import ComparisonRecord, WarehouseError

HOST = PAIR_HOST


def compare(args: argparse.Namespace) -> int:
    console = Console()
    config = config_of(args)

    def fail(message: str) -> int:
        console.print(shown(f"strix compare: {message}"), style="red")
        return 2

    if args.engine != "llamacpp" or config.engines.get(args.engine, None) is None:
        return fail(
            f"--engine {args.engine}: comparisons by pairs run llama-server releases on host local "
            "(engine llamacpp) so far"
        )
    if HOST not in config.hosts:
        return fail(f"the configuration has no host {HOST!r}")
    profile = pair_profile(config, args.profile)
    if profile not in config.profiles:
        return fail(f"--profile {profile}: no such profile in [profiles] ({', '.join(config.profiles)})")
    target = args.target if args.target is not None else config.analysis.compare_target
    if not 0 < target < 1:
        return fail(f"--target {target}: a relative step in (0, 1), e.g. 0.05 for 5 %")
    try:
        a, b = resolve_release(args.a), resolve_release(args.b)
    except UnknownRelease as e:
        return fail(str(e))
    spec = PairSpec.of(config.profiles[profile])
    cap = args.cap or config.analysis.compare_max_pairs
    seed = args.seed if args.seed is not None else int(time.time()) % 2**31  # stored: the order replays
    metrics = args.metric or list(METRICS)
    if args.primary and args.primary not in metrics:
        metrics = [args.primary, *metrics]
    cores = os.cpu_count()
    descriptive = {m: why for m in metrics if (why := descriptive_only(m, spec.ttft_clients, cores))}
    primary = args.primary or next((m for m in metrics if m not in descriptive), metrics[0])

    def say(line: str) -> None:
        console.print(shown(line))

    log_dir = pair_log_dir(config)
    say(
        f"strix compare {a.tag} {b.tag} on {HOST}: pairs of runs, each one's decode figure over "
        f"{spec.decode_requests} {spec.decode_output_tokens}-token decodes and its prefill over "
        f"{spec.prefill_requests} prefills of {spec.prefill_tokens} tokens (sums over the requests, as "
        f"the weekly series), seed {seed}, cap {cap} pairs, target {target:.0%}, primary metric "
        f"{primary}; engine logs in {log_dir}"
    )
    for why in descriptive.values():
        say(f"{why}: reported, never deciding")
    for line in noise_lines(args, config, spec, {m: METRICS[m].target(target) for m in metrics}, cap):
        say(line)
    try:
        result = compare_releases(
            local_runs(config, spec, log_dir, say),
            a,
            b,
            metrics=metrics,
            primary=args.primary,
            descriptive=descriptive,
            host=HOST,
            engine=args.engine,
            pairs=args.pairs,
            cap=cap,
            target=target,
            seed=seed,
            progress=say,
        )
    except ValueError as e:
        return fail(str(e))
    rows, runs = records(result)
    try:
        with open_warehouse(args, read_only=False) as wh:
            wh.save_comparison(rows, runs)
    except WarehouseError as e:
        print_result(console, result)
        return fail(f"the comparison ran but was not stored: {e}")
    print_result(console, result)
    say(f"stored as {result.comparison_id} (v_comparisons; strix changes lists the latest)")
    return 0


def noise_lines(
    args: argparse.Namespace, config: StrixConfig, spec: PairSpec, targets: dict[str, float], cap: int
) -> list[str]:
    """Before any engine starts: what this machine's measured noise lets ``cap`` pairs resolve of each
    metric's target (planning/resolution.py), from the newest figures the weekly analysis stored."""
    try:
        with open_reader(args, read_only=True, lock_retry_s=5.0) as wh:
            figures = wh.latest_noise()
    except (WarehouseError, duckdb.Error) as e:
        return [f"this machine's noise not read ({type(e).__name__}): the pairs needed are not known"]
    if not figures:
        return ["no noise measured on this machine yet (the weekly canary's runs measure it)"]
    levels = {"prefill_tokens_per_s": spec.prefill_tokens}
    lines = resolution_lines(figures, HOST, args.engine, targets, cap, levels)
    return [f"on this machine's measured noise: {line}" for line in lines]


def interval_text(low: float | None, high: float | None, level: float | None) -> str:
    """The interval as changes in percent, at its look's confidence (1 - the alpha that look spent)."""
    if low is None or high is None:
        return "–"
    at = f" at {1 - level:.1%}" if level else ""
    return f"[{(low - 1) * 100:+.1f} %, {(high - 1) * 100:+.1f} %]{at}"


def verdict_text(verdict: str, ratio: float | None, higher_is_better: bool, target: float = 0.0) -> str:
    """The verdict's words: *same* is written "within ±target", what it knows."""
    direction = None
    if verdict == "different" and ratio is not None:
        direction = "improvement" if (ratio > 1) == higher_is_better else "regression"
    return paired.verdict_words(verdict, direction, target)


def comparison_table(rows: list[ComparisonRecord], title: str) -> Table:
    """One row per metric, its interval first: the interval, B/A, the verdict, pairs and looks, the
    primary metric marked (also `strix changes`)."""
    table = Table(title=title)
    for col in ("metric", "A → B", "interval", "B/A", "change", "verdict", "pairs", "looks", "target"):
        table.add_column(col, overflow="fold")
    for r in rows:
        role = " (primary)" if r.primary_metric else " (descriptive)" if r.primary_metric is False else ""
        cells = (
            r.metric + role,
            f"{r.release_a} → {r.release_b}" if r.release_a != r.release_b else f"{r.release_a} A/A (canary)",
            interval_text(r.low, r.high, r.look_alpha),
            f"{r.ratio:.4f}" if r.ratio is not None else "–",
            f"{(r.ratio - 1) * 100:+.2f} %" if r.ratio is not None else "–",
            verdict_text(r.verdict, r.ratio, r.higher_is_better, r.target)
            + (f" — {r.withheld}" if r.withheld else ""),
            f"{r.pairs}" + (f" ({r.dropped_pairs} dropped)" if r.dropped_pairs else ""),
            str(r.looks),
            f"±{r.target:.0%}",
        )
        table.add_row(*(shown(c) for c in cells))
    return table


def print_result(console: Console, result: PairsResult) -> None:
    rows, _ = records(result)
    title = (
        f"{result.release_b.tag} against {result.release_a.tag} on {result.host} "
        f"({result.engine}), {len(result.runs)} engine starts"
    )
    console.print(shown(f"verdict: {result.headline()}"))
    console.print(comparison_table(rows, title))
    f, x = result.failures, result.exclusions
    console.print(
        shown(
            f"failed runs: A {f.k1} of {f.n1}, B {f.k2} of {f.n2} (p {f.p_value:.3f}); excluded for a "
            f"busy host: A {x.k1} of {x.n1}, B {x.k2} of {x.n2} (p {x.p_value:.3f})"
        )
    )
    console.print(shown(f"family-wise error: {result.family_text()}"))
    console.print(
        shown(
            f"B/A: the paired ratio (exp of the mean log ratio); interval: the last look's, at the part of "
            f"alpha {paired.ALPHA if not rows else rows[0].alpha:.2f} that look spent; within ±target: the "
            "1 - 2 alpha interval inside it (docs/comparing.md)"
        )
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two releases by balanced random AB/BA pairs, a fresh server per run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="the reference release (b11401 or 11401.0.0)")
    p.add_argument("b", metavar="B", help="the release judged against it (b11434)")
    p.add_argument("--engine", default="llamacpp", help="the engine (default llamacpp; the only one so far)")
    p.add_argument(
        "--pairs", type=int, help="pairs before the first look (default 3, the ladder's first step)"
    )
    p.add_argument("--cap", type=int, help="the most pairs (default [analysis] compare_max_pairs)")
    p.add_argument(
        "--target",
        type=float,
        help="the relative step chased (default [analysis] compare_target, 0.05: 5 %%)",
    )
    p.add_argument(
        "--metric",
        action="append",
        choices=list(METRICS),
        help="a metric to judge (repeatable; default all: " + ", ".join(METRICS) + ")",
    )
    p.add_argument(
        "--primary",
        choices=list(METRICS),
        help="the metric the comparison's verdict is (default the first judged; the others descriptive)",
    )
    p.add_argument("--seed", type=int, help="of the AB/BA order (default from the clock; stored either way)")
    p.add_argument(
        "--profile", help="the profile whose decode and prefill sizes the runs take (default: host local's)"
    )
    warehouse_arg(p)
    p.set_defaults(func=compare)
