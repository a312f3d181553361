"""What a run measures: the scenario profiles (smoke, concurrency sweep, prefill ladder, decode,
prefix cache), the latency objectives, and what the weekly schedule benchmarks on each host."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from strix_pipeline.config.rules import Name, PosInt, _Strict


class SmokeSpec(_Strict):
    output_tokens: PosInt = 32
    json_check: bool = True

    @property
    def requests(self) -> int:
        """One text request, and one JSON request when the output is checked as JSON."""
        return 2 if self.json_check else 1


# Measured requests at the decision's concurrency (C3 reads TTFT p95 there). C3's interval of the ratio
# of two p95s is distribution-free (stats.quantiles.quantile_ratio_ci): it exists only from n = 86 per
# run, and at n = 200 it spans about 1.34x on steady lognormal latencies (sigma 0.2) and 2.1x on
# heavy-tailed ones (sigma 0.5), so a candidate ~15 % faster passes with confidence on a steady Box;
# n = 400 would narrow it to 1.22x for twice the Box's time (benchmarks/ci_coverage.py prints the table).
DECISION_LEVEL_REQUESTS = {5: 200}


def rate_level(rate: float) -> int:
    """The stored level of an open-loop level at ``rate`` requests/s: requests per minute, rounded (as a
    trace's recorded arrivals and ``strix bench --rate`` store theirs)."""
    return round(rate * 60)


class SweepSpec(_Strict):
    levels: list[PosInt] = Field(default_factory=lambda: [1, 2, 4, 5, 8])
    requests_per_level: PosInt = 40
    # Per-level overrides of requests_per_level (level -> measured requests). The default raises the
    # decision's level (DECISION_LEVEL_REQUESTS); a profile that sets its own requests_per_level and no
    # requests_at sizes every level alike (the quick CPU demo: its p95 interval is then n/a, and C3
    # says "inconclusive").
    requests_at: dict[PosInt, PosInt] = Field(default_factory=lambda: dict(DECISION_LEVEL_REQUESTS))
    warmup: Annotated[int, Field(ge=0)] = 2
    input_tokens: PosInt = 1536
    output_tokens: PosInt = 256
    # The cap of one level of requests_per_level requests; a level planned larger (requests_at) gets a
    # proportionally larger cap (max_duration_for).
    max_duration_s: Annotated[float, Field(gt=0)] = 600
    # Open-loop levels after the closed-loop ones: requests_per_level requests at each arrival rate
    # (requests/s, Poisson arrivals), stored as level rate_level(rate) of kind "rate". The SLO
    # criterion's load ([decision.slo] load = "2.5/s") is one of them.
    rates: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _own_count_sizes_every_level(cls, data: object) -> object:
        if isinstance(data, dict) and "requests_per_level" in data and "requests_at" not in data:
            return {**data, "requests_at": {}}
        return data

    def requests_for(self, level: int) -> int:
        """Measured requests at `level`."""
        return self.requests_at.get(level, self.requests_per_level)

    def max_duration_for(self, level: int) -> float:
        """The level's time cap: max_duration_s, scaled up for a level planned larger than the rest."""
        return self.max_duration_s * max(1.0, self.requests_for(level) / self.requests_per_level)


class LadderSpec(_Strict):
    input_tokens: list[PosInt] = Field(default_factory=lambda: [2048, 4096, 8192, 16384, 32768, 65536])
    requests_per_level: PosInt = 3
    output_tokens: PosInt = 4


class DecodeSpec(_Strict):
    requests: PosInt = 5
    output_tokens: PosInt = 256
    input_tokens: PosInt = 256


class PrefixCacheSpec(_Strict):
    prefix_tokens: PosInt = 6144
    suffix_tokens: PosInt = 64
    output_tokens: PosInt = 8
    repeats: PosInt = 3


class TraceSpec(_Strict):
    """A recorded trace replayed as the profile's ``trace`` scenario (``strix workload import`` stores
    it by name): the recorded lengths and prefix blocks, sent at the recorded arrival times multiplied
    by ``time_scale`` (``replay = "arrivals"``; 0.5 sends twice as fast) or by ``concurrency`` closed-loop
    clients (``replay = "concurrency"``; default: the trace's recorded mean concurrency, rounded).
    ``max_requests``: the first N requests only. ``chat``: send chat messages instead of raw prompts
    (the chat template then adds its tokens to each input)."""

    name: Name
    replay: Literal["arrivals", "concurrency"] = "arrivals"
    time_scale: Annotated[float, Field(gt=0)] = 1.0
    concurrency: PosInt | None = None
    max_requests: PosInt | None = None
    chat: bool = False
    max_duration_s: Annotated[float, Field(gt=0)] | None = None


ScenarioName = Literal[
    "smoke", "concurrency_sweep", "prefill_ladder", "decode", "prefix_cache", "trace", "quality"
]


class ScenarioProfile(_Strict):
    # "trace" runs when the profile names a trace; it is added after the others when not listed
    scenarios: list[ScenarioName] = Field(
        default_factory=lambda: [
            "smoke",
            "concurrency_sweep",
            "prefill_ladder",
            "decode",
            "prefix_cache",
            "quality",
        ]
    )
    request_timeout_s: Annotated[float, Field(gt=0)] = 600
    seed: int = 1234
    smoke: SmokeSpec = SmokeSpec()
    concurrency_sweep: SweepSpec = SweepSpec()
    prefill_ladder: LadderSpec = LadderSpec()
    decode: DecodeSpec = DecodeSpec()
    prefix_cache: PrefixCacheSpec = PrefixCacheSpec()
    trace: TraceSpec | None = None

    @model_validator(mode="after")
    def _trace_scenario(self) -> ScenarioProfile:
        if "trace" in self.scenarios and self.trace is None:
            raise ValueError('scenarios: "trace" needs a [trace] table naming the trace (trace.name)')
        if self.trace is not None and "trace" not in self.scenarios:
            object.__setattr__(self, "scenarios", [*self.scenarios, "trace"])
        return self


class SLO(_Strict):
    ttft_ms: Annotated[float, Field(gt=0)] = 2000
    tpot_ms: Annotated[float, Field(gt=0)] = 100
    e2e_ms: Annotated[float, Field(gt=0)] = 60000


class HostRun(_Strict):
    """What the weekly schedule benchmarks on a host: an engine with a model profile."""

    engine: str
    model: str
    profile: str = "standard"
