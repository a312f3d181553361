"""Results of other benchmark tools, loaded into the warehouse as runs (``strix import FILE``).

One reader per tool, each turning one file into one :class:`~strix_pipeline.records.RunResult`
(aggregates only) or refusing it with :class:`PeerFormatError`, the file and the field named:

=============  ============================================================  ======================
``--format``   file                                                          version from
=============  ============================================================  ======================
vllm           ``vllm bench serve --save-result`` JSON                       ``--tool-version``
guidellm       GuideLLM 0.8 ``--output kind=json`` (benchmarks.json)          ``metadata``
aiperf         AIPerf 0.13 ``profile_export_aiperf.json``                    ``aiperf_version``
llama-bench    ``llama-bench -o json`` or ``-o jsonl``                       ``build_number/commit``
=============  ============================================================  ======================

A peer run's ``harness_version`` is ``"<tool> <version>"`` (``"vllm-bench 0.32.0"``), and
``harness_version`` is one of the comparability fields: its fingerprint is its own, so a peer's
numbers never join a strix series (:mod:`strix_pipeline.fingerprint`). ``v_compare`` sets it beside a
strix run of the same host, scenario and level.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from strix_pipeline.peers import aiperf, guidellm, llama_bench, vllm_bench
from strix_pipeline.peers.common import ImportOptions, PeerFormatError, first_line_json, read_json
from strix_pipeline.records import RunResult

__all__ = ["FORMATS", "ImportOptions", "PeerFormatError", "detect_format", "load_peer_file"]

# --format name -> (detect(doc), load(path, opts)); detection tries them in this order
FORMATS: dict[str, tuple[Callable[[Any], bool], Callable[[Path, ImportOptions], RunResult]]] = {
    "vllm": (vllm_bench.detect, vllm_bench.load),
    "guidellm": (guidellm.detect, guidellm.load),
    "aiperf": (aiperf.detect, aiperf.load),
    "llama-bench": (llama_bench.detect, llama_bench.load),
}


def detect_format(path: Path) -> str:
    """Which tool wrote this file, from its keys; refuses a file no reader knows."""
    try:
        doc = read_json(path)
    except PeerFormatError:
        doc = first_line_json(path)  # llama-bench -o jsonl: one object a line
        if doc is None:
            raise
    for name, (detect, _) in FORMATS.items():
        if detect(doc):
            return name
    keys = sorted(doc)[:8] if isinstance(doc, dict) else None
    raise PeerFormatError(
        path,
        "$",
        "not a file of a known tool (vLLM bench serve, GuideLLM 0.8, AIPerf 0.13, llama-bench): "
        + (f"its keys start {keys}" if keys is not None else f"it is a JSON {type(doc).__name__}")
        + "; give --format to read it as one",
    )


def load_peer_file(path: str | Path, fmt: str | None = None, opts: ImportOptions | None = None) -> RunResult:
    """The run one peer file becomes (``fmt``: a key of :data:`FORMATS`, or None to detect it)."""
    path = Path(path)
    if not path.is_file():
        raise PeerFormatError(path, "$", "no such file")
    name = fmt or detect_format(path)
    if name not in FORMATS:
        raise PeerFormatError(path, "--format", f"unknown format {name!r} (known: {', '.join(FORMATS)})")
    return FORMATS[name][1](path, opts or ImportOptions())
