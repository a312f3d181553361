"""`strix bench`: run the load generator against any OpenAI-compatible server.

    strix bench --url http://127.0.0.1:8080 --scenario concurrency_sweep --profile quick --out sweep.json
    strix bench --url http://127.0.0.1:8000 --dataset prompts.jsonl --concurrency 1,4,8 --requests 50

The ``--out`` JSON schema is documented in docs/bench-output.md.
"""

from __future__ import annotations

import argparse
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from strix_pipeline.config import (
    SLO,
    ConfigError,
    ProjectConfig,
    ScenarioProfile,
    StrixConfig,
    config_path,
    load_config,
    resolve_path,
)
from strix_pipeline.records import HARNESS_VERSION, LevelAggregate

OUT_SCHEMA_VERSION = 1
LEVEL_KEY = {"concurrency": "concurrency", "input_tokens": "input_tokens", "phase": "phase", "rate": "rate_per_min", "single": "level"}  # fmt: skip


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible server with the standard suite or a dataset",
        description="Run the benchmark suite (or replay a dataset) against any OpenAI-compatible server.",
    )
    p.add_argument(
        "--url", required=True, help="server root, e.g. http://127.0.0.1:8080 (a trailing /v1 is fine)"
    )
    p.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--scenario",
        action="append",
        help="smoke, concurrency_sweep, prefill_ladder, decode, prefix_cache, or all (repeat or comma-separate)",
    )
    what.add_argument("--dataset", help='JSONL file: one {"prompt": ..., "output_tokens_count": N} a line')
    p.add_argument("--profile", default="quick", help="scenario profile from the config (quick | standard)")
    p.add_argument("--concurrency", help="comma-separated client counts, e.g. 1,5,8 (sweep and dataset)")
    p.add_argument("--requests", type=int, help="requests per level (sweep, decode and dataset)")
    p.add_argument("--rate", type=float, help="dataset only: open loop at this many requests/s instead")
    p.add_argument("--burstiness", type=float, default=1.0, help="open loop gamma shape (1 = Poisson)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up requests per level (dataset: default 0)")
    p.add_argument(
        "--context-length", type=int, help="cap prompt lengths at this context (default: detected)"
    )
    p.add_argument("--metrics-url", help="Prometheus endpoint (default: URL/metrics)")
    p.add_argument("--timeout", type=float, help="per-request timeout in seconds (default: the profile's)")
    p.add_argument("--run-id", help="run id (default: bench-<time>-<random>)")
    p.add_argument("--out", help="write the results as JSON to this file")
    p.add_argument("--save", action="store_true", help="also load the run into the warehouse")
    p.add_argument("--warehouse", help="with --save: this DuckDB file instead of the configured one")
    p.set_defaults(func=handle)


def _profile_and_slo(args: argparse.Namespace) -> tuple[ScenarioProfile, SLO, StrixConfig | None]:
    from strix_pipeline.loadgen import QUICK_PROFILE

    cfg: StrixConfig | None = None
    path = Path(args.config) if args.config else config_path()
    if args.config or path.exists():
        cfg = load_config(path)  # a broken config fails loudly, never silently replaced
    if cfg and args.profile in cfg.profiles:
        profile = cfg.profiles[args.profile]
    elif args.profile == "quick":
        profile = QUICK_PROFILE
    elif args.profile == "standard":
        profile = ScenarioProfile()
    else:
        raise ConfigError(
            f"no profile named {args.profile!r} (configured: {sorted(cfg.profiles) if cfg else []})"
        )
    return profile, (cfg.slo if cfg else SLO()), cfg


def _levels(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--concurrency: expected comma-separated integers, got {text!r}") from None
    if not levels or min(levels) < 1:
        raise ConfigError(f"--concurrency: expected positive integers, got {text!r}")
    return levels


def apply_overrides(profile: ScenarioProfile, args: argparse.Namespace) -> ScenarioProfile:
    upd: dict[str, Any] = {}
    sweep: dict[str, Any] = {}
    if (levels := _levels(args.concurrency)) is not None:
        sweep["levels"] = levels
    if args.requests:
        sweep["requests_per_level"] = args.requests
        upd["decode"] = profile.decode.model_copy(update={"requests": args.requests})
    if args.warmup is not None:
        sweep["warmup"] = args.warmup
    if sweep:
        upd["concurrency_sweep"] = profile.concurrency_sweep.model_copy(update=sweep)
    if args.timeout:
        upd["request_timeout_s"] = args.timeout
    return profile.model_copy(update=upd) if upd else profile


def _scenarios(values: list[str]) -> list[str] | None:
    from strix_pipeline.loadgen import SCENARIOS

    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if "all" in names:
        return None
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        raise ConfigError(f"--scenario: unknown {', '.join(bad)} (known: {', '.join(SCENARIOS)}, all)")
    return names


def _stats(a: LevelAggregate, name: str) -> dict[str, float | None]:
    return {s: getattr(a, f"{name}_{s}_ms") for s in ("mean", "p50", "p90", "p95", "p99")}


def level_json(a: LevelAggregate) -> dict[str, Any]:
    key = LEVEL_KEY.get(a.level_kind, "level")
    out: dict[str, Any] = {key: ("cold" if a.level == 0 else "warm") if a.level_kind == "phase" else a.level}
    out |= {
        "level": a.level,
        "level_kind": a.level_kind,
        "requests_ok": a.requests_ok,
        "requests_failed": a.requests_failed,
        "duration_s": a.duration_s,
        "ttft_ms": _stats(a, "ttft")
        | {"p95_ci_low": a.ttft_p95_ci_low_ms, "p95_ci_high": a.ttft_p95_ci_high_ms},
        "tpot_ms": _stats(a, "tpot"),
        "itl_ms": _stats(a, "itl"),
        "itl_per_token_ms": _stats(a, "itl_per_token"),
        "e2e_ms": _stats(a, "e2e"),
        "queue_ms": {"mean": a.queue_mean_ms, "p95": a.queue_p95_ms},
        "input_tokens_mean": a.input_tokens_mean,
        "output_tokens_total": a.output_tokens_total,
        "output_tokens_estimated": a.output_tokens_estimated,
        "output_tokens_per_s": a.output_tokens_per_s,
        "requests_per_s": a.requests_per_s,
        "goodput_requests_per_s": a.goodput_requests_per_s,
        "requested_rate": a.requested_rate,
        "achieved_rate": a.achieved_rate,
        "prefill_tokens_per_s": a.prefill_tokens_per_s,
        "decode_tokens_per_s": a.decode_tokens_per_s,
        "cached_tokens_mean": a.cached_tokens_mean,
    }
    return out


def result_json(result: Any, *, run_id: str, url: str, model: str | None, profile_name: str, slo: SLO, started: datetime) -> dict[str, Any]:  # fmt: skip
    scenarios: dict[str, dict[str, Any]] = {}
    for a in result.aggregates:
        scenarios.setdefault(a.scenario, {"levels": []})["levels"].append(level_json(a))
    for name, block in scenarios.items():
        rs = [r for r in result.requests if r.scenario == name and not r.warmup]
        errors: dict[str, int] = {}
        for r in rs:
            if not r.ok:
                errors[r.error_class or "unknown"] = errors.get(r.error_class or "unknown", 0) + 1
        block["errors_by_class"] = errors
    return {
        "schema_version": OUT_SCHEMA_VERSION,
        "harness_version": HARNESS_VERSION,
        "run_id": run_id,
        "url": url,
        "model": model,
        "profile": profile_name,
        "started_at": started.isoformat(),
        "ended_at": datetime.now(UTC).isoformat(),
        "slo": slo.model_dump(),
        "smoke_ok": result.smoke_ok,
        "smoke_output": result.smoke_output,
        "errors": result.errors,
        "scenarios": scenarios,
    }


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def summary_table(aggs: list[LevelAggregate]) -> Table:
    t = Table(title="strix bench", show_lines=False)
    for col in ("scenario", "level", "ok", "fail", "TTFT p50", "TTFT p95 [95% CI]", "TPOT p50", "ITL p50", "E2E p95", "out tok/s", "req/s", "goodput", "prefill/decode tok/s"):  # fmt: skip
        t.add_column(col, justify="left" if col == "scenario" else "right")
    for a in aggs:
        level = ("cold" if a.level == 0 else "warm") if a.level_kind == "phase" else str(a.level)
        ci = (
            f" [{_fmt(a.ttft_p95_ci_low_ms, 0)}-{_fmt(a.ttft_p95_ci_high_ms, 0)}]"
            if a.ttft_p95_ci_low_ms is not None
            else ""
        )
        rate = a.prefill_tokens_per_s or a.decode_tokens_per_s
        t.add_row(
            a.scenario, level, str(a.requests_ok), str(a.requests_failed) if a.requests_failed == 0 else f"[red]{a.requests_failed}[/]",
            _fmt(a.ttft_p50_ms), _fmt(a.ttft_p95_ms) + ci, _fmt(a.tpot_p50_ms, 2), _fmt(a.itl_p50_ms, 2), _fmt(a.e2e_p95_ms),
            _fmt(a.output_tokens_per_s), _fmt(a.requests_per_s, 2), _fmt(a.goodput_requests_per_s, 2), _fmt(rate, 0),
        )  # fmt: skip
    return t


def _engine_kind(result: Any) -> str:
    names = {m.name.split(":")[0] for m in result.server_metrics}
    for kind in ("vllm", "sglang", "llamacpp"):
        if kind in names:
            return kind
    return "unknown"


def save_run(cfg: StrixConfig | None, result: Any, *, run_id: str, url: str, model: str, profile_name: str, started: datetime, warehouse: str | None = None) -> Path:  # fmt: skip
    from strix_pipeline.fingerprint import run_fingerprint
    from strix_pipeline.records import RunRecord, RunResult
    from strix_pipeline.warehouse import Warehouse

    kind = _engine_kind(result)
    run = RunRecord(
        run_id=run_id, host="adhoc", engine=kind, engine_kind=kind, image_repository=None, image_tag=None,
        image_digest=None, model_profile="adhoc", model=model, quantization="unknown", suite="standard",
        profile=profile_name, fingerprint="", harness_version=HARNESS_VERSION, engine_build=None,
        launch_command=f"strix bench --url {url}", engine_flags=None,
        status="ok" if all(a.requests_failed == 0 for a in result.aggregates) else "partial",
        failure_reason="; ".join(result.errors)[:2000] or None, log_tail=None, started_at=started,
        ended_at=datetime.now(UTC),
    )  # fmt: skip
    run.fingerprint = run_fingerprint(run)
    path = (
        Path(warehouse)
        if warehouse
        else cfg.warehouse_path()
        if cfg
        else resolve_path(ProjectConfig().warehouse)
    )
    with Warehouse.open(path) as wh:
        wh.load_run(
            RunResult(
                run=run,
                requests=result.requests,
                aggregates=result.aggregates,
                server_metrics=result.server_metrics,
            )
        )
    return path


def handle(args: argparse.Namespace) -> int:
    from strix_pipeline.loadgen import load_dataset, run_async, run_dataset, run_suite

    console = Console(stderr=True)
    profile, slo, cfg = _profile_and_slo(args)
    profile = apply_overrides(profile, args)
    run_id = args.run_id or f"bench-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    started = datetime.now(UTC)
    if args.dataset:
        try:
            prompts = load_dataset(args.dataset)
        except (OSError, ValueError) as e:
            console.print(f"[red]strix bench: {e}[/]")
            return 2
    else:
        scenarios = _scenarios(args.scenario)
    if args.rate is not None and not args.dataset:
        raise ConfigError("--rate applies to --dataset (the standard scenarios are closed loops)")

    tasks: dict[tuple[str, int], TaskID] = {}
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
        transient=False, refresh_per_second=2,  # rendering holds the GIL: keep it off the streams' timestamps
    ) as progress:  # fmt: skip

        def on_request(scenario: str, level: int, done: int, total: int) -> None:
            key = (scenario, level)
            if key not in tasks:
                tasks[key] = progress.add_task(f"{scenario} {level}", total=total)
            progress.update(tasks[key], completed=done, total=total)

        def on_progress(line: str) -> None:
            progress.console.print(line)

        common: dict[str, Any] = dict(
            metrics_url=args.metrics_url, on_progress=on_progress, on_request=on_request
        )
        if args.dataset:
            coro = run_dataset(
                args.url, args.model or "", prompts, slo, run_id, levels=_levels(args.concurrency) or [1],
                requests=args.requests, warmup=args.warmup or 0, rate=args.rate, burstiness=args.burstiness,
                seed=profile.seed, timeout_s=profile.request_timeout_s, **common,
            )  # fmt: skip
        else:
            coro = run_suite(
                args.url, args.model or "", profile, slo, run_id, scenarios=scenarios,
                context_length=args.context_length, **common,
            )  # fmt: skip
        result = run_async(coro)

    console.print(summary_table(result.aggregates))
    for e in result.errors:
        console.print(f"[yellow]note:[/] {e}")
    if result.smoke_ok is not None:
        console.print(f"smoke: {'[green]ok[/]' if result.smoke_ok else '[red]FAILED[/]'}")
    model = args.model or result.model
    doc = result_json(
        result, run_id=run_id, url=args.url, model=model, profile_name=args.profile, slo=slo, started=started
    )
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
        console.print(f"wrote {args.out}")
    if args.save:
        path = save_run(cfg, result, run_id=run_id, url=args.url, model=model or "unknown", profile_name=args.profile, started=started, warehouse=args.warehouse)  # fmt: skip
        console.print(f"saved run {run_id} to {path}")
    failed = sum(a.requests_failed for a in result.aggregates)
    ok = sum(a.requests_ok for a in result.aggregates)
    if ok == 0:
        return 1
    return 0 if failed == 0 and result.smoke_ok is not False else 3
