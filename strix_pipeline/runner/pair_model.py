"""What a comparison by pairs is made of: the metrics it judges, a side, one engine start's figures, a
pair, each metric's result and the comparison's (runner/pairs.py runs them; stats/paired.py judges)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from strix_pipeline.hosts.probes.host_noise import HostNoise
from strix_pipeline.quality.score import QualityComparison
from strix_pipeline.stats import paired
from strix_pipeline.stats.proportions import Proportions, two_proportions

Side = Literal["A", "B"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PairMetric:
    """A figure one run gives, and which way is better."""

    name: str
    higher_is_better: bool
    unit: str
    # how one run's figure is computed from its requests: stored beside every verdict on it
    estimator: str
    # the smallest target this figure is decided at: a tail's noise cannot carry a 5 % step
    min_target: float = 0.0
    # a run may lack it and still count for the other figures: it is judged on the pairs that have it
    optional: bool = False

    def target(self, asked: float) -> float:
        return max(asked, self.min_target)


# The figures a comparison by pairs judges. Each name means what it means in the weekly series, its
# charts and change points, computed by the same function (loadgen/metrics.py): decode and prefill as
# sums over the run's requests, TTFT p50/mean/p95 of one level at 5 clients. The engine's own prefill
# clock is a second estimator, so it has a name of its own. TTFT p95 is reported with its interval
# but decided only at a >= 10 % target (benchmarks/precision.py measures its CV).
METRICS: dict[str, PairMetric] = {
    "decode_tokens_per_s": PairMetric(
        "decode_tokens_per_s",
        True,
        "tok/s",
        "sum(output tokens - 1) / sum(E2E - TTFT) of the decode requests",
    ),
    "prefill_tokens_per_s": PairMetric(
        "prefill_tokens_per_s", True, "tok/s", "sum(input tokens) / sum(TTFT) of the prefill requests"
    ),
    "engine_prefill_tokens_per_s": PairMetric(
        "engine_prefill_tokens_per_s",
        True,
        "tok/s",
        "sum(prompt_n) / sum(prompt_ms) of llama-server's timings of the prefill requests",
    ),
    "ttft_p50_ms": PairMetric("ttft_p50_ms", False, "ms", "median TTFT of one level at 5 clients"),
    "ttft_mean_ms": PairMetric("ttft_mean_ms", False, "ms", "mean TTFT of one level at 5 clients"),
    "ttft_p95_ms": PairMetric(
        "ttft_p95_ms", False, "ms", "95th percentile TTFT of one level at 5 clients", min_target=0.10
    ),
}
# Figures only the decision's pairs judge, never a release comparison's default set (runner/box_pairs.py):
# C6's goodput, measured by a Box's pairs when the owner's SLOs are set at a number of clients, and C5's
# held memory, which every Box run reads (a run whose reading is missing leaves its pair out of this
# figure only)
DECISION_METRICS: dict[str, PairMetric] = {
    "goodput_rps": PairMetric(
        "goodput_rps",
        True,
        "req/s",
        "clients x requests within every SLO / the client time all requests held (a failure the timeout)",
        min_target=0.10,
    ),
    "held_bytes": PairMetric(
        "held_bytes",
        False,
        "bytes",
        "memory held after load: the host's in use with the engine loaded and idle, less before it started",
        optional=True,
    ),
}
KNOWN_METRICS = {**METRICS, **DECISION_METRICS}
THROUGHPUT_METRICS = ("decode_tokens_per_s", "prefill_tokens_per_s")

# TTFT at several clients on a host of this many cores or fewer measures the load generator's share of
# the cores as much as the engine: a 2-core AVX2 guest gave TTFT p50 at 5 clients a per-run CV of
# 15-18 % (decode 6 %), which no budget of pairs resolves to 5 %. There it is descriptive only.
LOADGEN_SHARES_CORES_AT = 2


def descriptive_only(metric: str, clients: int, cores: int | None) -> str | None:
    """Why ``metric`` may be reported but never decide a comparison on a host of ``cores`` cores, its
    TTFT measured at ``clients`` clients; None when it may decide."""
    if not metric.startswith("ttft_") or clients < 2 or cores is None or cores > LOADGEN_SHARES_CORES_AT:
        return None
    return (
        f"descriptive only: {metric} at {clients} clients on a {cores}-core host, where the load "
        "generator shares the engine's cores"
    )


# No metric is "within ±target" while the failed runs lean one way this much (p of the two-proportion
# test below it): one failure against none (p 0.83) does not, two against none (0.31) does. Looser than
# alpha on purpose: it only withholds a "same", it never makes a claim.
FAILURES_ALIKE_P = 0.5
# The exclusions of a busy host void the verdict when they differ between the sides this much: the
# ratio is then judged on one side's quieter runs. Looser than alpha too: voiding costs a verdict only.
EXCLUSIONS_DIFFER_P = 0.1


@dataclass(frozen=True)
class ComparedRelease:
    """One side of a comparison: the tag people say (``b11434``) and what the engine needs to run it
    (``package_version`` ``11434.0.0``; None: the build installed here)."""

    tag: str
    package_version: str | None = None


@dataclass(frozen=True)
class RunFigures:
    """What one engine start measured: ``values`` per metric, the warm-up request it discarded."""

    values: dict[str, float]
    warmup_ms: float | None = None
    engine_build: str | None = None
    # the host while it measured (hosts/probes/host_noise.py); a busy one's pair is dropped and run again
    host_noise: HostNoise | None = None
    # the measured requests and how many of them failed: the figures are the successful ones'
    measured_requests: int = 0
    failed_requests: int = 0
    # the evaluation set as this run answered it (item -> passed); None: not asked
    quality: dict[str, bool] | None = None
    # of them, the TTFT level's: the requests each TTFT percentile is taken over
    ttft_requests: int = 0

    @property
    def failure_rate(self) -> float:
        return self.failed_requests / self.measured_requests if self.measured_requests else 0.0


class RunFailed(Exception):
    """A run that gave no figures (the engine did not start or died, or a figure could not be
    computed): its pair is dropped, the run counted as failed. The message says why."""


class RunOne(Protocol):
    def __call__(self, release: ComparedRelease, label: str) -> RunFigures:
        """Start a fresh server of ``release``, warm it up with one request, measure, stop it.
        ``label`` names the run in progress lines and logs. Raises :class:`RunFailed`."""
        ...


@dataclass(frozen=True)
class PairRun:
    """One engine start of the comparison, in the order they ran."""

    run: int  # 1-based
    pair: int  # the pair's place among the pairs attempted, 1-based
    side: Side
    release: str
    figures: RunFigures | None  # None: it failed
    error: str | None
    started_at: datetime
    ended_at: datetime
    kept: bool = True  # False once its pair was dropped
    excluded: bool = False  # True: it ran on a busy host and was left out for that

    @property
    def failed(self) -> bool:
        """No figures, or figures over requests some of which failed (an excluded run is neither)."""
        if self.excluded:
            return False
        return self.figures is None or self.figures.failed_requests > 0


@dataclass(frozen=True)
class PairValue:
    """One kept pair's values of one metric."""

    order: str  # "AB" | "BA"
    a: float
    b: float


@dataclass(frozen=True)
class MetricResult:
    """B against A on one metric, as the ladder left it."""

    release_a: str
    release_b: str
    metric: str
    higher_is_better: bool
    pairs: int  # the kept pairs the last look judged
    ratio: float | None  # B/A; None before any look (too few pairs)
    low: float | None
    high: float | None
    verdict: paired.LadderVerdict
    looks: int
    target: float
    alpha: float
    look_alpha: float | None  # the alpha the last look spent: its interval's level
    cap: int
    values: tuple[PairValue, ...]
    ladder: paired.LadderResult
    primary: bool = False  # the comparison's verdict is this metric's; the others are descriptive
    estimator: str = ""
    why: str | None = None  # why the ladder's verdict was withheld (failures, exclusions), if it was

    @property
    def change_pct(self) -> float | None:
        return None if self.ratio is None else (self.ratio - 1) * 100

    @property
    def direction(self) -> paired.Direction | None:
        if self.verdict != "different" or self.ratio is None:
            return None
        return "improvement" if (self.ratio > 1) == self.higher_is_better else "regression"

    def headline(self) -> str:
        """The interval first, then what it lets be said."""
        if self.ratio is None:
            return f"{self.metric}: no pair kept: {self.verdict}"
        interval = ""
        if self.low is not None and self.high is not None:
            at = f" at {1 - self.look_alpha:.1%}" if self.look_alpha else ""
            interval = f" [{(self.low - 1) * 100:+.1f} %, {(self.high - 1) * 100:+.1f} %]{at}"
        words = paired.verdict_words(self.verdict, self.direction, self.target)
        return f"{self.metric} {(self.ratio - 1) * 100:+.1f} %{interval} over {self.pairs} pairs: {words}"


@dataclass(frozen=True)
class PairsResult:
    comparison_id: str
    host: str
    engine: str
    release_a: ComparedRelease
    release_b: ComparedRelease
    seed: int
    cap: int
    metrics: tuple[MetricResult, ...]
    runs: tuple[PairRun, ...]
    dropped_pairs: int
    started_at: datetime
    ended_at: datetime
    orders: tuple[str, ...] = field(default=())  # the kept pairs' orders, in the order they ran
    alpha: float = paired.ALPHA
    # failed runs of A against B (k of n: runs not excluded), excluded runs of A against B (k of n: runs)
    failures: Proportions = field(default_factory=lambda: two_proportions(0, 0, 0, 0))
    exclusions: Proportions = field(default_factory=lambda: two_proportions(0, 0, 0, 0))
    void: str | None = None  # why no verdict stands (exclusions differing between the sides)
    # the evaluation set, item by item: B against A (B scoring lower with confidence) and A against B
    quality_b: QualityComparison | None = None
    quality_a: QualityComparison | None = None

    @property
    def scores_lower(self) -> Side | None:
        """The side answering fewer of the evaluation set's items than the other, with confidence."""
        if self.quality_b is not None and self.quality_b.lower:
            return "B"
        if self.quality_a is not None and self.quality_a.lower:
            return "A"
        return None

    @property
    def primary(self) -> MetricResult:
        return next((m for m in self.metrics if m.primary), self.metrics[0])

    @property
    def fails_more(self) -> Side | None:
        """The side failing more often with confidence at ``alpha``."""
        side = self.failures.higher(self.alpha)
        return None if side is None else ("A", "B")[side - 1]

    def headline(self) -> str:
        """The comparison's verdict in one line: its primary metric's interval and what it says, or why
        there is none; a side scoring lower on the evaluation set, or failing more, is *different*
        whatever its speed."""
        if self.void:
            return f"void: {self.void}"
        if (side := self.scores_lower) is not None:
            q = self.quality_b if side == "B" else self.quality_a
            tag = (self.release_a if side == "A" else self.release_b).tag
            return f"different (quality): {tag} ({side}) {q.text()}"  # type: ignore[union-attr]
        if (side := self.fails_more) is not None:
            f = self.failures
            tag = (self.release_a if side == "A" else self.release_b).tag
            return (
                f"different (fails more): {tag} ({side}) failed {f.k1 if side == 'A' else f.k2} of "
                f"{f.n1 if side == 'A' else f.n2} runs, the other side {f.k2 if side == 'A' else f.k1} of "
                f"{f.n2 if side == 'A' else f.n1} (p {f.p_value:.3f})"
            )
        return self.primary.headline()

    def family_text(self) -> str:
        """The family-wise statement the comparison's verdicts carry."""
        others = [m.metric for m in self.metrics if not m.primary]
        tail = (
            f"; {', '.join(others)}: descriptive, each at alpha {self.alpha:g} on its own, "
            "no family-wise claim"
            if others
            else ""
        )
        return (
            f"verdict: {self.primary.metric}, wrong with probability <= {self.alpha:g} over all its looks"
            f"{tail}; failures compared at alpha {self.alpha:g}"
        )
