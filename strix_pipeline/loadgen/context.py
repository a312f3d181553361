"""What a level sends through and keeps into: the suite's context (session, SLO, scraper, the records
so far), the engine's liveness asked after a lost request, and a request planned before the clock starts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import perf_counter_ns
from typing import Any

import aiohttp

from strix_pipeline.config import SLO
from strix_pipeline.loadgen.client import ConnectionPolicy, RawExchange, stream_post
from strix_pipeline.loadgen.metrics import aggregate_level
from strix_pipeline.loadgen.prometheus import MetricsScraper, Scrape, to_samples
from strix_pipeline.loadgen.workloads import Prompt
from strix_pipeline.records import LevelAggregate, RequestRecord, RequestTable, ServerMetricSample
from strix_pipeline.traces.model import Trace

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
    trace: Trace | None = None  # the profile's recorded trace, loaded before the suite starts
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
