"""The standard suite: smoke, concurrency sweep, prefill ladder, decode, prefix cache (+ dataset replay).

Load shapes: a closed loop (N clients, each sends its next request when the previous one ends) and an
open loop (Poisson arrivals at a rate, gamma-distributed gaps for burstiness, as vLLM's benchmark).
Warm-up requests are recorded with ``warmup=True`` and excluded from aggregates. Each level is
bounded by a request count and a duration; every request by ``request_timeout_s``.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from time import perf_counter_ns
from typing import Any

import aiohttp

from strix_pipeline.config import SLO, ScenarioProfile
from strix_pipeline.loadgen.client import ConnectionPolicy, RawExchange, parse_exchange, stream_post
from strix_pipeline.loadgen.metrics import aggregate_level
from strix_pipeline.loadgen.prometheus import MetricsScraper, Scrape, to_samples
from strix_pipeline.loadgen.workloads import Prompt, Workload
from strix_pipeline.records import LevelAggregate, RequestRecord, RequestTable, ServerMetricSample

SCENARIOS = ("smoke", "concurrency_sweep", "prefill_ladder", "decode", "prefix_cache")
CONTEXT_MARGIN = 32  # BOS/template tokens the ladder leaves free below the context length

PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

ProgressFn = Callable[[str], None]
RequestProgressFn = Callable[[str, int, int, int], None]  # scenario, level, done, total
EngineExitFn = Callable[[], str | None]  # None while the engine runs, else how it ended (signal named)

# Failures that may mean the engine is gone (a dead process answers nothing, a dead container's proxy
# resets): after one, the engine's liveness is asked, with a short wait because the kernel closes a
# killed process's sockets a moment before its exit status can be read (docker: before the daemon
# has seen the exit). A timeout or an HTTP status comes from an engine that is still there.
ENGINE_LOST_CLASSES = frozenset({"connection", "stream_cut"})
EXIT_WAIT_S = 2.0


class EngineGone(Exception):
    """The engine ended in the middle of the suite: raised after the level it ended in was recorded,
    so the remaining levels and scenarios are not sent to a dead engine."""

    def __init__(self, how: str, where: str):
        super().__init__(f"{how} during {where}")
        self.how, self.where = how, where


@dataclass
class Planned:
    """A request ready to send: the body is encoded before the clock starts."""

    prompt: Prompt
    path: str  # "/v1/chat/completions" | "/v1/completions"
    body: bytes


@dataclass
class Outcome:
    planned: Planned
    raw: RawExchange
    queue_ns: int
    warmup: bool
    index: int


def request_body(
    model: str,
    prompt: Prompt,
    *,
    chat: bool = True,
    ignore_eos: bool = True,
    json_mode: bool = False,
) -> Planned:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": prompt.output_tokens,
        "temperature": 0.0,
        "stream": True,
        # continuous_usage_stats (vLLM, SGLang): usage on every event, so tokens per event are known even
        # when speculative decoding puts several in one; servers that do not know it ignore it.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True  # fixed output lengths: llama.cpp, vLLM and SGLang all accept it
    if chat:
        body["messages"] = [{"role": "user", "content": prompt.text}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt.text
        path = "/v1/completions"
    if json_mode:
        # A schema, not bare json_object: a small model left free keeps adding keys past max_tokens.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON_SCHEMA},
        }
    return Planned(prompt, path, json.dumps(body).encode())


@dataclass
class SuiteContext:
    session: aiohttp.ClientSession
    base_url: str
    model: str
    run_id: str
    slo: SLO
    timeout_s: float
    scraper: MetricsScraper
    on_progress: ProgressFn | None = None
    on_request: RequestProgressFn | None = None
    engine_exit: EngineExitFn | None = None
    engine_gone: str | None = None  # how the engine ended, once noticed: nothing more is sent
    connections: ConnectionPolicy = field(default_factory=ConnectionPolicy)
    anchor_ns: int = field(default_factory=perf_counter_ns)
    anchor_wall: datetime = field(default_factory=lambda: datetime.now(UTC))
    requests: RequestTable = field(default_factory=RequestTable)
    aggregates: list[LevelAggregate] = field(default_factory=list)
    server_metrics: list[ServerMetricSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # the one check of the engine's liveness in progress, and how long it waits: when an engine dies
    # under 64 streams, the 64 failed requests wait on one check, not 64 threads asking the daemon
    _exit_check: tuple[float, asyncio.Task[str | None]] | None = field(default=None, repr=False)

    def say(self, line: str) -> None:
        if self.on_progress:
            self.on_progress(line)

    async def send(self, p: Planned) -> RawExchange:
        raw = await stream_post(
            self.session, self.base_url + p.path, p.body, self.timeout_s, self.connections
        )
        if raw.error_class in ENGINE_LOST_CLASSES:
            await self.engine_down(wait_s=EXIT_WAIT_S)
        return raw

    async def engine_down(self, *, wait_s: float = 0.0) -> str | None:
        """How the engine ended, or None while it runs (always None without ``engine_exit``).
        Asked in a thread: a Docker engine's answer is a call to the daemon."""
        if self.engine_gone is not None or self.engine_exit is None:
            return self.engine_gone
        running = self._exit_check
        if running is None or running[1].done() or running[0] < wait_s:
            running = self._exit_check = (
                wait_s,
                asyncio.ensure_future(self._poll_exit(self.engine_exit, wait_s)),
            )
        # shielded: a waiter cancelled by an interrupt does not cancel the others' check
        return await asyncio.shield(running[1])

    async def _poll_exit(self, engine_exit: EngineExitFn, wait_s: float) -> str | None:
        deadline = perf_counter_ns() + int(wait_s * 1e9)
        while True:
            how = await asyncio.to_thread(engine_exit)
            if how:
                self.engine_gone = how
                return how
            if perf_counter_ns() >= deadline:
                return None
            await asyncio.sleep(0.1)

    async def ensure_alive(self, where: str) -> None:
        """Raise ``EngineGone`` (nothing sent) when the engine is found dead before ``where`` begins."""
        gone = await self.engine_down()
        if gone:
            raise EngineGone(gone, f"{where}, before its first request")

    def keep_level(
        self, records: list[RequestRecord], scenario: str, level: int, level_kind: str, **options: Any
    ) -> LevelAggregate:
        """Aggregate a measured level with this run's id and SLO (``options``: the rest of
        ``aggregate_level``'s) and keep its records and aggregate in the run's result."""
        agg = aggregate_level(
            records,
            run_id=self.run_id,
            scenario=scenario,
            level=level,
            level_kind=level_kind,
            slo=self.slo,
            **options,
        )
        self.requests += records
        self.aggregates.append(agg)
        return agg

    def keep_scrapes(self, scrapes: list[Scrape], scenario: str, level: int) -> None:
        self.server_metrics += to_samples(scrapes, run_id=self.run_id, scenario=scenario, level=level)

    def fit_context(self, what: str, tokens: int, beside: int, context_length: int | None) -> int:
        """``tokens`` of input (``what``), capped with a note, not an exception, so that with the
        ``beside`` tokens sent or generated along with them and the margin they fit ``context_length``
        (at least 16 tokens are left)."""
        if not context_length or tokens + beside + CONTEXT_MARGIN <= context_length:
            return tokens
        capped = max(16, context_length - beside - CONTEXT_MARGIN)
        self.errors.append(f"{what} {tokens} + {beside} more > context {context_length}, capped at {capped}")
        return capped


async def closed_loop(
    ctx: SuiteContext,
    planned: Sequence[Planned],
    concurrency: int,
    *,
    max_duration_s: float | None = None,
    warmup: bool = False,
    progress: Callable[[int], None] | None = None,
    into: list[Outcome] | None = None,
) -> tuple[list[Outcome], int, int]:
    """``concurrency`` clients share the list; queue time = send - the moment the client became free.
    Returns (outcomes in send order, first send ns, last completion ns). ``into``: the list each
    finished request is appended to, readable when the loop is cancelled."""
    outcomes: list[Outcome] = [] if into is None else into
    next_i = 0
    start = perf_counter_ns()
    deadline = start + int(max_duration_s * 1e9) if max_duration_s else None
    last_end = start

    async def client() -> None:
        nonlocal next_i, last_end
        free_since = perf_counter_ns()
        while next_i < len(planned):
            if deadline is not None and perf_counter_ns() >= deadline:
                return
            if ctx.engine_gone is not None:
                return
            i = next_i
            next_i += 1
            p = planned[i]
            raw = await ctx.send(p)
            outcomes.append(Outcome(p, raw, max(0, raw.sent_ns - free_since), warmup, i))
            free_since = raw.end_ns or perf_counter_ns()
            last_end = max(last_end, free_since)
            if progress:
                progress(len(outcomes))

    await asyncio.gather(*(client() for _ in range(max(1, min(concurrency, len(planned))))))
    outcomes.sort(key=lambda o: o.index)
    first = min((o.raw.sent_ns for o in outcomes), default=start)
    return outcomes, first, last_end


async def open_loop(
    ctx: SuiteContext,
    planned: Sequence[Planned],
    rate: float,
    *,
    burstiness: float = 1.0,
    seed: int = 0,
    max_duration_s: float | None = None,
    progress: Callable[[int], None] | None = None,
    max_concurrency: int | None = None,
    into: list[Outcome] | None = None,
) -> tuple[list[Outcome], int, int]:
    """Arrivals at ``rate`` req/s: gamma gaps with shape ``burstiness`` (1.0 = Poisson) and mean 1/rate;
    at most ``max_concurrency`` in flight when given (an arrival then waits for a slot, as vLLM's
    ``--request-rate`` with ``--max-concurrency``). Queue time = how far behind its schedule a request
    was sent, a wait for a slot included. ``into`` as for ``closed_loop``."""
    rng = random.Random(seed)
    outcomes: list[Outcome] = [] if into is None else into
    start = perf_counter_ns()
    deadline = start + int(max_duration_s * 1e9) if max_duration_s else None
    t = 0.0
    tasks = []
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(i: int, p: Planned, due_ns: int) -> None:
        if slots is not None:
            async with slots:
                if ctx.engine_gone is not None:
                    return
                raw = await ctx.send(p)
        else:
            raw = await ctx.send(p)
        outcomes.append(Outcome(p, raw, max(0, raw.sent_ns - due_ns), False, i))
        if progress:
            progress(len(outcomes))

    for i, p in enumerate(planned):
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        due = start + int(t * 1e9)
        if deadline is not None and due >= deadline:
            break
        delay = (due - perf_counter_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        if ctx.engine_gone is not None:
            break
        tasks.append(asyncio.create_task(one(i, p, due)))
    await asyncio.gather(*tasks)
    outcomes.sort(key=lambda o: o.index)
    first = min((o.raw.sent_ns for o in outcomes), default=start)
    last = max((o.raw.end_ns or start for o in outcomes), default=start)
    return outcomes, first, last


def to_record(
    ctx: SuiteContext,
    scenario: str,
    level: int,
    level_kind: str,
    o: Outcome,
    level_start_ns: int,
    texts: dict[str, str] | None = None,
) -> RequestRecord:
    raw, prompt = o.raw, o.planned.prompt
    p = parse_exchange(raw)
    if texts is not None:
        texts[prompt.prompt_id] = p.text

    def ms(ns: int) -> float:
        return (ns - raw.sent_ns) / 1e6

    usage = p.usage or {}
    out = usage.get("completion_tokens")
    out_est = not isinstance(out, int)
    if out_est:
        # No usage from the server: count content events (a lower bound when events carry several tokens).
        out = (sum(p.content_tokens) or len(p.content_ns)) if p.content_ns else None
    inp = usage.get("prompt_tokens")
    inp_est = not isinstance(inp, int)
    if inp_est:
        inp = prompt.measured_tokens or prompt.target_tokens
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None and p.timings and isinstance(p.timings.get("cache_n"), int):
        cached = p.timings["cache_n"]  # llama-server: prompt tokens reused from the slot's cache
    if p.content_tokens:
        ev_tokens = p.content_tokens
    elif not out_est and out == len(p.content_ns):
        ev_tokens = [1] * len(p.content_ns)  # every content event carries >= 1 token, so exactly 1
    else:
        ev_tokens = []
    return RequestRecord(
        run_id=ctx.run_id,
        scenario=scenario,
        level=level,
        level_kind=level_kind,
        request_index=o.index,
        warmup=o.warmup,
        sent_at=ctx.anchor_wall + timedelta(microseconds=(raw.sent_ns - ctx.anchor_ns) / 1000),
        sent_offset_ms=(raw.sent_ns - level_start_ns) / 1e6,
        queue_ms=o.queue_ns / 1e6,
        ttfb_ms=ms(p.ttfb_ns) if p.ttfb_ns else None,
        ttft_ms=ms(p.content_ns[0]) if p.content_ns else None,
        e2e_ms=ms(p.content_ns[-1]) if p.content_ns else None,
        input_tokens=inp,
        input_tokens_estimated=inp_est,
        output_tokens=out,
        output_tokens_estimated=out_est,
        cached_tokens=cached,
        ok=p.ok,
        error_class=p.error_class,
        error_message=p.error_message,
        event_offsets_ms=[ms(t) for t in p.content_ns],
        event_tokens=ev_tokens,
        server_timings=json.dumps(p.timings) if p.timings else None,
        prompt_id=prompt.prompt_id,
    )


async def run_level(
    ctx: SuiteContext,
    scenario: str,
    level: int,
    level_kind: str,
    planned: Sequence[Planned],
    *,
    concurrency: int = 1,
    warmup: Sequence[Planned] = (),
    rate: float | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    max_duration_s: float | None = None,
    label: str | None = None,
    texts: dict[str, str] | None = None,
    max_concurrency: int | None = None,
) -> tuple[list[RequestRecord], LevelAggregate]:
    """Warm-up, then the measured requests with metrics scraped before/during/after; records + aggregate.

    An engine found dead before the level raises ``EngineGone`` with nothing sent. One that dies
    during it stops the level (nothing is sent once that is noticed); the level is recorded with its
    ``stopped_reason``, then ``EngineGone`` is raised."""
    label = label or f"{scenario} {level_kind}={level}"
    where = f"{scenario} level {level}"
    await ctx.ensure_alive(where)
    total = len(planned)
    if warmup:
        w_out, w_start, _ = await closed_loop(ctx, warmup, concurrency, warmup=True)
        ctx.requests += [to_record(ctx, scenario, level, level_kind, o, w_start) for o in w_out]
        if ctx.engine_gone is not None:
            planned = planned[:0]  # the warm-up met the dead engine: no measured request is sent
    scrapes: list[Scrape] = []
    await ctx.scraper.scrape_into(scrapes, "before")
    stop = asyncio.Event()
    during = asyncio.create_task(ctx.scraper.during(scrapes, stop))

    def progress(done: int) -> None:
        if ctx.on_request:
            ctx.on_request(scenario, level, done, total)

    progress(0)
    finished: list[Outcome] = []  # each request as it finishes: an interrupted level still has them
    interrupted: asyncio.CancelledError | None = None
    try:
        if rate is not None:
            outcomes, first, last = await open_loop(
                ctx,
                planned,
                rate,
                burstiness=burstiness,
                seed=seed,
                max_duration_s=max_duration_s,
                progress=progress,
                max_concurrency=max_concurrency,
                into=finished,
            )
        else:
            outcomes, first, last = await closed_loop(
                ctx, planned, concurrency, max_duration_s=max_duration_s, progress=progress, into=finished
            )
    except asyncio.CancelledError as e:
        # An interrupt (Ctrl-C, the orchestrator's terminate) cancels the loop: the requests that had
        # finished are kept as the level's, with where it stopped; those in flight were cut by the
        # client itself and measure nothing of the engine, so they are not records.
        interrupted = e
        outcomes = sorted(finished, key=lambda o: o.index)
        first = min((o.raw.sent_ns for o in outcomes), default=0)
        last = max((o.raw.end_ns or first for o in outcomes), default=first)
    finally:
        stop.set()
        await during
    stopped = None
    gone = ctx.engine_gone
    if interrupted is not None:
        stopped = stopped_after(len(outcomes), total, "cancelled")
    elif gone is not None and len(outcomes) < total:  # the suite's own headline says it, once
        stopped = stopped_after(len(outcomes), total, gone)
    elif len(outcomes) < total:
        stopped = f"stopped at max duration {max_duration_s:g}s after {len(outcomes)}/{total} requests"
        ctx.errors.append(f"{label}: {stopped}")
    if interrupted is None:
        await ctx.scraper.scrape_into(scrapes, "after")
    records = [to_record(ctx, scenario, level, level_kind, o, first, texts) for o in outcomes]
    agg = ctx.keep_level(
        records,
        scenario,
        level,
        level_kind,
        duration_s=(last - first) / 1e9 if outcomes else None,
        requested_rate=rate,
        planned=total,
        stopped_reason=stopped,
    )
    ctx.keep_scrapes(scrapes, scenario, level)
    ctx.say(describe(label, agg, records) + (f"; {stopped}" if interrupted is not None else ""))
    if interrupted is not None:
        raise interrupted
    if gone is not None:
        raise EngineGone(gone, f"{where} ({len(outcomes)} of {total} requests sent)")
    return records, agg


def stopped_after(done: int, planned: int, why: str | None) -> str:
    """A level's ``stopped_reason`` when the engine died or the run was cancelled in it."""
    return f"stopped after {done}/{planned} requests: {why}"


def describe(label: str, agg: LevelAggregate, records: Sequence[RequestRecord]) -> str:
    def f(v: float | None, unit: str = "ms") -> str:
        return "n/a" if v is None else f"{v:.1f} {unit}"

    line = (
        f"{label}: {agg.requests_ok} ok, {agg.requests_failed} failed; TTFT p50 {f(agg.ttft_p50_ms)} "
        f"p95 {f(agg.ttft_p95_ms)}; TPOT p50 {f(agg.tpot_p50_ms)}; {f(agg.output_tokens_per_s, 'tok/s')}"
    )
    if agg.prefill_tokens_per_s:
        line += f"; prefill {agg.prefill_tokens_per_s:.0f} tok/s"
    if agg.decode_tokens_per_s:
        line += f"; decode {agg.decode_tokens_per_s:.1f} tok/s"
    errs = sorted({r.error_class or "" for r in records if not r.ok and not r.warmup})
    if errs:
        line += f"; errors: {', '.join(errs)}"
    return line


# --- the five scenarios ------------------------------------------------------------------------------


@dataclass
class SmokeResult:
    ok: bool
    output: str


async def smoke(ctx: SuiteContext, wl: Workload, profile: ScenarioProfile) -> SmokeResult:
    """One text request (non-empty text) and, when asked, one JSON request (output must parse)."""
    spec = profile.smoke
    text_prompt = Prompt(
        wl.new_id("smoke"), "Write one short sentence about the sea.", None, None, spec.output_tokens
    )
    planned = [request_body(ctx.model, text_prompt, ignore_eos=False)]
    if spec.json_check:
        # A JSON object needs room to close: at least 64 tokens whatever the text check uses.
        jp = wl.json_prompt(max(64, spec.output_tokens))
        planned.append(request_body(ctx.model, jp, ignore_eos=False, json_mode=True))
    texts: dict[str, str] = {}
    assert len(planned) == spec.requests  # what benchmark_complete expects of a smoke level
    records, _ = await run_level(ctx, "smoke", 1, "single", planned, label="smoke", texts=texts)
    ok = bool(records) and all(r.ok for r in records)
    main = texts.get(text_prompt.prompt_id, "")
    if not main.strip():
        ok = False
        ctx.errors.append("smoke: the text request produced no text")
    if spec.json_check:
        jtext = texts.get(planned[1].prompt.prompt_id, "")
        try:
            json.loads(jtext)
        except ValueError:
            ok = False
            ctx.errors.append(f"smoke: the JSON request did not return valid JSON: {jtext[:200]!r}")
    return SmokeResult(ok, main[:2000])


async def concurrency_sweep(
    ctx: SuiteContext, wl: Workload, profile: ScenarioProfile, *, context_length: int | None = None
) -> None:
    spec = profile.concurrency_sweep
    n_in = ctx.fit_context("concurrency_sweep: input", spec.input_tokens, spec.output_tokens, context_length)
    for c in spec.levels:
        warm = [
            request_body(ctx.model, await wl.code_prompt(n_in, spec.output_tokens))
            for _ in range(spec.warmup)
        ]
        planned = [
            request_body(ctx.model, await wl.code_prompt(n_in, spec.output_tokens))
            for _ in range(spec.requests_for(c))
        ]
        await run_level(
            ctx, "concurrency_sweep", c, "concurrency", planned, concurrency=c, warmup=warm,
            max_duration_s=spec.max_duration_for(c), label=f"concurrency_sweep c={c}",
        )  # fmt: skip


def ladder_levels(
    requested: Sequence[int], context_length: int | None, output_tokens: int
) -> tuple[list[int], str | None]:
    """Requested input lengths that fit the context; longer ones are replaced by the cap, once."""
    if not context_length:
        return list(requested), None
    cap = context_length - output_tokens - CONTEXT_MARGIN
    levels = [n for n in requested if n <= cap]
    over = [n for n in requested if n > cap]
    if not over:
        return levels, None
    if cap > 0 and cap not in levels:
        levels.append(cap)
    return levels, f"prefill_ladder: {', '.join(map(str, over))} > context {context_length}, capped at {cap}"


async def prefill_ladder(
    ctx: SuiteContext, wl: Workload, profile: ScenarioProfile, *, context_length: int | None = None
) -> None:
    spec = profile.prefill_ladder
    levels, note = ladder_levels(spec.input_tokens, context_length, spec.output_tokens)
    if note:
        ctx.errors.append(note)
    for n in levels:
        # Raw prompts (/v1/completions): the input length is the prompt, no chat template around it.
        planned = [
            request_body(ctx.model, await wl.code_prompt(n, spec.output_tokens, kind="ladder"), chat=False)
            for _ in range(spec.requests_per_level)
        ]
        await run_level(ctx, "prefill_ladder", n, "input_tokens", planned, label=f"prefill_ladder {n} tokens")


async def decode(
    ctx: SuiteContext, wl: Workload, profile: ScenarioProfile, *, context_length: int | None = None
) -> None:
    spec = profile.decode
    n_in = ctx.fit_context("decode: input", spec.input_tokens, spec.output_tokens, context_length)
    planned = [
        request_body(ctx.model, await wl.code_prompt(n_in, spec.output_tokens, kind="decode"))
        for _ in range(spec.requests)
    ]
    await run_level(ctx, "decode", 1, "single", planned, label="decode")


async def prefix_cache(
    ctx: SuiteContext, wl: Workload, profile: ScenarioProfile, *, context_length: int | None = None
) -> None:
    """Per repeat: a prefix never sent before (cold), then the same prefix with another suffix (warm).
    Pairs run back to back so the warm request finds the prefix still cached. Level 0 = cold, 1 = warm."""
    spec = profile.prefix_cache
    n_prefix = ctx.fit_context(
        "prefix_cache: prefix", spec.prefix_tokens, spec.suffix_tokens + spec.output_tokens, context_length
    )
    pairs: list[Planned] = []
    for _ in range(spec.repeats):
        _, prefix = await wl.shared_prefix(n_prefix)
        for phase in ("cold", "warm"):
            suffix, _ = await wl.corpus_text(spec.suffix_tokens)
            text = f"{prefix}\n\n# question ({phase})\n{suffix}"
            target = n_prefix + spec.suffix_tokens
            prompt = Prompt(wl.new_id(f"prefix-{phase}"), text, target, None, spec.output_tokens)
            pairs.append(request_body(ctx.model, prompt, chat=False))
    await ctx.ensure_alive("prefix_cache")
    scrapes: list[Scrape] = []
    await ctx.scraper.scrape_into(scrapes, "before")
    total = len(pairs)
    if ctx.on_request:
        ctx.on_request("prefix_cache", 0, 0, total)
    outcomes: list[Outcome] = []
    interrupted: asyncio.CancelledError | None = None
    try:
        for i, p in enumerate(pairs):
            if ctx.engine_gone is not None:
                break
            raw = await ctx.send(p)
            outcomes.append(Outcome(p, raw, 0, False, i))
            if ctx.on_request:
                ctx.on_request("prefix_cache", 0, i + 1, total)
    except asyncio.CancelledError as e:  # an interrupt: what finished is kept below, as in run_level
        interrupted = e
    if interrupted is None:
        await ctx.scraper.scrape_into(scrapes, "after")
    ctx.keep_scrapes(scrapes, "prefix_cache", 0)
    start = outcomes[0].raw.sent_ns if outcomes else 0
    gone = "cancelled" if interrupted is not None else ctx.engine_gone
    for phase_level, phase in ((0, "cold"), (1, "warm")):
        chosen = [o for o in outcomes if o.index % 2 == phase_level]
        records = [to_record(ctx, "prefix_cache", phase_level, "phase", o, start) for o in chosen]
        planned_n = spec.repeats
        stopped = None
        if len(chosen) < planned_n:
            stopped = stopped_after(len(chosen), planned_n, gone)
        agg = ctx.keep_level(
            records, "prefix_cache", phase_level, "phase", planned=planned_n, stopped_reason=stopped
        )
        line = describe(f"prefix_cache {phase}", agg, records)
        if agg.cached_tokens_mean is not None:
            line += f"; cached {agg.cached_tokens_mean:.0f} tokens"
        ctx.say(line)
    if interrupted is not None:
        raise interrupted
    if gone is not None:
        raise EngineGone(gone, f"prefix_cache ({len(outcomes)} of {total} requests sent)")


@dataclass(frozen=True)
class DatasetLoad:
    """How ``dataset`` sends ``prompts``: ``requests`` of them (default: the file's count, cycling) at each
    concurrency in ``levels``, or an open loop at ``rate`` requests/s (``burstiness``: the gamma shape,
    1 = Poisson, drawn from ``seed``); ``warmup`` requests first, excluded from the aggregate; a level
    stops after ``max_duration_s``."""

    prompts: Sequence[Prompt]
    levels: Sequence[int] = (1,)
    requests: int | None = None
    warmup: int = 0
    rate: float | None = None
    burstiness: float = 1.0
    seed: int = 1234
    max_duration_s: float | None = None


async def dataset(ctx: SuiteContext, load: DatasetLoad) -> None:
    """Replay user prompts (chat), cycling through the file, at each concurrency (or one rate)."""
    prompts = load.prompts
    n = load.requests or len(prompts)

    # Each send of a dataset prompt is a fresh request; the server may cache repeats, as it would live.
    def pick(k: int) -> list[Planned]:
        return [request_body(ctx.model, prompts[i % len(prompts)]) for i in range(k)]

    if load.rate is not None:
        level = round(load.rate * 60)  # requests per minute: an integer level that still reads as a rate
        await run_level(
            ctx, "dataset", level, "rate", pick(n), rate=load.rate, burstiness=load.burstiness, seed=load.seed,
            max_duration_s=load.max_duration_s, label=f"dataset rate={load.rate:g}/s", warmup=pick(load.warmup),
        )  # fmt: skip
        return
    for c in load.levels:
        await run_level(
            ctx, "dataset", c, "concurrency", pick(n), concurrency=c, warmup=pick(load.warmup),
            max_duration_s=load.max_duration_s, label=f"dataset c={c}",
        )  # fmt: skip


@dataclass(frozen=True)
class RandomLoad:
    """vLLM's ``--dataset-name random`` shape: one level of ``len(input_lens)`` requests of the given
    input/output token lengths (corpus prompts of exact length, ``ignore_eos``), sent to ``path``
    (default /v1/completions, or /v1/chat/completions with ``chat``). No rate: ``max_concurrency``
    clients (all at once without it); a rate: an open loop (``burstiness``, ``seed`` as in
    ``DatasetLoad``), capped at ``max_concurrency`` in flight when given. ``warmups`` (excluded from
    the aggregate) use the first length."""

    input_lens: Sequence[int]
    output_lens: Sequence[int]
    chat: bool = False
    path: str | None = None
    warmups: int = 0
    rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 1234


async def random_dataset(ctx: SuiteContext, wl: Workload, load: RandomLoad) -> None:
    path = load.path or ("/v1/chat/completions" if load.chat else "/v1/completions")
    cap = load.max_concurrency

    async def planned(n_in: int, n_out: int) -> Planned:
        p = request_body(ctx.model, await wl.code_prompt(n_in, n_out, kind="random"), chat=load.chat)
        return Planned(p.prompt, path, p.body)

    warm = [await planned(load.input_lens[0], load.output_lens[0]) for _ in range(load.warmups)]
    plan = [await planned(i, o) for i, o in zip(load.input_lens, load.output_lens, strict=True)]
    if load.rate is None:
        c = cap or len(plan)
        await run_level(
            ctx, "random", c, "concurrency", plan, concurrency=c, warmup=warm, label=f"random c={c}"
        )
        return
    await run_level(
        ctx, "random", round(load.rate * 60), "rate", plan, concurrency=cap or max(1, len(warm)), warmup=warm,
        rate=load.rate, burstiness=load.burstiness, seed=load.seed, max_concurrency=cap,
        label=f"random rate={load.rate:g}/s" + (f" max_concurrency={cap}" if cap else ""),
    )  # fmt: skip
