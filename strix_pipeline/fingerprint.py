"""Series fingerprint: what must match for two results to sit on one trend line.

Two results are comparable only when the scenario, the engine and its flags, the model and its
quantization, the host, its ROCm / kernel / firmware and the harness version all match. The image
version is deliberately *not* in it: it is the x-axis of a trend. A changed fingerprint starts a new
series ("not comparable"), never a regression.

The fingerprint has two parts, ``<run part>/<scenario>``. ``runs.fingerprint`` stores the run part
(``scenario=None``) because one run covers several scenarios; the warehouse views form the series as
``fingerprint || '/' || scenario``, which is exactly what :func:`series_fingerprint` returns for that
scenario.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from strix_pipeline.records import RunRecord

# Bump when the meaning of the inputs changes, so old and new fingerprints never collide.
_SCHEME = "strix-fp-1"


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


def fingerprint_inputs(
    *,
    scenario: str | None,
    engine_kind: str,
    engine_flags: str | Sequence[str] | None,
    model: str,
    quantization: str,
    host: str,
    rocm_version: str | None,
    kernel: str | None,
    firmware: str | None,
    harness_version: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The normalised inputs of the fingerprint, for showing people *why* two series differ."""
    norm = lambda s: (s or "").strip()  # noqa: E731 - a missing fact and an empty one mean the same
    return {
        "scheme": _SCHEME,
        "scenario": norm(scenario) or None,
        "engine_kind": norm(engine_kind).lower(),
        "engine_flags": _flags(engine_flags),
        "model": norm(model),
        # "q4_k_m" and "Q4_K_M" are one quantization
        "quantization": norm(quantization).upper(),
        "host": norm(host),
        "rocm_version": norm(rocm_version),
        "kernel": norm(kernel),
        "firmware": norm(firmware),
        "harness_version": norm(harness_version),
        "extra": {str(k): extra[k] for k in sorted(extra)} if extra else {},
    }


def series_fingerprint(
    *,
    scenario: str | None,
    engine_kind: str,
    engine_flags: str | Sequence[str] | None,
    model: str,
    quantization: str,
    host: str,
    rocm_version: str | None,
    kernel: str | None,
    firmware: str | None,
    harness_version: str,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The one fingerprint function. ``scenario=None`` gives the run part stored in ``runs.fingerprint``."""
    inputs = fingerprint_inputs(
        scenario=None,
        engine_kind=engine_kind,
        engine_flags=engine_flags,
        model=model,
        quantization=quantization,
        host=host,
        rocm_version=rocm_version,
        kernel=kernel,
        firmware=firmware,
        harness_version=harness_version,
        extra=extra,
    )
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    run_part = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return f"{run_part}/{scenario.strip()}" if scenario and scenario.strip() else run_part


def run_fingerprint(run: RunRecord, scenario: str | None = None) -> str:
    """The fingerprint of a run record's configuration (set ``run.fingerprint`` to this)."""
    return series_fingerprint(
        scenario=scenario,
        engine_kind=run.engine_kind,
        engine_flags=run.engine_flags,
        model=run.model,
        quantization=run.quantization,
        host=run.host,
        rocm_version=run.rocm_version,
        kernel=run.kernel,
        firmware=run.firmware,
        harness_version=run.harness_version,
    )


def differences(a: RunRecord, b: RunRecord) -> dict[str, tuple[Any, Any]]:
    """The fingerprint inputs on which two runs differ: why they are "not comparable"."""

    def inputs(r: RunRecord) -> dict[str, Any]:
        return fingerprint_inputs(
            scenario=None,
            engine_kind=r.engine_kind,
            engine_flags=r.engine_flags,
            model=r.model,
            quantization=r.quantization,
            host=r.host,
            rocm_version=r.rocm_version,
            kernel=r.kernel,
            firmware=r.firmware,
            harness_version=r.harness_version,
        )

    ia, ib = inputs(a), inputs(b)
    return {k: (ia[k], ib[k]) for k in ia if ia[k] != ib[k]}
