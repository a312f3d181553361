"""Series fingerprint: what must match for two results to sit on one trend line.

:data:`COMPARABILITY_FIELDS` is the one list of what makes two results comparable (as llama.cpp's
``compare-llama-bench.py`` keeps its ``KEY_PROPERTIES``): the fingerprint hashes exactly those fields
of a run, :func:`differences` explains a break with exactly those fields, and the warehouse views
join series on the fingerprint. The image version is deliberately *not* in it: it is the x-axis of
a trend. A changed fingerprint starts a new series ("not comparable"), never a regression.

Which engine flags count is each engine module's business (``NOT_COMPARABLE_FLAGS`` there: paths,
ports and names); ``runs.engine_flags`` holds what is left.

The fingerprint has two parts, ``<run part>/<scenario>``. ``runs.fingerprint`` stores the run part
(``scenario=None``) because one run covers several scenarios; the warehouse views form the series as
``fingerprint || '/' || scenario``, which is exactly what :func:`series_fingerprint` returns for that
scenario.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from strix_pipeline.config import ScenarioProfile
from strix_pipeline.records import RunRecord

# Bump when the meaning of the inputs changes, so old and new fingerprints never collide.
# 4: the environment the configuration gives the engine (engine_env) is an input.
# 5: the workload (the suite profile's requests, workload_digest) is an input.
_SCHEME = "strix-fp-5"


def _text(value: Any) -> str:
    return (value or "").strip()  # a missing fact and an empty one mean the same


def _flags(engine_flags: str | Sequence[str] | None) -> list[str]:
    # Order is kept: flags carry values positionally ("--ctx-size 4096"), so sorting would merge
    # different configurations.
    if engine_flags is None:
        return []
    if isinstance(engine_flags, str):
        text = engine_flags.strip()
        if not text:
            return []
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = text.split()
        if not isinstance(parsed, list):
            raise ValueError(f"engine_flags must be a JSON list of strings, got {engine_flags!r}")
        engine_flags = parsed
    return [str(f).strip() for f in engine_flags if str(f).strip()]


def _env(engine_env: str | Mapping[str, str] | None) -> list[str]:
    # Sorted: unlike flags, an environment has no order; "NAME=value" keeps the pairs readable in a
    # "what differs" line.
    if engine_env is None:
        return []
    if isinstance(engine_env, str):
        if not engine_env.strip():
            return []
        parsed = json.loads(engine_env)
        if not isinstance(parsed, dict):
            raise ValueError(f"engine_env must be a JSON object of strings, got {engine_env!r}")
        engine_env = parsed
    return sorted(f"{k}={v}" for k, v in engine_env.items())


def env_json(env: Mapping[str, str]) -> str | None:
    """An engine's environment as ``runs.engine_env`` stores it (None: none given)."""
    return json.dumps(dict(sorted(env.items()))) if env else None


# The fields of a run that must all match, each with how its spellings are made one.
COMPARABILITY_FIELDS: dict[str, Callable[[Any], Any]] = {
    "engine_kind": lambda v: _text(v).lower(),
    "engine_flags": _flags,
    "engine_env": _env,  # the configuration's (engine's and image source's), not the image's own ENV
    "model": _text,
    "quantization": lambda v: _text(v).upper(),  # "q4_k_m" and "Q4_K_M" are one quantization
    "host": _text,
    "rocm_version": _text,
    "kernel": _text,
    "kernel_cmdline": _text,  # amdgpu/ttm parameters live here
    "ttm_pages_limit": lambda v: "" if v is None else str(int(v)),  # the GTT cap on unified memory
    "firmware": _text,
    "harness_version": _text,
    "workload": _text,  # the suite profile's requests (workload_digest): quick and standard never mix
}


def fingerprint_inputs(**fields: Any) -> dict[str, Any]:
    """The normalised comparability fields, for hashing and for showing people *why* series differ."""
    unknown = set(fields) - set(COMPARABILITY_FIELDS)
    missing = set(COMPARABILITY_FIELDS) - set(fields)
    if unknown or missing:
        raise TypeError(f"fingerprint fields: unknown {sorted(unknown)}, missing {sorted(missing)}")
    return {name: norm(fields[name]) for name, norm in COMPARABILITY_FIELDS.items()}


def workload_digest(profile: ScenarioProfile, trace_digest: str | None = None) -> str:
    """What a suite profile asks of an engine, as a short digest: every scenario's request shapes,
    counts, levels and seed, and the content digest of the trace it replays (the profile names it
    only: a trace imported again under that name asks other requests). The request timeout is left
    out: it decides when a request is given up, not what is asked. So is the evaluation set: it runs
    after every timed scenario and its answers are checked, not timed (its own version is stored
    with each answer), so adding it to a profile starts no new series."""
    # a profile without a trace digests as it did before profiles could name one: its series go on
    leave_out = {"request_timeout_s"} | ({"trace"} if profile.trace is None else set())
    spec = profile.model_dump(mode="json", exclude=leave_out)
    spec["scenarios"] = [s for s in spec["scenarios"] if s != "quality"]
    # nor do a sweep's open-loop rates while there are none (they came after the closed loop's levels)
    if not spec["concurrency_sweep"].get("rates"):
        spec["concurrency_sweep"].pop("rates", None)
    if trace_digest is not None:
        spec["trace_digest"] = trace_digest
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return "wl-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def series_fingerprint(*, scenario: str | None, **fields: Any) -> str:
    """The one fingerprint function. ``scenario=None`` gives the run part stored in ``runs.fingerprint``."""
    inputs = {"scheme": _SCHEME, **fingerprint_inputs(**fields)}
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    run_part = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return f"{run_part}/{scenario.strip()}" if scenario and scenario.strip() else run_part


def comparability(run: RunRecord) -> dict[str, Any]:
    """A run's comparability fields, as recorded (not yet normalised)."""
    return {name: getattr(run, name) for name in COMPARABILITY_FIELDS}


def run_fingerprint(run: RunRecord, scenario: str | None = None) -> str:
    """The fingerprint of a run record's configuration (set ``run.fingerprint`` to this)."""
    return series_fingerprint(scenario=scenario, **comparability(run))


def differences(a: RunRecord, b: RunRecord) -> dict[str, tuple[Any, Any]]:
    """The comparability fields on which two runs differ: why they are "not comparable"."""
    ia, ib = fingerprint_inputs(**comparability(a)), fingerprint_inputs(**comparability(b))
    return {k: (ia[k], ib[k]) for k in ia if ia[k] != ib[k]}


# --------------------------------------------------------------------------------------------------
# Pairs across engines: what a candidate run and a baseline run must share to be compared (the switch
# decision's C3 and C5). Two engines differ in their engine fields by design; the fields below are the
# ones of the list that describe the host a run met, so a pair is one host state. The ROCm version and
# the firmware are left out: each engine's image reports them from inside (its own ROCm, its own SMI
# tool's firmware lines), so two engines never agree on them.
HOST_FIELDS = ("host", "kernel", "kernel_cmdline", "ttm_pages_limit", "harness_version")
assert set(HOST_FIELDS) <= set(COMPARABILITY_FIELDS)  # a subset of the one list, never a second one

# Which GPU backend an image's engine was built for, by the words of its tag and repository: llama.cpp
# publishes server-rocm-* beside server-vulkan-*, the toolboxes rocm-* beside vulkan-*, and a Vulkan
# build is another engine as far as speed and memory go.
_BACKEND_WORDS = (
    ("vulkan", re.compile(r"vulkan|radv|amdvlk")),
    ("rocm", re.compile(r"rocm\w*|hip\w*|therock|gfx\d+")),
)


def backend_family(repository: str | None, tag: str | None) -> str | None:
    """``"rocm"`` or ``"vulkan"`` from the image's tag, else its repository (the tag first: one
    repository may publish both); None when neither names one (a local build, a plain tag)."""
    for text in (tag, repository):
        words = re.split(r"[^a-z0-9]+", (text or "").lower())
        for family, pattern in _BACKEND_WORDS:
            if any(pattern.fullmatch(w) for w in words):
                return family
    return None


def pair_differences(a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    """Why two runs of different engines are no pair: the backend family and the host fields on which
    they differ (empty: a pair). ``a`` and ``b`` are any records with the run's fields (a RunRecord, the
    decision's RunFacts); a field a record lacks counts as not recorded."""
    out: dict[str, tuple[Any, Any]] = {}
    ba = backend_family(getattr(a, "image_repository", None), getattr(a, "image_tag", None))
    bb = backend_family(getattr(b, "image_repository", None), getattr(b, "image_tag", None))
    if ba != bb:
        out["backend"] = (ba, bb)
    for name in HOST_FIELDS:
        norm = COMPARABILITY_FIELDS[name]
        va, vb = norm(getattr(a, name, None)), norm(getattr(b, name, None))
        if va != vb:
            out[name] = (va, vb)
    return out
