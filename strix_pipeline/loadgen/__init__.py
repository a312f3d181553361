"""The load generator: an accurate streaming client and the standard benchmark suite.

Public API (used by the Dagster asset, the launchers and ``strix bench``)::

    result = await run_suite(base_url, model, profile, slo, run_id, scenarios=None,
                             context_length=None, metrics_url=None, on_progress=print)
    result = run_suite_sync(...)  # same, in its own event loop
    result = await run_load(base_url, model, slo, run_id, DatasetLoad(prompts, levels=[1, 4]))
    result = await run_load(base_url, model, slo, run_id, RandomLoad(input_lens, output_lens))

Every entry point takes the same watchers as keywords (``Observe``: metrics_url, on_progress,
on_request, scrape_interval_s, engine_exit).

``base_url`` is the server root (``http://127.0.0.1:8080``; a trailing ``/v1`` is accepted). Requests
never raise out of the suite: a server that fails produces failed request records. ``engine_exit``
tells whether the engine still runs: one found dead stops the suite at that level,
recorded in ``SuiteResult.engine_gone``. What is retried: ``client.RETRY_POLICY``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict, Unpack

import aiohttp

from strix_pipeline.config import SLO, ScenarioProfile
from strix_pipeline.loadgen import scenarios as sc
from strix_pipeline.loadgen.client import make_session
from strix_pipeline.loadgen.loop import run as run_async
from strix_pipeline.loadgen.prometheus import MetricsScraper
from strix_pipeline.loadgen.scenarios import (
    SCENARIOS,
    DatasetLoad,
    EngineExitFn,
    EngineGone,
    RandomLoad,
    RequestProgressFn,
    SuiteContext,
)
from strix_pipeline.loadgen.workloads import ServerTokenizer, Workload, load_dataset
from strix_pipeline.records import LevelAggregate, RequestTable, ServerMetricSample

__all__ = [
    "SCENARIOS",
    "QUICK_PROFILE",
    "SuiteResult",
    "SuiteInterrupted",
    "Observe",
    "DatasetLoad",
    "RandomLoad",
    "run_suite",
    "run_suite_sync",
    "run_load",
    "load_dataset",
    "detect_context_length",
    "detect_model",
    "normalize_base_url",
    "run_async",
]

# Recommended [profiles.quick]: the whole suite in ~1-2 min with Gemma 3 270M on 2 CPU cores
# (llama-server -c 8192 -np 4: 2048 tokens per slot, so every length below fits one slot).
QUICK_PROFILE = ScenarioProfile.model_validate(
    {
        "request_timeout_s": 120,
        "smoke": {"output_tokens": 16},
        "concurrency_sweep": {
            "levels": [1, 2, 4],
            "requests_per_level": 4,
            "warmup": 1,
            "input_tokens": 128,
            "output_tokens": 16,
            "max_duration_s": 60,
        },
        "prefill_ladder": {
            "input_tokens": [128, 256, 512, 1024],
            "requests_per_level": 1,
            "output_tokens": 2,
        },
        "decode": {"requests": 1, "output_tokens": 32, "input_tokens": 64},
        "prefix_cache": {"prefix_tokens": 1024, "suffix_tokens": 32, "output_tokens": 2, "repeats": 1},
    }
)


@dataclass
class SuiteResult:
    requests: RequestTable = field(default_factory=RequestTable)
    aggregates: list[LevelAggregate] = field(default_factory=list)
    server_metrics: list[ServerMetricSample] = field(default_factory=list)
    smoke_ok: bool | None = None  # None if smoke not run
    smoke_output: str | None = None  # the text the smoke request produced (first 2000 chars)
    errors: list[str] = field(default_factory=list)  # scenario-level problems
    model: str | None = None  # the model name sent (detected from /v1/models when none was given)
    # how and where the engine ended mid-suite ("llama-server was killed by SIGKILL ... during
    # concurrency_sweep level 4 (3 of 4 requests sent); not run: decode"); the suite stopped there
    engine_gone: str | None = None
    # where the suite is: the scenario, and its level with the requests done of those planned when the
    # scenario reports them; an interrupted suite says where it stopped
    scenario: str | None = None
    level: int | None = None
    done: int | None = None
    planned: int | None = None

    def position(self) -> str | None:
        if self.scenario is None:
            return None
        if self.level is None:
            return self.scenario
        return f"{self.scenario} level {self.level} ({self.done} of {self.planned} requests done)"


class SuiteInterrupted(BaseException):  # noqa: N818 - it wraps an interrupt, it is not an error
    """The suite was interrupted (Ctrl-C, an orchestrator's termination): ``partial`` holds what it
    measured before -- every finished level's records and aggregates -- and where it was;
    ``interrupt`` is the exception the interrupt raised, for the caller to raise again."""

    def __init__(self, partial: SuiteResult, interrupt: BaseException) -> None:
        super().__init__(f"suite interrupted by {type(interrupt).__name__} at {partial.position()}")
        self.partial, self.interrupt = partial, interrupt


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


async def _get_json(session: aiohttp.ClientSession, url: str) -> object:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
            return await r.json(content_type=None) if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def detect_context_length(session: aiohttp.ClientSession, base_url: str) -> int | None:
    """Per-request context: llama-server /props (per slot), else /v1/models max_model_len (vLLM, SGLang)."""
    props = await _get_json(session, base_url + "/props")
    if isinstance(props, dict):
        n = (props.get("default_generation_settings") or {}).get("n_ctx")
        if isinstance(n, int) and n > 0:
            return n
    models = await _get_json(session, base_url + "/v1/models")
    if isinstance(models, dict):
        for m in models.get("data") or ():
            n = m.get("max_model_len") if isinstance(m, dict) else None
            if isinstance(n, int) and n > 0:
                return n
    return None


async def detect_model(session: aiohttp.ClientSession, base_url: str) -> str | None:
    models = await _get_json(session, base_url + "/v1/models")
    if isinstance(models, dict):
        for m in models.get("data") or ():
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                return m["id"]
    return None


def _max_prompt_tokens(profile: ScenarioProfile, names: Sequence[str]) -> int:
    n = 512
    if "concurrency_sweep" in names:
        n = max(n, profile.concurrency_sweep.input_tokens)
    if "prefill_ladder" in names:
        n = max(n, *profile.prefill_ladder.input_tokens)
    if "decode" in names:
        n = max(n, profile.decode.input_tokens)
    if "prefix_cache" in names:
        n = max(n, profile.prefix_cache.prefix_tokens + profile.prefix_cache.suffix_tokens)
    return n


class Observe(TypedDict, total=False):
    """What watches a run, the same for every entry point.

    ``metrics_url``: the Prometheus page scraped during each level (default ``base_url + "/metrics"``),
    every ``scrape_interval_s`` (default 2). ``on_progress``: one line per level and per problem.
    ``on_request``: each level's requests done so far. ``engine_exit`` (e.g. the launcher's
    ``exit_description``): None while the engine runs, else how it ended; asked before each level and
    after each request lost to a connection error.
    """

    metrics_url: str | None
    on_progress: Callable[[str], None] | None
    on_request: RequestProgressFn | None
    scrape_interval_s: float
    engine_exit: EngineExitFn | None


async def _run(
    base_url: str,
    model: str,
    slo: SLO,
    run_id: str,
    timeout_s: float,
    seed: int,
    observe: Observe,
    body: Callable[[SuiteContext, Workload, SuiteResult], object],
    max_tokens: int,
    into: SuiteResult | None = None,
) -> SuiteResult:
    base_url = normalize_base_url(base_url)
    metrics_url = observe.get("metrics_url") or base_url + "/metrics"
    on_request = observe.get("on_request")
    result = into if into is not None else SuiteResult()

    def track(scenario: str, level: int, done: int, total: int) -> None:
        result.scenario, result.level, result.done, result.planned = scenario, level, done, total
        if on_request:
            on_request(scenario, level, done, total)

    async with (
        make_session() as session,
        MetricsScraper(metrics_url, observe.get("scrape_interval_s", 2.0)) as scraper,
    ):
        if not model:
            model = await detect_model(session, base_url) or "default"
        result.model = model
        ctx = SuiteContext(
            session, base_url, model, run_id, slo, timeout_s, scraper, observe.get("on_progress"),
            track, observe.get("engine_exit"),
        )  # fmt: skip
        # the same lists the levels append to: a suite interrupted mid-way still shows what it measured
        result.requests, result.aggregates, result.server_metrics = (
            ctx.requests,
            ctx.aggregates,
            ctx.server_metrics,
        )
        try:
            wl = Workload(ServerTokenizer(session, base_url, model), seed)
            await wl.prepare(max_tokens)
            if not wl.exact:
                ctx.errors.append(
                    "workload: the server has no usable /tokenize + /detokenize; input lengths are estimated"
                )
            await body(ctx, wl, result)  # type: ignore[misc]
        except EngineGone as e:  # run_load: one scenario, it stopped where it died
            result.engine_gone = str(e)
        finally:
            await ctx.connections.aclose()
        if result.engine_gone:
            ctx.say(f"suite stopped: {result.engine_gone}")
        if scraper.error:
            ctx.errors.append(scraper.error)
        if ctx.connections.close_each:
            ctx.errors.append(
                "client: the server closes keep-alive connections after a streamed response; one connection "
                f"per request was used ({ctx.connections.stale_retries} request(s) retried once on a new one)"
            )
    result.errors = ctx.errors + result.errors  # the lists of records are ctx's own already
    return result


async def run_suite(
    base_url: str,
    model: str,
    profile: ScenarioProfile,
    slo: SLO,
    run_id: str,
    *,
    scenarios: list[str] | None = None,
    context_length: int | None = None,
    into: SuiteResult | None = None,
    **observe: Unpack[Observe],
) -> SuiteResult:
    """Run the suite's scenarios (default: the profile's list) in the standard order.

    ``context_length`` caps the ladder and prompt lengths; the server's own (per-slot) context is
    detected and the smaller one used. ``into``: the result to fill as the suite goes (returned),
    readable when the suite is interrupted.
    """
    names = [s for s in SCENARIOS if s in (scenarios if scenarios is not None else profile.scenarios)]
    unknown = [s for s in (scenarios or ()) if s not in SCENARIOS]
    base = normalize_base_url(base_url)

    async def body(ctx: SuiteContext, wl: Workload, result: SuiteResult) -> None:
        ctx_len = context_length
        detected = await detect_context_length(ctx.session, base)
        if detected and (ctx_len is None or detected < ctx_len):
            if ctx_len is not None:
                result.errors.append(
                    f"context: the server serves {detected} tokens per request, not {ctx_len}"
                )
            ctx_len = detected
        for u in unknown:
            result.errors.append(f"{u}: unknown scenario, skipped")
        for i, name in enumerate(names):
            result.scenario, result.level, result.done, result.planned = name, None, None, None
            try:
                if name == "smoke":
                    sm = await sc.smoke(ctx, wl, profile)
                    result.smoke_ok, result.smoke_output = sm.ok, sm.output
                else:
                    fn = getattr(sc, name)
                    await fn(ctx, wl, profile, context_length=ctx_len)
            except EngineGone as e:  # nothing more can be measured: stop here, say what was not run
                if name == "smoke":
                    result.smoke_ok = False
                rest = names[i + 1 :]
                result.engine_gone = str(e) + (f"; not run: {', '.join(rest)}" if rest else "")
                return
            except Exception as e:  # noqa: BLE001 - a scenario bug must not lose the other scenarios
                ctx.errors.append(f"{name}: aborted by {type(e).__name__}: {e}")
                ctx.say(f"{name}: aborted by {type(e).__name__}: {e}")
                if name == "smoke":
                    result.smoke_ok = False

    return await _run(
        base,
        model,
        slo,
        run_id,
        profile.request_timeout_s,
        profile.seed,
        observe,
        body,
        _max_prompt_tokens(profile, names),
        into,
    )


def run_suite_sync(
    base_url: str,
    model: str,
    profile: ScenarioProfile,
    slo: SLO,
    run_id: str,
    **kwargs: object,
) -> SuiteResult:
    """``run_suite`` in a fresh event loop (uvloop when installed), for callers that are not async.

    An interrupt raises :class:`SuiteInterrupted` with what was measured before it."""
    partial = SuiteResult()
    try:
        return run_async(run_suite(base_url, model, profile, slo, run_id, into=partial, **kwargs))  # type: ignore[arg-type]
    except Exception:
        raise
    except BaseException as e:
        raise SuiteInterrupted(partial, e) from e


async def run_load(
    base_url: str,
    model: str,
    slo: SLO,
    run_id: str,
    load: DatasetLoad | RandomLoad,
    *,
    timeout_s: float = 600,
    **observe: Unpack[Observe],
) -> SuiteResult:
    """One described load instead of the suite: prompts from a dataset file (``DatasetLoad``, see
    ``load_dataset``) at each concurrency or at one rate, or one level shaped as ``vllm bench serve
    --dataset-name random`` (``RandomLoad``)."""

    async def body(ctx: SuiteContext, wl: Workload, result: SuiteResult) -> None:
        if isinstance(load, DatasetLoad):
            await sc.dataset(ctx, load)
        else:
            await sc.random_dataset(ctx, wl, load)

    # the corpus is prepared up to the longest prompt cut from it; a dataset brings its own text
    longest = max(load.input_lens, default=0) if isinstance(load, RandomLoad) else 0
    return await _run(base_url, model, slo, run_id, timeout_s, load.seed, observe, body, longest)
