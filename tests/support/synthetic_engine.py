"""The synthetic server (support/synthetic_server.py) as a real process an engine's death can be staged in,
and a small profile for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from strix_pipeline.config import ScenarioProfile
from strix_pipeline.hosts.errors import describe_exit
from support.paths import SUPPORT

SYNTHETIC = SUPPORT / "synthetic_server.py"
SMALL = ScenarioProfile.model_validate(
    {
        "scenarios": ["smoke", "concurrency_sweep", "decode"],
        "request_timeout_s": 10,
        "smoke": {"output_tokens": 4, "json_check": False},
        "concurrency_sweep": {"levels": [1, 2], "requests_per_level": 4, "warmup": 0, "output_tokens": 40},
        "decode": {"requests": 1, "output_tokens": 4},
    }
)


class SyntheticEngine:
    """The synthetic server as a real process, to be killed with SIGKILL at a chosen point."""

    def __init__(self, kill_at: tuple[str, int, int]):
        self.kill_at = kill_at  # (scenario, level, requests done) of on_request
        self.proc = subprocess.Popen(
            [sys.executable, str(SYNTHETIC), "--serve-forever", "--ttft-ms", "5", "--itl-ms", "5"],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline().split()[1])}"  # type: ignore[union-attr]

    def on_request(self, scenario: str, level: int, done: int, total: int) -> None:
        if (scenario, level, done) == self.kill_at:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def exit_description(self) -> str | None:
        code = self.proc.poll()
        return None if code is None else f"synthetic {describe_exit(code, 'synthetic')}"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def __enter__(self) -> SyntheticEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
