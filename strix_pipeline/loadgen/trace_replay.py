"""The ``trace`` scenario: a recorded trace (``strix workload import``) replayed against the engine.

Each request keeps its recorded input length, output length (``max_tokens`` with ``ignore_eos``) and
prefix: requests whose trace shares the first k prefix blocks (``BLOCK_TOKENS`` tokens each) send the
identical first k blocks of text, so a prefix cache (vLLM's, llama-server's slot cache) hits as it
did in production, and a request without shared blocks starts with a unique tag. Block b's text is a
corpus slice at an offset drawn from (seed, b), the same in every run and on every engine.

Lengths are token-exact when the server tokenizes (``Workload.exact``): a prompt is built as a list of
the server's own tokens and detokenized once, so re-tokenizing it differs from the target only where
two slices meet (at most one token per block boundary) and by the BOS the server adds; otherwise
lengths are estimated from the corpus's characters per token, as for the synthetic prompts.

Requests are sent at their recorded arrival offsets times ``time_scale`` (open loop), or by
``concurrency`` closed-loop clients (default: the trace's recorded mean concurrency). A request whose
input and output do not fit the served context is shortened to fit, once noted.
"""

from __future__ import annotations

import random

from strix_pipeline.config import ScenarioProfile, TraceSpec
from strix_pipeline.loadgen.context import CONTEXT_MARGIN, SuiteContext, request_body
from strix_pipeline.loadgen.level import run_level
from strix_pipeline.loadgen.workloads import Prompt, Workload
from strix_pipeline.traces.model import Trace, TraceRequest
from strix_pipeline.traces.summary import concurrency


class TracePrompts:
    """Prompts of a trace's lengths whose shared prefix blocks are identical text."""

    def __init__(self, wl: Workload, block_tokens: int, seed: int) -> None:
        self.wl, self.block_tokens, self.seed = wl, block_tokens, seed
        self._blocks: dict[int, int] = {}  # block id -> its corpus offset (tokens, or characters)

    def _offset(self, block: int, length: int) -> int:
        if block not in self._blocks:
            span = max(1, length - self.block_tokens * 5)
            self._blocks[block] = random.Random(f"{self.seed}:{block}").randrange(span)
        return self._blocks[block]

    async def prompt(self, r: TraceRequest, n_in: int, n_out: int) -> Prompt:
        wl, b = self.wl, self.block_tokens
        blocks = [(blk, min(b, n_in - j * b)) for j, blk in enumerate(r.prefix_blocks) if n_in - j * b > 0]
        if not blocks:
            return await wl.code_prompt(n_in, n_out, kind="trace")
        pid = wl.new_id("trace")
        tail_n = n_in - sum(n for _, n in blocks)
        if wl.corpus_tokens is not None and wl.tok is not None:
            toks = wl.corpus_tokens
            ids: list[int] = []
            for blk, n in blocks:
                off = self._offset(blk, len(toks))
                ids += toks[off : off + n]
            if tail_n > 0:
                off = wl.rng.randrange(max(1, len(toks) - tail_n))
                ids += toks[off : off + tail_n]
            text = await wl.tok.detokenize(ids)
            if text is not None:
                return Prompt(pid, text, n_in, n_in, n_out)
        cpt = wl.chars_per_token
        parts = []
        for blk, n in blocks:
            off = self._offset(blk, int(len(wl.corpus) / cpt))
            start = int(off * cpt)
            parts.append(wl.corpus[start : start + int(n * cpt)])
        tail, _ = await wl.corpus_text(tail_n)
        return Prompt(pid, "".join(parts) + tail, n_in, None, n_out)


def fit(r: TraceRequest, context_length: int | None) -> tuple[int, int]:
    """(input, output) tokens of ``r`` shortened to fit the context (input first, at least 16 kept)."""
    n_in, n_out = r.input_tokens, r.output_tokens
    if not context_length or n_in + n_out + CONTEXT_MARGIN <= context_length:
        return n_in, n_out
    n_in = max(16, context_length - n_out - CONTEXT_MARGIN)
    n_out = max(1, min(n_out, context_length - n_in - CONTEXT_MARGIN))
    return n_in, n_out


def replay_concurrency(spec: TraceSpec, trace: Trace) -> int:
    if spec.concurrency:
        return spec.concurrency
    mean, _ = concurrency(trace)
    if mean is None:
        raise ValueError(
            f"trace {spec.name}: the file records no serving times, so no concurrency; set trace.concurrency"
        )
    return max(1, round(mean))


async def trace(
    ctx: SuiteContext, wl: Workload, profile: ScenarioProfile, *, context_length: int | None = None
) -> None:
    spec = profile.trace
    if spec is None or ctx.trace is None:
        raise ValueError("trace: the profile names no trace, or it was not loaded")
    recorded = ctx.trace
    requests = recorded.requests[: spec.max_requests] if spec.max_requests else recorded.requests
    sized = [fit(r, context_length) for r in requests]
    capped = sum(
        1 for r, (i, o) in zip(requests, sized, strict=True) if (i, o) != (r.input_tokens, r.output_tokens)
    )
    if capped:
        ctx.errors.append(
            f"trace {spec.name}: {capped} request(s) shortened to fit the context {context_length}"
        )
    builder = TracePrompts(wl, recorded.block_tokens, profile.seed)
    planned = [
        request_body(ctx.model, await builder.prompt(r, i, o), chat=spec.chat)
        for r, (i, o) in zip(requests, sized, strict=True)
    ]
    if spec.replay == "arrivals":
        if not recorded.has_arrivals:
            raise ValueError(
                f'trace {spec.name}: the file has no arrival times; set trace.replay = "concurrency"'
            )
        offsets = [(r.arrival_s or 0.0) * spec.time_scale for r in requests]
        rate = (len(offsets) - 1) / offsets[-1] if offsets[-1] > 0 else None
        await run_level(
            ctx,
            "trace",
            round(rate * 60) if rate else 0,
            "rate",
            planned,
            arrivals_s=offsets,
            max_duration_s=spec.max_duration_s,
            label=f"trace {spec.name} recorded arrivals x{spec.time_scale:g}",
        )
        return
    c = replay_concurrency(spec, recorded)
    await run_level(
        ctx,
        "trace",
        c,
        "concurrency",
        planned,
        concurrency=c,
        max_duration_s=spec.max_duration_s,
        label=f"trace {spec.name} c={c}",
    )


def longest_prompt(trace: Trace) -> int:
    return max((r.input_tokens for r in trace.requests), default=0)
