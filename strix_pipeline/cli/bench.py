"""`strix bench`: run the load generator against any OpenAI-compatible server.

    strix bench --url http://127.0.0.1:8080 --scenario concurrency_sweep --profile quick --out sweep.json
    strix bench --url http://127.0.0.1:8000 --dataset prompts.jsonl --concurrency 1,4,8 --requests 50
    strix bench --base-url http://127.0.0.1:8000 --backend openai-chat --endpoint /v1/chat/completions \
        --dataset-name random --random-input-len 512 --random-output-len 128 --num-prompts 200 \
        --max-concurrency 8 --save-result --result-dir results   # a `vllm bench serve` line, unchanged

The ``--out`` JSON schema and the vLLM-format result are documented in docs/bench-output.md.
"""

from __future__ import annotations

import argparse
import math
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from strix_pipeline.cli.bench_out import result_json, vllm_doc, write_json
from strix_pipeline.cli.common import as_markup
from strix_pipeline.config import (
    SLO,
    ConfigError,
    DuckLakeTarget,
    ProjectConfig,
    ScenarioProfile,
    StrixConfig,
    config_path,
    resolve_path,
)
from strix_pipeline.config_load import load_config
from strix_pipeline.fingerprint import run_fingerprint, workload_digest
from strix_pipeline.loadgen import (
    SCENARIOS,
    DatasetLoad,
    RandomLoad,
    Watchers,
    load_dataset,
    run_async,
    run_load,
    run_suite,
)
from strix_pipeline.loadgen.profiles import QUICK_PROFILE
from strix_pipeline.loadgen.vllm_flags import VLLM_TIMEOUT_S, Plan, parse_levels, plan_run
from strix_pipeline.loadgen.vllm_result import result_filename, summary
from strix_pipeline.records import HARNESS_VERSION, LevelAggregate, RunRecord, RunResult
from strix_pipeline.runner.record import trace_digest
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.spool import RunNotStored, spool_dir, store_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible server with the standard suite, a dataset, or vLLM's flags",
        description="Run the benchmark suite (or replay a dataset, or run a `vllm bench serve` command line) "
        "against any OpenAI-compatible server.",
    )
    p.add_argument(
        "--url", help="server root, e.g. http://127.0.0.1:8080 (a trailing /v1 is fine; vLLM: --base-url)"
    )
    p.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--scenario",
        action="append",
        help="smoke, concurrency_sweep, prefill_ladder, decode, prefix_cache, or all (repeat or "
        "comma-separate)",
    )
    what.add_argument("--dataset", help='JSONL file: one {"prompt": ..., "output_tokens_count": N} a line')
    what.add_argument(
        "--dataset-name",
        help="vLLM's dataset name; strix generates 'random' (the run when neither --scenario nor "
        "--dataset is given)",
    )
    p.add_argument("--profile", default="quick", help="scenario profile from the config (quick | standard)")
    p.add_argument(
        "--concurrency", help="comma-separated client counts, e.g. 1,5,8 (vLLM: --max-concurrency)"
    )
    p.add_argument(
        "--requests", type=int, help="requests per level (sweep, decode, dataset; vLLM: --num-prompts)"
    )
    p.add_argument("--rate", type=float, help="open loop at this many requests/s (vLLM: --request-rate)")
    p.add_argument("--burstiness", type=float, default=1.0, help="open loop gamma shape (1 = Poisson)")
    p.add_argument(
        "--warmup", type=int, default=None, help="warm-up requests per level (vLLM: --num-warmups)"
    )
    p.add_argument(
        "--context-length", type=int, help="cap prompt lengths at this context (default: detected)"
    )
    p.add_argument("--metrics-url", help="Prometheus endpoint (default: URL/metrics)")
    p.add_argument(
        "--timeout",
        type=float,
        help="per-request timeout in seconds (default: the profile's; 6 h for the random run, as vLLM)",
    )
    p.add_argument("--run-id", help="run id (default: bench-<time>-<random>)")
    p.add_argument("--out", help="write the results as JSON to this file")
    p.add_argument(
        "--result-format",
        choices=("vllm", "strix"),
        help="shape of the --save-result file: vllm (vLLM's result JSON, the default; strix's own JSON is "
        "written beside it as NAME.strix.json) or strix",
    )
    p.add_argument("--save", action="store_true", help="also load the run into the warehouse")
    p.add_argument("--warehouse", help="with --save: this DuckDB file instead of the configured one")
    v = p.add_argument_group(
        "vllm bench serve names",
        "`vllm bench serve`'s flags for what strix bench does (docs/bench-output.md); a vLLM flag that is "
        "not listed here is refused by name.",
    )
    v.add_argument("--base-url", help="= --url")
    v.add_argument("--host", help="with --port, instead of --base-url (vLLM's default 127.0.0.1:8000)")
    v.add_argument("--port", type=int)
    v.add_argument(
        "--endpoint", help="API path (default /v1/completions, /v1/chat/completions for openai-chat)"
    )
    v.add_argument("--backend", help="openai or vllm (/v1/completions), openai-chat (/v1/chat/completions)")
    v.add_argument(
        "--label", help="result label, in the vLLM result and its file name (default: the backend)"
    )
    v.add_argument("--served-model-name", help="the model name sent (default: --model)")
    v.add_argument(
        "--tokenizer", help="recorded as tokenizer_id; strix counts tokens with the server's tokenizer"
    )
    v.add_argument(
        "--trust-remote-code", action="store_true", help="accepted: strix loads no local tokenizer"
    )
    v.add_argument(
        "--num-prompts", type=int, help="= --requests (vLLM's default 1000 for the random dataset)"
    )
    v.add_argument("--max-concurrency", type=int, help="= --concurrency N (one level)")
    v.add_argument("--request-rate", type=float, help="= --rate; inf (vLLM's default) = no open loop")
    v.add_argument("--num-warmups", type=int, help="= --warmup")
    v.add_argument("--seed", type=int, help="workload and arrival seed (default: the profile's)")
    v.add_argument("--dataset-path", help="refused: replay your own prompts with --dataset FILE.jsonl")
    v.add_argument("--input-len", type=int, help="= --random-input-len")
    v.add_argument("--output-len", type=int, help="= --random-output-len")
    v.add_argument("--random-input-len", type=int, help="input tokens per request (default 1024)")
    v.add_argument("--random-output-len", type=int, help="output tokens per request (default 128)")
    v.add_argument("--random-range-ratio", type=float, help="lengths uniform in len * [1 - r, 1 + r]")
    v.add_argument(
        "--random-prefix-len", type=int, help="only 0 (strix's prefix_cache scenario measures prefixes)"
    )
    v.add_argument("--ignore-eos", action="store_true", help="accepted: strix always sends ignore_eos")
    v.add_argument(
        "--percentile-metrics", help="vLLM result: ttft,tpot,itl (default), e2el, client_queue_time, ..."
    )
    v.add_argument("--metric-percentiles", help="vLLM result: comma-separated percentiles (default 99)")
    v.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs for goodput: ttft:MS tpot:MS e2el:MS")
    v.add_argument("--metadata", nargs="*", metavar="KEY=VALUE", help="recorded in both result files")
    v.add_argument("--save-result", action="store_true", help="write the result file (see --result-format)")
    v.add_argument(
        "--append-result", action="store_true", help="append it to the file instead (one JSON per line)"
    )
    v.add_argument("--result-dir", help="directory of the result file (default: the current one)")
    v.add_argument("--result-filename", help="name of the result file (default: vLLM's name)")
    v.add_argument("--disable-tqdm", action="store_true", help="no progress bars")
    p.set_defaults(func=handle)


def _profile_and_slo(args: argparse.Namespace) -> tuple[ScenarioProfile, SLO, StrixConfig | None]:
    cfg: StrixConfig | None = None
    path = Path(args.config) if args.config else config_path()
    if args.config or path.exists():
        cfg = load_config(path)  # a broken config fails loudly, never silently replaced
    if cfg and args.profile in cfg.profiles:
        profile = cfg.profiles[args.profile]
    elif args.profile == "quick":  # the embedded default's, the one `make run` measures
        profile = QUICK_PROFILE
    elif args.profile == "standard":
        profile = ScenarioProfile()
    else:
        raise ConfigError(
            f"no profile named {args.profile!r} (configured: {sorted(cfg.profiles) if cfg else []})"
        )
    return profile, (cfg.slo if cfg else SLO()), cfg


def apply_overrides(
    profile: ScenarioProfile, args: argparse.Namespace, plan: Plan | None = None
) -> ScenarioProfile:
    """The command line's levels, requests, warm-up, timeout and seed over the profile's."""
    upd: dict[str, Any] = {}
    sweep: dict[str, Any] = {}
    levels = plan.levels if plan else parse_levels(args.concurrency)
    requests = plan.requests if plan else args.requests
    warmup = plan.warmup if plan else args.warmup
    if levels is not None:
        sweep["levels"] = levels
    if requests:
        sweep["requests_per_level"] = requests
        sweep["requests_at"] = {}  # --requests N: N at every level
        upd["decode"] = profile.decode.model_copy(update={"requests": requests})
    if warmup is not None:
        sweep["warmup"] = warmup
    if sweep:
        upd["concurrency_sweep"] = profile.concurrency_sweep.model_copy(update=sweep)
    if args.timeout:
        upd["request_timeout_s"] = args.timeout
    if plan and plan.seed is not None:
        upd["seed"] = plan.seed
    return profile.model_copy(update=upd) if upd else profile


def _scenarios(values: list[str]) -> list[str] | None:

    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if "all" in names:
        return None
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        raise ConfigError(f"--scenario: unknown {', '.join(bad)} (known: {', '.join(SCENARIOS)}, all)")
    return names


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def summary_table(aggs: list[LevelAggregate]) -> Table:
    t = Table(title="strix bench", show_lines=False)
    for col in (
        "scenario",
        "level",
        "ok",
        "fail",
        "TTFT p50",
        "TTFT p95 [95% CI]",
        "TPOT p50",
        "ITL p50",
        "E2E p95",
        "out tok/s",
        "req/s",
        "goodput",
        "prefill/decode tok/s",
    ):
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
            a.scenario,
            level,
            str(a.requests_ok),
            str(a.requests_failed) if a.requests_failed == 0 else f"[red]{a.requests_failed}[/]",
            _fmt(a.ttft_p50_ms),
            _fmt(a.ttft_p95_ms) + ci,
            _fmt(a.tpot_p50_ms, 2),
            _fmt(a.itl_p50_ms, 2),
            _fmt(a.e2e_p95_ms),
            _fmt(a.output_tokens_per_s),
            _fmt(a.requests_per_s, 2),
            _fmt(a.goodput_requests_per_s, 2),
            _fmt(rate, 0),
        )
    return t


def _engine_kind(result: Any) -> str:
    names = {m.name.split(":")[0] for m in result.server_metrics}
    for kind in ("vllm", "sglang", "llamacpp"):
        if kind in names:
            return kind
    return "unknown"


def save_run(
    cfg: StrixConfig | None,
    result: Any,
    *,
    run_id: str,
    url: str,
    model: str,
    profile_name: str,
    started: datetime,
    warehouse: str | None = None,
    workload: str | None = None,
) -> Path | DuckLakeTarget:

    kind = _engine_kind(result)
    run = RunRecord(
        run_id=run_id,
        host="adhoc",
        engine=kind,
        engine_kind=kind,
        image_repository=None,
        image_tag=None,
        image_digest=None,
        model_profile="adhoc",
        model=model,
        quantization="unknown",
        suite="standard",
        profile=profile_name,
        fingerprint="",
        harness_version=HARNESS_VERSION,
        engine_build=None,
        launch_command=f"strix bench --url {url}",
        engine_flags=None,
        status="ok" if all(a.requests_failed == 0 for a in result.aggregates) else "partial",
        failure_reason="; ".join(result.errors)[:2000] or None,
        log_tail=None,
        started_at=started,
        ended_at=datetime.now(UTC),
        workload=workload,
    )
    run.fingerprint = run_fingerprint(run)
    # --warehouse FILE, else the config's warehouse (its file or its DuckLake), else the default file
    path = (
        Path(warehouse)
        if warehouse
        else cfg.warehouse_target()
        if cfg
        else resolve_path(ProjectConfig().warehouse)
    )
    artifacts = cfg.artifacts_dir() if cfg else resolve_path(ProjectConfig().artifacts)
    store_run(  # spooled first: a warehouse that refuses the load (RunNotStored) loses nothing
        RunResult(
            run=run,
            requests=result.requests,
            aggregates=result.aggregates,
            server_metrics=result.server_metrics,
        ),
        spool_directory=spool_dir(artifacts),
        open_writer=lambda: Warehouse.open(path, lock_retry_s=10.0),
        warehouse_path=path,
    )
    return path


def _slo_with_goodput(slo: SLO, goodput: dict[str, float]) -> SLO:
    """vLLM's --goodput over the configured SLO (the strix JSON's goodput): only the named limits change."""
    names = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms"}
    return slo.model_copy(update={names[k]: v for k, v in goodput.items()}) if goodput else slo


def handle(args: argparse.Namespace) -> int:

    console = Console(stderr=True)
    plan = plan_run(args)
    profile, slo, cfg = _profile_and_slo(args)
    profile = apply_overrides(profile, args, plan)
    slo = _slo_with_goodput(slo, plan.vllm.goodput)
    run_id = args.run_id or f"bench-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    started = datetime.now(UTC)
    if plan.mode == "dataset":
        try:
            prompts = load_dataset(args.dataset)
        except (OSError, ValueError) as e:
            console.print(f"[red]strix bench: {as_markup(e)}[/]")
            return 2
    elif plan.mode == "scenario":
        scenarios = _scenarios(args.scenario)

    tasks: dict[tuple[str, int], TaskID] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        refresh_per_second=2,
        disable=args.disable_tqdm,  # rendering holds the GIL: keep it off the streams' timestamps
    ) as progress:

        def on_request(scenario: str, level: int, done: int, total: int) -> None:
            key = (scenario, level)
            if key not in tasks:
                tasks[key] = progress.add_task(f"{scenario} {level}", total=total)
            progress.update(tasks[key], completed=done, total=total)

        def on_progress(line: str) -> None:
            progress.console.print(as_markup(line))  # a line quotes a server, a scenario, a run id

        observe: Watchers = {
            "metrics_url": args.metrics_url,
            "on_progress": on_progress,
            "on_request": on_request,
        }
        if plan.mode == "scenario":
            coro = run_suite(
                plan.url,
                plan.model or "",
                profile,
                slo,
                run_id,
                scenarios=scenarios,
                context_length=args.context_length,
                traces_dir=cfg.traces_dir() if cfg else None,
                **observe,
            )
        else:
            load: DatasetLoad | RandomLoad
            if plan.mode == "dataset":
                load = DatasetLoad(
                    prompts,
                    levels=plan.levels or [1],
                    requests=plan.requests,
                    warmup=plan.warmup or 0,
                    rate=plan.rate,
                    burstiness=args.burstiness,
                    seed=profile.seed,
                )
                timeout_s = profile.request_timeout_s
            else:
                load = RandomLoad(
                    plan.input_lens,
                    plan.output_lens,
                    chat=plan.chat,
                    path=plan.endpoint,
                    warmups=plan.warmup or 0,
                    rate=plan.rate,
                    burstiness=args.burstiness,
                    max_concurrency=plan.levels[0] if plan.levels else None,
                    seed=profile.seed,
                )
                timeout_s = args.timeout or VLLM_TIMEOUT_S
            coro = run_load(plan.url, plan.model or "", slo, run_id, load, timeout_s=timeout_s, **observe)
        result = run_async(coro)

    console.print(summary_table(result.aggregates))
    for e in result.errors:
        console.print(f"[yellow]note:[/] {as_markup(e)}")
    if result.smoke_ok is not None:
        console.print(f"smoke: {'[green]ok[/]' if result.smoke_ok else '[red]FAILED[/]'}")
    model = plan.model or result.model
    doc = result_json(
        result,
        run_id=run_id,
        url=plan.url,
        model=model,
        profile_name=args.profile,
        slo=slo,
        started=started,
        metadata=dict(plan.vllm.metadata),
        vllm_compat=plan.compat,
    )
    if args.out:
        write_json(Path(args.out), doc)
        console.print(f"wrote {as_markup(args.out)}")
    if plan.result_format is not None:
        vdoc = vllm_doc(result, plan, model or "unknown") if plan.result_format == "vllm" else None
        if vdoc is None:  # the strix JSON under vLLM's file name; the name's fields as vLLM would fill them
            plan.vllm.model_id = plan.model_id or model or "unknown"
            plan.vllm.request_rate = plan.rate if plan.rate is not None else math.inf
            plan.vllm.max_concurrency = plan.levels[0] if plan.levels and len(plan.levels) == 1 else None
        path = result_filename(plan.vllm, args.result_dir, args.result_filename)
        write_json(path, vdoc if vdoc is not None else doc, append=args.append_result)
        console.print(f"wrote {as_markup(path)}" + (" (vLLM's result format)" if vdoc is not None else ""))
        if vdoc is not None:
            console.print(summary(vdoc), highlight=False, markup=False)
            beside = path.with_name(path.stem + ".strix.json")
            write_json(beside, doc, append=args.append_result)
            console.print(f"wrote {as_markup(beside)}")
    if args.save:
        try:
            path = save_run(
                cfg,
                result,
                run_id=run_id,
                url=plan.url,
                model=model or "unknown",
                profile_name=args.profile,
                started=started,
                warehouse=args.warehouse,
                workload=workload_digest(profile, trace_digest(cfg, profile) if cfg else None),
            )
        except RunNotStored as e:
            console.print(f"strix bench: {e}", style="red", soft_wrap=True, markup=False)
            return 4
        console.print(f"saved run {as_markup(run_id)} to {as_markup(path)}")
    failed = sum(a.requests_failed for a in result.aggregates)
    ok = sum(a.requests_ok for a in result.aggregates)
    if ok == 0:
        return 1
    return 0 if failed == 0 and result.smoke_ok is not False else 3
