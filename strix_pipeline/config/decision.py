"""What the decision judges (criteria C1..C5, the engines and models it pairs) and the analysis
around it: change detection, bisection, the canary and the busy-host marks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from strix_pipeline.config.rules import EnvName, NonNegFloat, PosInt, Repository, _Strict
from strix_pipeline.config.suite import rate_level

DEFAULT_REQUIRED = ("C1", "C2", "C3", "C4", "C5")


_RATE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*/\s*s\s*$")
LOAD_FORMS = (
    'a number of clients (load = 8), an arrival rate in requests/s (load = "2.5/s") or "trace" (the '
    "decision's trace as it replays: its recorded arrivals or concurrency)"
)


@dataclass(frozen=True)
class SloLoad:
    """The load the SLO criterion judges at, and where a run's requests at it are stored: a closed-loop
    sweep level of ``clients``, the sweep's open-loop level at ``rate`` requests/s, or the run's trace
    replay (whichever arrivals or concurrency its profile replays)."""

    kind: Literal["concurrency", "rate", "trace"]
    clients: int | None = None
    rate: float | None = None

    @property
    def scenario(self) -> str:
        return "trace" if self.kind == "trace" else "concurrency_sweep"

    @property
    def level(self) -> int | None:
        """The stored level (None: the trace's, whichever it is)."""
        if self.kind == "concurrency":
            return self.clients
        return rate_level(self.rate) if self.kind == "rate" and self.rate is not None else None

    def text(self) -> str:
        if self.kind == "concurrency":
            return f"{self.clients} clients"
        if self.kind == "rate":
            return f"{self.rate:g} requests/s (open loop)"
        return "the trace's own load"

    def matches(self, scenario: str, level: int, level_kind: str) -> bool:
        """A stored level (an aggregate's or a request's) is this load's."""
        if scenario != self.scenario:
            return False
        if self.kind == "trace":
            return True
        return level == self.level and level_kind == self.kind


def parse_load(value: object) -> SloLoad:
    """``8`` (clients), ``"2.5/s"`` (requests/s) or ``"trace"``; anything else is a ValueError naming the
    forms."""
    if isinstance(value, bool | float):  # 2.5: clients or requests/s? said as "2.5/s"
        raise ValueError(f"{value!r} is not a load: give {LOAD_FORMS}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        n = int(value)
        if n < 1:
            raise ValueError(f"{value!r} clients: a load needs at least 1 client")
        return SloLoad("concurrency", clients=n)
    if isinstance(value, str) and value.strip() == "trace":
        return SloLoad("trace")
    m = _RATE.match(value) if isinstance(value, str) else None
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"{value!r} is not a load: give {LOAD_FORMS}")
    return SloLoad("rate", rate=float(m.group(1)))


class DecisionSLO(_Strict):
    """The owner's objectives per request (any subset) and the load they hold at: the SLO criterion
    (C6) compares goodput -- requests per second meeting every objective set, a failure a miss -- and
    tokens/s per user of both engines at that load."""

    ttft_ms: Annotated[float, Field(gt=0)] | None = None
    tpot_ms: Annotated[float, Field(gt=0)] | None = None
    e2e_ms: Annotated[float, Field(gt=0)] | None = None
    # the sweep level (clients) the objectives are judged at; None: the decision's concurrency
    concurrency: PosInt | None = None
    # the load, in any form (LOAD_FORMS): clients, an arrival rate ("2.5/s", a sweep rate of the
    # decision's profiles) or "trace" (the decision's profiles replay a trace); `concurrency` or this
    load: int | str | None = None

    @field_validator("load", mode="before")
    @classmethod
    def _load_form(cls, v: object) -> object:
        if v is not None:
            parse_load(v)
        return v

    @model_validator(mode="after")
    def _some_objective(self) -> DecisionSLO:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("set at least one of ttft_ms, tpot_ms, e2e_ms (or leave [decision.slo] out)")
        if self.load is not None and self.concurrency is not None:
            raise ValueError(
                f"concurrency and load both name the load (concurrency = {self.concurrency}, load = "
                f"{self.load!r}): keep one (load = 8 is concurrency = 8)"
            )
        return self


class DecisionConfig(_Strict):
    host: str = "strix-halo"
    candidate_engine: str = "vllm"
    baseline_engine: str = "llamacpp"
    freshness_days: PosInt = 14
    # C6 (the owner's SLOs) is added when `slo` is set, and may be listed only then
    # C7 (the evaluation set on the same weights) is required whenever it is judged; listed, it is
    # required even when a side has no answers (an unknown verdict until both do)
    required: list[Literal["C1", "C2", "C3", "C4", "C5", "C6", "C7"]] = Field(
        default_factory=lambda: list(DEFAULT_REQUIRED)
    )
    medium_moe_model: str = "qwen3-30b-a3b"
    gpt_oss_model: str = "gpt-oss-120b"
    concurrency: PosInt = 5
    ttft_margin_pct: float = 0.0  # C3 passes when candidate p95 < baseline p95 * (1 - margin)
    memory_tolerance_pct: NonNegFloat = 0.0  # C5 passes when candidate held <= baseline * (1 + tol)
    webhook_url_env: EnvName = "STRIX_WEBHOOK_URL"
    # Said beside each criterion left out of `required` (e.g. why a CPU host cannot give C2/C4 evidence).
    not_required_because: str | None = None
    # The pair C3 and C5 compare: the baseline is what production serves -- runs of this image
    # repository ("ghcr.io/ggml-org/llama.cpp") with this model profile -- and the candidate's runs of
    # `candidate_model`; no fresh run on a side: the criterion is unknown, saying so. None: any run of
    # the baseline engine / candidate of the same model family (the embedded host has one model).
    baseline_image: Repository | None = None
    baseline_model: str | None = None
    candidate_model: str | None = None
    # A pair is made on purpose (analysis/decision/criteria/pairing.py): the baseline run of the same
    # host, model family, backend family (ROCm or Vulkan build) and host state (fingerprint.HOST_FIELDS)
    # closest in time to the candidate's, started within this many hours of it -- "the same night": one
    # maintenance window (6 h on the Box), never the night before (24 h on). No such run: C3 / C5 are
    # unknown, naming what was missing, unless `pair_other_night` lets the latest such run of another
    # night stand in (the rule before pairs; the reason says so). Backend and host state are never
    # given up.
    pair_within_hours: Annotated[float, Field(gt=0, le=168)] = 12.0
    pair_other_night: bool = False
    # When the decision's host is a Box: the balanced AB/BA pairs of fresh runs a night runs of production
    # as deployed against the candidate (runner/box_pairs.py), C3 deciding on their paired ratio; the
    # night's plan counts their runs. 0: none, and a `switch` then rests on single runs (provisional).
    box_pairs: Annotated[int, Field(ge=0, le=20)] = 3
    # C3 and C5 are judged on two match-ups: "production" -- the baseline as production serves
    # it (baseline_image / baseline_model, e.g. Q4_K_M) against the candidate -- and "equal_weights" --
    # a baseline run at the candidate's own quantization (the same weights), which isolates the
    # engine. Both are stored and shown; this one decides the verdict.
    decided_by: Literal["production", "equal_weights"] = "production"
    # The owner's SLOs: unset, C1-C5 decide as always; set, C6 is judged and required too.
    slo: DecisionSLO | None = None

    @model_validator(mode="before")
    @classmethod
    def _slo_required(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("slo") is not None:
            required = list(data.get("required", DEFAULT_REQUIRED))
            if "C6" not in required:
                return {**data, "required": [*required, "C6"]}
        return data

    @model_validator(mode="after")
    def _pairs_or_none(self) -> DecisionConfig:
        if self.box_pairs in (1, 2):
            raise ValueError(
                f"box_pairs = {self.box_pairs}: a night's pairs judge the run-to-run variance from at "
                "least 3 pairs; set 3 or more, or 0 for none"
            )
        return self

    @model_validator(mode="after")
    def _c6_needs_slo(self) -> DecisionConfig:
        if self.slo is None and "C6" in self.required:
            raise ValueError("required: C6 judges the owner's SLOs; set [decision.slo] to require it")
        return self

    @property
    def slo_concurrency(self) -> int:
        """The clients C6 judges at: the SLOs' own, else the decision's concurrency (a load given as a
        rate or "trace" has none of its own: the decision's)."""
        load = self.slo_load
        return load.clients if load.kind == "concurrency" and load.clients else self.concurrency

    @property
    def slo_load(self) -> SloLoad:
        """The load C6 judges at: the SLOs' ``load`` or ``concurrency``, else the decision's concurrency."""
        slo = self.slo
        if slo is not None and slo.load is not None:
            return parse_load(slo.load)
        return SloLoad("concurrency", clients=(slo.concurrency if slo else None) or self.concurrency)


class ChangeDetectionConfig(_Strict):
    max_pvalue: Annotated[float, Field(gt=0, lt=1)] = 0.001
    min_magnitude_pct: NonNegFloat = 2.0
    noise_multiple: NonNegFloat = 3.0


CANARY_PATTERN = r"^(baseline|none|[A-Za-z0-9][A-Za-z0-9_.-]*:[A-Za-z0-9_][A-Za-z0-9_.-]*)$"


class AnalysisConfig(_Strict):
    """Bisection of a confirmed change, and the canary that tells host drift from engine change."""

    # the most benchmark runs one bisection may spend; it stops there saying how far it got
    bisect_max_runs: PosInt = 6
    # how the sensor's bisections are decided where the pairs method can run them (llama-server releases
    # on host local, a figure a comparison by pairs measures): "pairs", every midpoint compared afresh
    # with its brackets and the release named checked against its predecessor; "runs", one stored
    # benchmark run per step (the way a Box's images are bisected)
    bisect_by: Literal["pairs", "runs"] = "pairs"
    # the most pairs one bisection by pairs spends in all (two engine starts each); a step, two
    # comparisons of up to compare_max_pairs pairs, is not begun when it could pass it
    bisect_max_pairs: Annotated[int, Field(ge=2)] = 200
    # one pinned build benchmarked every week, analysed over time: a step in it is the host, not an
    # engine. "baseline": the baseline engine's installed build on each local host (a Docker host
    # needs a pinned "engine:tag", e.g. "llamacpp:server-rocm-b6500"); "none": no canary.
    canary: Annotated[str, Field(pattern=CANARY_PATTERN)] = "baseline"
    # the most pairs one comparison by pairs (`strix compare`) runs while a metric stays unknown: the
    # ladder looks at 3, 5, then 10 pairs; a higher cap doubles on (20, 40), each look costing two
    # engine starts per pair
    compare_max_pairs: Annotated[int, Field(ge=2)] = 10
    # the step such a comparison chases (0.05: 5 %); `strix plan` and `strix compare` say up front
    # whether this machine's measured noise lets the cap resolve it
    compare_target: Annotated[float, Field(gt=0, lt=1)] = 0.05
    # a pass on a busy host (hosts/probes/host_noise.py) is marked, kept out of the verdicts and run again:
    # CPU time stolen by the hypervisor, and CPU used outside the engine and the client, as a share
    # of all the host's CPU time in the pass (on 2 cores 15 % is 0.3 of a core)
    busy_steal_pct: Annotated[float, Field(ge=0, le=100)] = 5.0
    busy_outside_pct: Annotated[float, Field(ge=0, le=100)] = 15.0
    # and a fixed job timed before and after the pass (hosts/probes/cpu.py) running this much slower
    # than the session's fastest: a neighbour on the same cores shows in no counter a guest can read
    busy_probe_pct: Annotated[float, Field(ge=0)] = 10.0
