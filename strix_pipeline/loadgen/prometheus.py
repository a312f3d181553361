"""Scrape an engine's Prometheus ``/metrics`` before, during and after each level.

httpx (the control-plane client, DESIGN.md) fetches the text; scrapes are stored raw with their time
and parsed only when the level is over, so a large vLLM exposition never competes with the streams.
Only engine samples are kept: ``llamacpp:*``, ``vllm:*``, ``sglang:*``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from strix_pipeline.records import ServerMetricSample

KEEP_PREFIXES = ("llamacpp:", "vllm:", "sglang:")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _unescape(v: str) -> str:
    return v.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def parse_prometheus(
    text: str, keep: tuple[str, ...] = KEEP_PREFIXES
) -> list[tuple[str, dict[str, str], float]]:
    """Parse the text exposition format into (name, labels, value); comments and other families skipped."""
    out = []
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(keep):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, _, label_text, value = m.group(1), m.group(2), m.group(3), m.group(4)
        labels = {k: _unescape(v) for k, v in _LABEL.findall(label_text)} if label_text else {}
        try:
            v = float(value)  # accepts NaN, +Inf, -Inf
        except ValueError:
            continue
        out.append((name, labels, v))
    return out


def sample_value(samples: list[tuple[str, dict[str, str], float]], name: str) -> float | None:
    """Sum of a metric's samples over its label sets (None if absent)."""
    vals = [v for n, _, v in samples if n == name and not math.isnan(v)]
    return sum(vals) if vals else None


@dataclass
class Scrape:
    scraped_at: datetime
    phase: str
    text: str


@dataclass
class MetricsScraper:
    """Scrapes one URL; a server without metrics is noted once and then left alone."""

    url: str | None
    interval_s: float = 2.0
    timeout_s: float = 5.0
    error: str | None = None
    _client: httpx.AsyncClient | None = field(default=None, repr=False)

    async def __aenter__(self) -> MetricsScraper:
        if self.url:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, trust_env=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client:
            await self._client.aclose()

    @property
    def enabled(self) -> bool:
        return self._client is not None and self.error is None

    async def scrape(self, phase: str) -> Scrape | None:
        if not self.enabled:
            return None
        assert self._client is not None and self.url
        try:
            r = await self._client.get(self.url)
        except httpx.HTTPError as e:
            self.error = f"metrics: {self.url} unreachable ({type(e).__name__}); scraping stopped"
            return None
        if r.status_code != 200:
            self.error = f"metrics: {self.url} answered HTTP {r.status_code}; scraping stopped"
            return None
        return Scrape(datetime.now(UTC), phase, r.text)

    async def scrape_into(self, out: list[Scrape], phase: str) -> None:
        """``scrape`` and keep the result in ``out`` (nothing when scraping is off or failed)."""
        s = await self.scrape(phase)
        if s:
            out.append(s)

    async def during(self, out: list[Scrape], stop: asyncio.Event) -> None:
        """Scrape every ``interval_s`` until ``stop`` is set."""
        while self.enabled:
            try:
                await asyncio.wait_for(stop.wait(), self.interval_s)
                return
            except TimeoutError:
                pass
            await self.scrape_into(out, "during")


def to_samples(scrapes: list[Scrape], *, run_id: str, scenario: str, level: int) -> list[ServerMetricSample]:
    out = []
    for s in scrapes:
        for name, labels, value in parse_prometheus(s.text):
            out.append(
                ServerMetricSample(
                    run_id=run_id,
                    scenario=scenario,
                    level=level,
                    scraped_at=s.scraped_at,
                    phase=s.phase,
                    name=name,
                    labels=json.dumps(labels, sort_keys=True),
                    value=value,
                )
            )
    return out
