"""The one exception a launch raises: the run is recorded with its status, reason and log tail."""

from __future__ import annotations

from typing import Literal

StartStatus = Literal["failed_start", "failed_serve", "failed_guard"]


class EngineStartError(Exception):
    """An engine that did not start, did not serve, or was refused by a guard.

    A failure is a result, not a crash: the caller stores ``status`` as the run's status and keeps
    ``reason`` and ``log_tail`` so a reader sees why without the host.
    """

    def __init__(self, status: StartStatus, reason: str, log_tail: str | None = None) -> None:
        super().__init__(f"{status}: {reason}")
        self.status: StartStatus = status
        self.reason = reason
        self.log_tail = log_tail


ENGINE_DISPLAY_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM", "sglang": "SGLang"}

# What a signal that ended an engine most likely means, in words a user can act on.
_SIGNAL_MEANINGS: dict[int, str] = {
    4: "illegal instruction — this {engine} build uses CPU instructions this machine cannot run",
    6: "aborted — the engine hit an assertion or an unrecoverable error (see the log tail)",
    7: "bus error — a memory-mapped file (the model?) was truncated or the device failed",
    9: "killed (out of memory? the kernel's OOM killer sends SIGKILL) or stopped by force",
    11: "segmentation fault — a crash inside the engine",
    15: "terminated — stopped by a signal from outside (a shutdown, a cancelled run)",
}


def describe_exit(code: int | None, engine: str = "engine", container: bool = False) -> str:
    """How an engine (a kind such as ``llamacpp``, or a name) ended, in words a user can act on:
    ``exited with code 1``, or for a signal ``killed by SIGILL: illegal instruction — …``.

    A process's negative return code is the signal that ended it; a container's exit code 128+N is
    signal N (Docker reports the shell convention).
    """
    import signal

    if code is None:
        return "exited (exit status unknown)"
    signo = -code if code < 0 else (code - 128 if container and 128 < code < 160 else 0)
    if signo <= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(signo).name
    except ValueError:
        name = f"signal {signo}"
    engine = ENGINE_DISPLAY_NAMES.get(engine, engine)
    meaning = _SIGNAL_MEANINGS.get(signo, "ended by a signal").format(engine=engine)
    return f"was killed by {name}: {meaning} (exit code {code})"
