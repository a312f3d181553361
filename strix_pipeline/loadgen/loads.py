"""Described loads instead of the suite: a dataset file's prompts replayed, or vLLM's random dataset shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strix_pipeline.loadgen.context import Planned, SuiteContext, request_body
from strix_pipeline.loadgen.level import run_level
from strix_pipeline.loadgen.workloads import Prompt, Workload


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
            ctx,
            "dataset",
            level,
            "rate",
            pick(n),
            rate=load.rate,
            burstiness=load.burstiness,
            seed=load.seed,
            max_duration_s=load.max_duration_s,
            label=f"dataset rate={load.rate:g}/s",
            warmup=pick(load.warmup),
        )
        return
    for c in load.levels:
        await run_level(
            ctx,
            "dataset",
            c,
            "concurrency",
            pick(n),
            concurrency=c,
            warmup=pick(load.warmup),
            max_duration_s=load.max_duration_s,
            label=f"dataset c={c}",
        )


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
        ctx,
        "random",
        round(load.rate * 60),
        "rate",
        plan,
        concurrency=cap or max(1, len(warm)),
        warmup=warm,
        rate=load.rate,
        burstiness=load.burstiness,
        seed=load.seed,
        max_concurrency=cap,
        label=f"random rate={load.rate:g}/s" + (f" max_concurrency={cap}" if cap else ""),
    )
