"""What the switch criteria judge: typed, frozen records of the runs, readings and release images.

:mod:`.gather` builds them from the warehouse; :mod:`.criteria` reads nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime


@dataclass(frozen=True)
class RunFacts:
    """One run as the criteria see it (a row of ``v_run_base``, its fallbacks applied)."""

    run_id: str
    engine: str
    status: str
    started_at: datetime
    model_profile: str
    model: str
    model_family: str | None
    quantization: str
    version_order: str  # the image's explicit sort key (or version, tag): never the run's date
    usable: bool  # status ok or partial: it answered
    image_repository: str | None = None
    image_tag: str | None = None
    image_digest: str | None = None
    image_version: str | None = None
    launch_command: str | None = None  # set once the engine is ready
    failure_reason: str | None = None
    held_bytes: int | None = None
    # what C3 / C5 pair runs on besides the model family (fingerprint.pair_differences): the host state
    host: str | None = None
    kernel: str | None = None
    kernel_cmdline: str | None = None
    ttm_pages_limit: int | None = None
    harness_version: str | None = None
    # what the engine started with besides its argv (C1 looks for an override in both): the
    # configuration's environment (a JSON object) and the image's own ENV (a JSON list of NAME=value)
    engine_env: str | None = None
    image_env: str | None = None
    # C5's breakdown (the engine's own log, memory/breakdown.py): weights and KV cache it allocated at
    # load, the tokens its KV cache holds, and the pool production's configuration holds (its KV
    # cache on the CPU backend; on a GPU the fraction x the device total: weights, activations, KV)
    weights_bytes: int | None = None
    kv_cache_bytes: int | None = None
    kv_capacity_tokens: int | None = None
    production_pool_bytes: int | None = None
    # the run's request timeout (its scenario profile's request_timeout_s): what a failed or timed-out
    # request counts as in a percentile (stats.quantiles.censored); None: the default profile's
    request_timeout_s: float | None = None
    # "production as deployed (<read digest>)": a baseline run whose settings were read from production
    baseline_source: str | None = None


@dataclass(frozen=True)
class SweepReading:
    """A run's concurrency sweep aggregate at the decision concurrency."""

    requests_ok: int
    requests_failed: int
    ttft_p95_ms: float | None  # over the successful requests, as stored
    duration_s: float | None = None  # the level's first send to last completion (goodput's denominator)
    level: int | None = None
    level_kind: str | None = None  # "concurrency" (closed loop: level clients) or "rate" (open loop)

    @property
    def requests(self) -> int:
        return self.requests_ok + self.requests_failed


@dataclass(frozen=True)
class RequestOutcome:
    """One measured request as the SLO criterion reads it (a failure is a row, ``ok`` false)."""

    ok: bool
    ttft_ms: float | None
    e2e_ms: float | None
    output_tokens: int | None


@dataclass(frozen=True)
class ReleaseImage:
    """A candidate image the registry knows (table ``images``), benchmarked or not."""

    repository: str
    tag: str
    digest: str
    floating: bool
    sort_key: str
    gone: bool


def side_tag(engine: str, version: str | None, model: str) -> str:
    """How a comparison of engines by pairs names a side (runner/engine_comparison.py): engine, release,
    model profile -- the one spelling C3 matches its runs against."""
    return f"{engine} {version} {model}"


@dataclass(frozen=True)
class PairedTtft:
    """The newest comparison by interleaved pairs of one of the decision's match-ups (table ``comparisons``,
    ``matchup`` set): the candidate's TTFT p95 over the baseline's, per pair of runs (or, in
    ``Evidence.paired_goodput``, its goodput within the SLOs over the baseline's; in
    ``Evidence.paired_memory``, the memory it holds after load over the baseline's)."""

    comparison_id: str
    release_a: str  # the baseline side (side_tag)
    release_b: str  # the candidate side
    pairs: int
    ratio: float | None  # B/A: candidate / baseline
    low: float | None
    high: float | None
    verdict: str
    look_alpha: float | None  # the alpha the interval spent: its level is 1 - look_alpha
    started_at: datetime
    # the fewest TTFT requests a kept run measured: which percentile each run's "p95" estimates
    requests_per_run: int | None = None

    @property
    def level(self) -> float:
        """The interval's real confidence level: the ladder's look spent ``look_alpha`` of the 5 %."""
        return 1 - (self.look_alpha if self.look_alpha is not None else 0.05)


@dataclass(frozen=True)
class Evidence:
    """Everything one evaluation judges, as it stood at ``now``."""

    now: datetime
    window_start: datetime  # runs started before it are stale
    runs: tuple[RunFacts, ...]
    smoke_ok: frozenset[str] = frozenset()  # run ids whose smoke output was valid
    sweep: Mapping[str, SweepReading] = field(default_factory=dict)  # run id -> reading
    images: tuple[ReleaseImage, ...] = ()
    # run id -> its measured requests' TTFTs at the decision concurrency, None for a failed or timed-out
    # one (C3 counts it as the run's request timeout); the warehouse's mapping reads a run's only when a
    # criterion asks for it
    ttfts: Mapping[str, Sequence[float | None]] = field(default_factory=dict)
    # the SLO criterion's: run id -> its sweep reading and its measured requests at the SLOs' load
    slo_sweep: Mapping[str, SweepReading] = field(default_factory=dict)
    slo_requests: Mapping[str, Sequence[RequestOutcome]] = field(default_factory=dict)
    # match-up ("production" | "equal_weights") -> its newest fresh comparison by interleaved pairs
    paired_ttft: Mapping[str, PairedTtft] = field(default_factory=dict)
    # the same for C6's goodput (metric goodput_rps): a Box's pairs measure it when the SLOs are set
    paired_goodput: Mapping[str, PairedTtft] = field(default_factory=dict)
    # the same for C5's held memory (metric held_bytes): every Box pair run reads it
    paired_memory: Mapping[str, PairedTtft] = field(default_factory=dict)
    # C7's: run id -> item id -> whether the run answered it, for the current evaluation set only
    quality: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)

    def fresh(self, r: RunFacts) -> bool:
        return self.window_start <= r.started_at <= self.now

    def without_run(self, run_id: str) -> Evidence:
        """The same evidence without one run and without the registry's images (the second look
        behind a provisional switch: the newer-release rule is about today, already judged)."""
        return replace(self, runs=tuple(r for r in self.runs if r.run_id != run_id), images=())
