"""Scrape an engine's Prometheus ``/metrics`` before, during and after each level.

httpx (the control-plane client; only the streams use aiohttp) fetches the text; scrapes are stored
raw with their time and parsed only when the level is over, so a large vLLM exposition never competes
with the streams.
Only engine samples are kept: ``llamacpp:*``, ``vllm:*``, ``sglang:*``.

Each sample keeps what the exposition says about its family: the ``# TYPE`` (counter, gauge, histogram,
summary, ...; a family without one is ``untyped``, as Prometheus itself treats it) and the ``# HELP``
text, so a reader never has to guess from the name whether a value is a running total (take its
increase) or a level (plot it as it is). A histogram's ``_bucket``/``_sum``/``_count`` samples (and a
counter's ``_total``/``_created`` under an OpenMetrics-style family name) belong to the family their
``# TYPE`` line names.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

import httpx

from strix_pipeline.records import ServerMetricSample

KEEP_PREFIXES = ("llamacpp:", "vllm:", "sglang:")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_COMMENT = re.compile(r"^#\s+(HELP|TYPE)\s+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\s(.*))?$")

UNTYPED = "untyped"
# The sample-name suffixes each type's family may carry (text format 0.0.4 and OpenMetrics).
FAMILY_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("_sum", "_count", "_created"),
    "info": ("_info",),
}
# OpenMetrics spells "untyped" as "unknown": one word here.
_TYPE_ALIASES = {"unknown": UNTYPED}


class PromSample(NamedTuple):
    """One sample with what its family's ``# TYPE`` and ``# HELP`` lines say (None: no HELP line)."""

    name: str
    labels: dict[str, str]
    value: float
    family: str
    type: str
    help: str | None


def _unescape(v: str) -> str:
    return v.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def _unescape_help(v: str) -> str:
    # HELP text escapes only backslash and line feed (no quotes)
    return v.replace("\\\\", "\x00").replace("\\n", "\n").replace("\x00", "\\")


def _family_of(name: str, types: dict[str, str], helps: dict[str, str]) -> tuple[str, str]:
    """(family, type) of a sample name: its own TYPE/HELP line, else a family whose type allows the
    name's suffix (``x_bucket`` of histogram ``x``), else the name itself, untyped."""
    if name in types or name in helps:
        return name, types.get(name, UNTYPED)
    for fam_type, suffixes in FAMILY_SUFFIXES.items():
        for suffix in suffixes:
            base = name.removesuffix(suffix)
            if base != name and types.get(base) == fam_type:
                return base, fam_type
    return name, UNTYPED


def parse_exposition(text: str, keep: tuple[str, ...] = KEEP_PREFIXES) -> list[PromSample]:
    """Parse the text exposition format into samples with their family, ``# TYPE`` and ``# HELP``.

    Other comments and samples of other families are skipped; a sample that does not parse is
    skipped too (one odd line never costs the scrape). TYPE and HELP apply wherever they appear in
    the text, as the format requires them before the samples but servers are not always strict.
    """
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    lines = text.splitlines()
    for line in lines:
        if line.startswith("#"):
            c = _COMMENT.match(line)
            if not c:
                continue
            kind, name, rest = c.group(1), c.group(2), c.group(3) or ""
            if kind == "TYPE":
                t = rest.strip().lower() or UNTYPED
                types[name] = _TYPE_ALIASES.get(t, t)
            else:
                helps[name] = _unescape_help(rest)
    out = []
    for line in lines:
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
        family, kind = _family_of(name, types, helps)
        out.append(PromSample(name, labels, v, family, kind, helps.get(family)))
    return out


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
        for p in parse_exposition(s.text):
            out.append(
                ServerMetricSample(
                    run_id=run_id,
                    scenario=scenario,
                    level=level,
                    scraped_at=s.scraped_at,
                    phase=s.phase,
                    name=p.name,
                    labels=json.dumps(p.labels, sort_keys=True),
                    value=p.value,
                    family=p.family,
                    metric_type=p.type,
                    metric_help=p.help,
                )
            )
    return out
