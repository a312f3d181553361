"""One benchmark run: guards -> start the engine -> the suite -> memory -> stop -> a ``RunResult``.

A run = (host, engine, image digest, model profile, suite). Whatever happens inside -- an engine that
will not start, a model that does not load, a guard that refuses -- the caller gets a ``RunResult``
whose ``run.status`` and ``failure_reason`` say so, with the log tail: a failure is a result, so the
next engine in the week still runs. A cancelled run (an interrupt: Ctrl-C, an orchestrator's
termination) is a result too, handed over in :class:`RunCancelled` after the engine is stopped."""

from __future__ import annotations

import traceback
from datetime import UTC, datetime

from strix_pipeline.config import StrixConfig
from strix_pipeline.fingerprint import run_fingerprint
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.paths import inside
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.records import RunResult
from strix_pipeline.runner.docker_run import run_docker
from strix_pipeline.runner.estimates import read_estimate
from strix_pipeline.runner.inputs import RunInputs
from strix_pipeline.runner.local import run_local
from strix_pipeline.runner.record import cancelled, join_reasons, new_record
from strix_pipeline.runner.target import BenchmarkTarget, Log, RunCancelled, new_run_id


def run_benchmark(
    config: StrixConfig,
    target: BenchmarkTarget,
    *,
    run_id: str | None = None,
    dagster_run_id: str | None = None,
    log: Log = print,
    scenarios: list[str] | None = None,
    force: bool = False,
    keep_images: frozenset[str] | None = None,
    estimate: Estimate | None = None,
) -> RunResult:
    """Run one target and return everything it produced; never raises for an engine's failure.
    ``keep_images``: the digests some series still needs; on a Box short of disk the other tracked
    images are pruned before the pull (None: none is). ``estimate``: the run's expected duration (the
    night's, read before it); None: read here from the series' history, before the run starts."""
    host_cfg = config.hosts[target.host]
    run_id = run_id or new_run_id(target)
    log_dir = inside(config.artifacts_dir() / "logs", run_id)
    log_dir.mkdir(parents=True, exist_ok=True)
    run = new_record(config, target, run_id, dagster_run_id)
    result = RunResult(run=run)
    log(f"[{run_id}] {target.engine} on {target.host}, model {target.model}, profile {target.profile}")
    try:
        if host_cfg.kind == "local":
            run_local(RunInputs(config, target, result, log_dir, log, scenarios, force))
        else:
            est = estimate or read_estimate(config, target)  # a Box keeps a window the run must fit
            run_docker(RunInputs(config, target, result, log_dir, log, scenarios, force, keep_images, est))
    except EngineStartError as e:
        # notes recorded before the failure (leftovers removed, production not restored) stay
        run.status, run.failure_reason = e.status, join_reasons(e.reason, run.failure_reason)
        run.log_tail = e.log_tail
        log(f"[{run_id}] {e.status}: {e.reason}")
    except Exception as e:  # noqa: BLE001 - a harness bug is recorded as this run's error, not lost
        run.status = "error"
        run.failure_reason = join_reasons(f"{type(e).__name__}: {e}", run.failure_reason)
        run.log_tail = (run.log_tail or "") + "\n" + traceback.format_exc()[-4000:]
        log(f"[{run_id}] error: {run.failure_reason}")
    except BaseException as e:  # noqa: BLE001 - an interrupt: the `with` blocks above have stopped and restored
        interrupt = cancelled(result, e)
        log(f"[{run_id}] {run.failure_reason}")
        raise RunCancelled(result, interrupt) from interrupt
    finally:
        run.ended_at = datetime.now(UTC)
        run.fingerprint = run_fingerprint(run)
    return result
