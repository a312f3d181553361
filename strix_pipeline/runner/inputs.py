"""What both host kinds' run functions are given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.config import StrixConfig
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
