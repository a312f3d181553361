"""What both host kinds' run functions are given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.records import RunResult
from strix_pipeline.runner.target import BenchmarkTarget, Log


@dataclass(frozen=True)
class RunInputs:
    """What both host kinds' run functions are given."""

    config: StrixConfig
    target: BenchmarkTarget
    result: RunResult
    log_dir: Path
    log: Log
    scenarios: list[str] | None
    force: bool
    # the image digests some series still needs (the caller's plan): a Box short of disk prunes the
    # rest of its tracked images before a pull; None: nothing is pruned
    keep_images: frozenset[str] | None = None
    # the run's expected duration, read by the caller before the run (a Box's window must hold it);
    # None: the default estimate
    estimate: Estimate | None = None
