"""What the decision judges (criteria C1..C5, the engines and models it pairs) and the analysis
around it: change detection, bisection, the canary and the busy-host marks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from strix_pipeline.config.rules import EnvName, NonNegFloat, PosInt, Repository, _Strict

DEFAULT_REQUIRED = ("C1", "C2", "C3", "C4", "C5")


class DecisionSLO(_Strict):
    """The owner's objectives per request (any subset) and the load they hold at: the SLO criterion
    (C6) compares goodput -- requests per second meeting every objective set, a failure a miss -- and
    tokens/s per user of both engines at that load."""

    ttft_ms: Annotated[float, Field(gt=0)] | None = None
    tpot_ms: Annotated[float, Field(gt=0)] | None = None
    e2e_ms: Annotated[float, Field(gt=0)] | None = None
    # the sweep level (clients) the objectives are judged at; None: the decision's concurrency
    concurrency: PosInt | None = None

    @model_validator(mode="after")
    def _some_objective(self) -> DecisionSLO:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("set at least one of ttft_ms, tpot_ms, e2e_ms (or leave [decision.slo] out)")
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
        """The load C6 judges at: the SLOs' own, else the decision's concurrency."""
        return (self.slo.concurrency if self.slo else None) or self.concurrency


class ChangeDetectionConfig(_Strict):
    max_pvalue: Annotated[float, Field(gt=0, lt=1)] = 0.001
    min_magnitude_pct: NonNegFloat = 2.0
    noise_multiple: NonNegFloat = 3.0


CANARY_PATTERN = r"^(baseline|none|[A-Za-z0-9][A-Za-z0-9_.-]*:[A-Za-z0-9_][A-Za-z0-9_.-]*)$"


class AnalysisConfig(_Strict):
    """Bisection of a confirmed change, and the canary that tells host drift from engine change."""

    # the most benchmark runs one bisection may spend; it stops there saying how far it got
    bisect_max_runs: PosInt = 6
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
