"""Driving one level: its load shape, its warm-up, the metrics scraped around it, its records and aggregate.

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
from datetime import timedelta
from time import perf_counter_ns

from strix_pipeline.loadgen.client import parse_exchange
from strix_pipeline.loadgen.context import ENGINE_LOST_CLASSES, EngineGone, Outcome, Planned, SuiteContext
from strix_pipeline.loadgen.prometheus import Scrape
from strix_pipeline.records import LevelAggregate, RequestRecord


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
            ended = raw.end_ns or perf_counter_ns()
            last_end = max(last_end, ended)
            # after a lost stream ctx.send waited (EXIT_WAIT_S) to learn whether the engine died: that
            # wait is the harness's, so the next request's queue time starts once it is over
            free_since = perf_counter_ns() if raw.error_class in ENGINE_LOST_CLASSES else ended
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
    offsets_s: Sequence[float] | None = None,
) -> tuple[list[Outcome], int, int]:
    """Arrivals at ``rate`` req/s: gamma gaps with shape ``burstiness`` (1.0 = Poisson) and mean 1/rate,
    or at the given ``offsets_s`` after the start (a recorded trace's; ``rate`` is then unused); at most
    ``max_concurrency`` in flight when given (an arrival then waits for a slot, as vLLM's
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
        if offsets_s is not None:
            t = offsets_s[i]
        else:
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
    arrivals_s: Sequence[float] | None = None,
) -> tuple[list[RequestRecord], LevelAggregate]:
    """Warm-up, then the measured requests with metrics scraped before/during/after; records + aggregate.
    Closed loop at ``concurrency``, or open: at ``rate``, or at ``arrivals_s`` (each request's send
    time after the level's start).

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
        if rate is not None or arrivals_s is not None:
            outcomes, first, last = await open_loop(
                ctx,
                planned,
                rate or 0.0,
                offsets_s=arrivals_s,
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
