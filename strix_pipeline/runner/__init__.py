"""One benchmark run of an image on a host (re-exports only): ``run`` drives it, ``local`` and ``docker``
are the two kinds of host, ``measure`` samples memory around the suite, ``record`` writes the outcome
into the run's record, ``target`` says what a run is for."""

from strix_pipeline.runner.record import cancelled
from strix_pipeline.runner.run import run_benchmark
from strix_pipeline.runner.target import BenchmarkTarget, Log, RunCancelled, new_run_id

__all__ = ["BenchmarkTarget", "Log", "RunCancelled", "cancelled", "new_run_id", "run_benchmark"]
