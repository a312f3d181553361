"""The scenario catalogue: smoke, concurrency sweep, prefill ladder, decode, prefix cache, a recorded
trace's replay (``trace_replay``) and the evaluation set (``quality``).

``SCENARIOS`` names each one's function, in the order the suite runs them; each builds its requests
from the profile and drives its levels (``loadgen.level``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol

from strix_pipeline.config import ScenarioProfile, rate_level
from strix_pipeline.loadgen.context import (
    CONTEXT_MARGIN,
    EngineGone,
    Outcome,
    Planned,
    SuiteContext,
    request_body,
)
from strix_pipeline.loadgen.level import describe, run_level, stopped_after, to_record
from strix_pipeline.loadgen.prometheus import Scrape
from strix_pipeline.loadgen.quality import QualityResult, quality
from strix_pipeline.loadgen.trace_replay import trace
from strix_pipeline.loadgen.workloads import Prompt, Workload


@dataclass
class SmokeResult:
    ok: bool
    output: str


async def smoke(
    ctx: SuiteContext, wl: Workload, profile: ScenarioProfile, *, context_length: int | None = None
) -> SmokeResult:
    """One text request (non-empty text) and, when asked, one JSON request (output must parse).
    ``context_length`` is not needed: both prompts are short."""
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
            ctx,
            "concurrency_sweep",
            c,
            "concurrency",
            planned,
            concurrency=c,
            warmup=warm,
            max_duration_s=spec.max_duration_for(c),
            label=f"concurrency_sweep c={c}",
        )
    # the open-loop levels: Poisson arrivals at each rate (the SLO criterion's load when given as a rate)
    for rate in spec.rates:
        warm = [
            request_body(ctx.model, await wl.code_prompt(n_in, spec.output_tokens))
            for _ in range(spec.warmup)
        ]
        planned = [
            request_body(ctx.model, await wl.code_prompt(n_in, spec.output_tokens))
            for _ in range(spec.requests_per_level)
        ]
        await run_level(
            ctx,
            "concurrency_sweep",
            rate_level(rate),
            "rate",
            planned,
            concurrency=max(1, spec.warmup),
            warmup=warm,
            rate=rate,
            seed=profile.seed,
            max_duration_s=spec.max_duration_s,
            label=f"concurrency_sweep rate={rate:g}/s",
        )


# a cap this close above the longest level that fits measures nothing new (see ladder_levels)
CAP_SAME = 0.05


def ladder_levels(
    requested: Sequence[int], context_length: int | None, output_tokens: int
) -> tuple[list[int], str | None]:
    """Requested input lengths that fit the context; longer ones are replaced by the cap, once -- unless
    the largest length that fits is within CAP_SAME of the cap: that level already measures it, and a
    second prefill as long (minutes at 32K on a CPU) would add nothing (a 32K+1K context's 64K level)."""
    if not context_length:
        return list(requested), None
    cap = context_length - output_tokens - CONTEXT_MARGIN
    levels = [n for n in requested if n <= cap]
    over = [n for n in requested if n > cap]
    if not over:
        return levels, None
    head = f"prefill_ladder: {', '.join(map(str, over))} > context {context_length}"
    if levels and cap <= max(levels) * (1 + CAP_SAME):
        return levels, f"{head}, not sent: the {max(levels)}-token level is the longest that fits ({cap})"
    if cap > 0 and cap not in levels:
        levels.append(cap)
    return levels, f"{head}, capped at {cap}"


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


class Scenario(Protocol):
    """A scenario of the suite: it sends its levels through ``ctx`` (capping prompt lengths at
    ``context_length``); the smoke answers whether the engine serves text, the quality scenario how
    many items of the evaluation set it answers."""

    def __call__(
        self, ctx: SuiteContext, wl: Workload, profile: ScenarioProfile, *, context_length: int | None = None
    ) -> Awaitable[SmokeResult | QualityResult | None]: ...


# name -> scenario, in the order the suite runs them (the names ScenarioProfile.scenarios accepts)
SCENARIOS: dict[str, Scenario] = {
    "smoke": smoke,
    "concurrency_sweep": concurrency_sweep,
    "prefill_ladder": prefill_ladder,
    "decode": decode,
    "prefix_cache": prefix_cache,
    "trace": trace,
    "quality": quality,
}
