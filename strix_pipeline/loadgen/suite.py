"""The suite's entry points: ``run_suite`` (the scenarios of a profile), ``run_load`` (one described load),
``run_suite_sync`` (``run_suite`` in its own event loop), and what they return.

Requests never raise out of the suite: a server that fails produces failed request records.
``engine_exit`` tells whether the engine still runs: one found dead stops the suite at that level,
recorded in ``SuiteResult.engine_gone``. What is retried: ``client.RETRY_POLICY``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, Unpack

from strix_pipeline.config import SLO, ScenarioProfile
from strix_pipeline.loadgen.client import make_session
from strix_pipeline.loadgen.context import EngineExitFn, EngineGone, RequestProgressFn, SuiteContext
from strix_pipeline.loadgen.loads import DatasetLoad, RandomLoad, dataset, random_dataset
from strix_pipeline.loadgen.loop import run as run_async
from strix_pipeline.loadgen.prometheus import MetricsScraper
from strix_pipeline.loadgen.quality import QualityResult
from strix_pipeline.loadgen.scenarios import SCENARIOS, SmokeResult
from strix_pipeline.loadgen.server import detect_context_length, detect_model, normalize_base_url
from strix_pipeline.loadgen.workloads import ServerTokenizer, Workload
from strix_pipeline.records import LevelAggregate, QualityAnswer, RequestTable, ServerMetricSample
from strix_pipeline.traces.model import Trace, TraceError
from strix_pipeline.traces.store import load_trace


@dataclass
class SuiteResult:
    requests: RequestTable = field(default_factory=RequestTable)
    aggregates: list[LevelAggregate] = field(default_factory=list)
    server_metrics: list[ServerMetricSample] = field(default_factory=list)
    smoke_ok: bool | None = None  # None if smoke not run
    smoke_output: str | None = None  # the text the smoke request produced (first 2000 chars)
    quality: list[QualityAnswer] = field(default_factory=list)  # the evaluation set's answers
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


class SuiteInterrupted(BaseException):  # it wraps an interrupt, it is not an error: no Error in its name
    """The suite was interrupted (Ctrl-C, an orchestrator's termination): ``partial`` holds what it
    measured before -- every finished level's records and aggregates -- and where it was;
    ``interrupt`` is the exception the interrupt raised, for the caller to raise again."""

    def __init__(self, partial: SuiteResult, interrupt: BaseException) -> None:
        super().__init__(f"suite interrupted by {type(interrupt).__name__} at {partial.position()}")
        self.partial, self.interrupt = partial, interrupt


def _max_prompt_tokens(profile: ScenarioProfile, names: Sequence[str], trace: Trace | None = None) -> int:
    n = 512
    if "trace" in names and trace is not None:
        n = max(n, *(r.input_tokens for r in trace.requests))
    if "concurrency_sweep" in names:
        n = max(n, profile.concurrency_sweep.input_tokens)
    if "prefill_ladder" in names:
        n = max(n, *profile.prefill_ladder.input_tokens)
    if "decode" in names:
        n = max(n, profile.decode.input_tokens)
    if "prefix_cache" in names:
        n = max(n, profile.prefix_cache.prefix_tokens + profile.prefix_cache.suffix_tokens)
    return n


class Watchers(TypedDict, total=False):
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
    observe: Watchers,
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
            session,
            base_url,
            model,
            run_id,
            slo,
            timeout_s,
            scraper,
            observe.get("on_progress"),
            track,
            observe.get("engine_exit"),
        )
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
            # also when interrupted: a cancelled run's failure_reason keeps what the suite noted (capped
            # contexts, max-duration and cancel stops, the scraper's error)
            await ctx.connections.aclose()
            if scraper.error:
                ctx.errors.append(scraper.error)
            if ctx.connections.close_each:
                ctx.errors.append(
                    "client: the server closes keep-alive connections after a streamed response; one "
                    f"connection per request was used ({ctx.connections.stale_retries} request(s) retried "
                    "once on a new one)"
                )
            result.errors = ctx.errors + result.errors  # the lists of records are ctx's own already
        if result.engine_gone:
            ctx.say(f"suite stopped: {result.engine_gone}")
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
    traces_dir: Path | None = None,
    **observe: Unpack[Watchers],
) -> SuiteResult:
    """Run the suite's scenarios (default: the profile's list) in the standard order.

    ``context_length`` caps the ladder and prompt lengths; the server's own (per-slot) context is
    detected and the smaller one used. ``into``: the result to fill as the suite goes (returned),
    readable when the suite is interrupted. ``traces_dir``: where imported traces are
    (``StrixConfig.traces_dir``), read when the profile replays one; without it, or when the trace
    was never imported, the ``trace`` scenario is skipped with the reason in ``errors``.
    """
    names = [s for s in SCENARIOS if s in (scenarios if scenarios is not None else profile.scenarios)]
    unknown = [s for s in (scenarios or ()) if s not in SCENARIOS]
    base = normalize_base_url(base_url)
    recorded: Trace | None = None
    trace_note: str | None = None
    if "trace" in names and profile.trace is not None:
        if traces_dir is None:
            trace_note = f"trace {profile.trace.name}: not replayed, no folder of imported traces was given"
        else:
            try:
                recorded, _ = load_trace(traces_dir, profile.trace.name)
            except TraceError as e:
                trace_note = f"trace {profile.trace.name}: not replayed: {e}"

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
        ctx.trace = recorded
        for i, name in enumerate(names):
            if name == "trace" and recorded is None:
                result.errors.append(trace_note or "trace: the profile names no trace, skipped")
                continue
            result.scenario, result.level, result.done, result.planned = name, None, None, None
            try:
                answer = await SCENARIOS[name](ctx, wl, profile, context_length=ctx_len)
                if isinstance(answer, SmokeResult):
                    result.smoke_ok, result.smoke_output = answer.ok, answer.output
                elif isinstance(answer, QualityResult):
                    result.quality = answer.answers
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
        _max_prompt_tokens(profile, names, recorded),
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
    **observe: Unpack[Watchers],
) -> SuiteResult:
    """One described load instead of the suite: prompts from a dataset file (``DatasetLoad``, see
    ``load_dataset``) at each concurrency or at one rate, or one level shaped as ``vllm bench serve
    --dataset-name random`` (``RandomLoad``)."""

    async def body(ctx: SuiteContext, wl: Workload, result: SuiteResult) -> None:
        if isinstance(load, DatasetLoad):
            await dataset(ctx, load)
        else:
            await random_dataset(ctx, wl, load)

    # the corpus is prepared up to the longest prompt cut from it; a dataset brings its own text
    longest = max(load.input_lens, default=0) if isinstance(load, RandomLoad) else 0
    return await _run(base_url, model, slo, run_id, timeout_s, load.seed, observe, body, longest)
