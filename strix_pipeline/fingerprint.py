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
from collections.abc import Callable, Sequence
from typing import Any

from strix_pipeline.records import RunRecord

# Bump when the meaning of the inputs changes, so old and new fingerprints never collide.
_SCHEME = "strix-fp-3"


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


# The fields of a run that must all match, each with how its spellings are made one.
COMPARABILITY_FIELDS: dict[str, Callable[[Any], Any]] = {
    "engine_kind": lambda v: _text(v).lower(),
    "engine_flags": _flags,
    "model": _text,
    "quantization": lambda v: _text(v).upper(),  # "q4_k_m" and "Q4_K_M" are one quantization
    "host": _text,
    "rocm_version": _text,
    "kernel": _text,
    "kernel_cmdline": _text,  # amdgpu/ttm parameters live here
    "ttm_pages_limit": lambda v: "" if v is None else str(int(v)),  # the GTT cap on unified memory
    "firmware": _text,
    "harness_version": _text,
}


def fingerprint_inputs(**fields: Any) -> dict[str, Any]:
    """The normalised comparability fields, for hashing and for showing people *why* series differ."""
    unknown = set(fields) - set(COMPARABILITY_FIELDS)
    missing = set(COMPARABILITY_FIELDS) - set(fields)
    if unknown or missing:
        raise TypeError(f"fingerprint fields: unknown {sorted(unknown)}, missing {sorted(missing)}")
    return {name: norm(fields[name]) for name, norm in COMPARABILITY_FIELDS.items()}


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
